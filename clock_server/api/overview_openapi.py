"""The OpenAPI entry of GET /v1/overview (api/openapi.py adds it to the document)."""

from __future__ import annotations

from typing import Any

from clock_server.model import STATUSES

_COUNT: dict[str, Any] = {
    "type": "object",
    "required": ["count", "capped"],
    "properties": {
        "count": {"type": "integer", "minimum": 0},
        "capped": {"type": "boolean", "description": "true: at least `count`; counting stopped"},
    },
}
_MS_OR_NULL: dict[str, Any] = {"type": ["integer", "null"]}

OVERVIEW_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": [
        "now",
        "count_cap",
        "application_count_cap",
        "by_status",
        "overdue",
        "due",
        "by_application",
        "lateness",
        "health",
    ],
    "properties": {
        "now": {"type": "integer", "description": "epoch ms"},
        "count_cap": {"type": "integer", "description": "where a count by status stops"},
        "application_count_cap": {
            "type": "integer",
            "description": "where a count of one application stops",
        },
        "by_status": {
            "type": "object",
            "required": list(STATUSES),
            "properties": {status: _COUNT for status in STATUSES},
        },
        "overdue": {**_COUNT, "description": "pending, due before now"},
        "due": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["within_ms", "count", "capped"],
                "properties": {"within_ms": {"type": "integer"}, **_COUNT["properties"]},
                "description": "pending, due from now to now + within_ms",
            },
        },
        "by_application": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["application", "pending", "dead"],
                "properties": {
                    "application": {"type": "string"},
                    "pending": _COUNT,
                    "dead": _COUNT,
                },
            },
        },
        "lateness": {
            "type": "object",
            "required": ["window_ms", "sample", "p50_ms", "p99_ms", "max_ms"],
            "description": "rung_at - target_ring_at of the latest rings within window_ms",
            "properties": {
                "window_ms": {"type": "integer"},
                "sample": {"type": "integer", "minimum": 0},
                "p50_ms": _MS_OR_NULL,
                "p99_ms": _MS_OR_NULL,
                "max_ms": _MS_OR_NULL,
            },
        },
        "health": {
            "type": "object",
            "required": ["database", "broker", "live_engines", "engines"],
            "properties": {
                "database": {"type": "string", "enum": ["ok", "down"]},
                "broker": {"type": "string", "enum": ["ok", "down", "disabled"]},
                "live_engines": {"type": ["integer", "null"]},
                "engines": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["instance_id", "started_at", "heartbeat_at", "beating"],
                        "properties": {
                            "instance_id": {"type": "string"},
                            "started_at": {"type": "integer"},
                            "heartbeat_at": {"type": "integer"},
                            "beating": {"type": "boolean"},
                        },
                    },
                },
            },
        },
    },
}


def overview_path(errors: dict[str, Any]) -> dict[str, Any]:
    """The path item; `errors` are the document's error responses for it."""
    return {
        "get": {
            "summary": "What the console's overview shows: counts capped at count_cap, alarms "
            "due soon, recent lateness, health (a token of every application)",
            "responses": {
                "200": {
                    "description": "the overview",
                    "content": {"application/json": {"schema": OVERVIEW_SCHEMA}},
                },
                **errors,
            },
        }
    }
