"""The OpenAPI entries of the pull channel's routes (api/pull_routes.py); api/openapi.py adds
them to the document. The bounds here are those pull_routes validates."""

from __future__ import annotations

from typing import Any

from clock_server.model import APPLICATION_PATTERN, CHANNELS, DOT_SEGMENTS

_ALARM_ID = {"type": "string", "pattern": "^[0-9]{1,19}$", "description": "an alarm id"}

MESSAGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "an alarm's message, the same on every channel",
    "required": [
        "id",
        "application",
        "business_id",
        "payload",
        "target_ring_at",
        "attempt",
        "published_at",
    ],
    "properties": {
        "id": {"type": "integer", "description": "the alarm's id, the same on every attempt"},
        "application": {"type": "string"},
        "business_id": {"type": "string"},
        "payload": {"type": "string"},
        "target_ring_at": {"type": "integer", "description": "epoch ms"},
        "attempt": {"type": "integer", "minimum": 1, "description": "this lease's number"},
        "published_at": {"type": "integer", "description": "epoch ms: when it was leased"},
        "trigger": {
            "type": "string",
            "enum": ["count", "time"],
            "description": "a count-triggered alarm only: what made it ring",
        },
        "count": {"type": "integer", "description": "a count-triggered alarm only: its count"},
    },
}

_PULL_REQUEST: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "max": {"type": "integer", "minimum": 1, "maximum": 100, "default": 10},
        "wait_s": {
            "type": "number",
            "minimum": 0,
            "maximum": 20,
            "default": 0,
            "description": "how long to wait for a message when none is ready",
        },
    },
}

_PULLED: dict[str, Any] = {
    "type": "object",
    "required": ["messages"],
    "properties": {
        "messages": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["id", "attempt", "leased_until", "message"],
                "properties": {
                    "id": _ALARM_ID,
                    "attempt": {"type": "integer", "minimum": 1},
                    "leased_until": {
                        "type": "integer",
                        "description": "epoch ms: unacked by then, it is leased again",
                    },
                    "message": MESSAGE_SCHEMA,
                },
            },
        }
    },
}

_ACK_REQUEST: dict[str, Any] = {
    "type": "object",
    "required": ["ids"],
    "additionalProperties": False,
    "properties": {
        "ids": {"type": "array", "minItems": 1, "maxItems": 1_000, "items": _ALARM_ID},
    },
}

_ACKED: dict[str, Any] = {
    "type": "object",
    "required": ["acked", "not_acked"],
    "properties": {
        "acked": {"type": "array", "items": _ALARM_ID, "description": "now rung"},
        "not_acked": {
            "type": "array",
            "items": _ALARM_ID,
            "description": "not this application's pull messages still delivering: unknown, "
            "or already rung, expired or dead; nothing changed",
        },
    },
}

_NOT_PULL: dict[str, Any] = {
    "description": "the application does not take the pull channel",
    "content": {
        "application/json": {
            "schema": {
                "type": "object",
                "required": ["error"],
                "properties": {
                    "error": {
                        "type": "object",
                        "required": ["code", "message", "field", "status"],
                        "properties": {
                            "code": {"const": "conflict"},
                            "message": {"type": "string"},
                            "field": {"type": ["string", "null"]},
                            "status": {
                                "type": "string",
                                "enum": list(CHANNELS),
                                "description": "the channel the application takes",
                            },
                        },
                    }
                },
            }
        }
    },
}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def pull_paths(errors: dict[str, Any], too_many: dict[str, Any]) -> dict[str, Any]:
    """The path items of pull and ack; `errors` are the document's error responses for them
    (400, 401, 403, 413, 503), `too_many` its 429 with Retry-After."""
    parameters = [
        {
            "name": "application",
            "in": "path",
            "required": True,
            "schema": {
                "type": "string",
                "pattern": APPLICATION_PATTERN,
                "not": {"enum": sorted(DOT_SEGMENTS)},
            },
        }
    ]
    return {
        "/v1/applications/{application}/pull": {
            "parameters": parameters,
            "post": {
                "summary": "Lease up to max of a pull application's due messages for its "
                "visibility timeout (pull_visibility_s); waits up to wait_s for one when none "
                "is ready. A message not acked in time is leased again with the next attempt, "
                "and dead once retry_max more leases have ended unacked",
                "requestBody": {"required": False, **_json(_PULL_REQUEST)},
                "responses": {
                    "200": {"description": "the messages leased, maybe none", **_json(_PULLED)},
                    "409": _NOT_PULL,
                    "429": {
                        **too_many,
                        "description": "as many pulls wait in this web process as it lets wait "
                        "at once (a quarter of CLOCK_HTTP_THREADS, half of that for one "
                        "application); pull again after Retry-After",
                    },
                    **errors,
                },
            },
        },
        "/v1/applications/{application}/ack": {
            "parameters": parameters,
            "post": {
                "summary": "Mark rung the pull messages handled, by id, whether or not their "
                "lease has ended",
                "requestBody": {"required": True, **_json(_ACK_REQUEST)},
                "responses": {
                    "200": {"description": "which ids were acked", **_json(_ACKED)},
                    **errors,
                },
            },
        },
    }
