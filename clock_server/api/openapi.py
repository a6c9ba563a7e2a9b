"""The OpenAPI 3 document, built from the same pydantic models that validate requests."""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel

from clock_server import __version__
from clock_server.api.application_validation import ApplicationSettings
from clock_server.api.health_openapi import health_paths
from clock_server.api.overview_openapi import overview_path
from clock_server.api.pull_openapi import pull_paths
from clock_server.api.rules_openapi import RULES_KEY, declare_rules
from clock_server.api.validation import BulkCancel, BulkRedrive, CreateAlarm, Redrive, UpdateAlarm
from clock_server.api.webhook_openapi import webhook_secret_path
from clock_server.model import (
    APPLICATION_PATTERN,
    DEAD,
    DOT_SEGMENTS,
    EVENT_KINDS,
    EXPIRED,
    MAX_EPOCH_MS,
    PENDING,
    STATUSES,
)

_REF = "#/components/schemas/{model}"
# An application's name, other than "." and "..", which a URL cannot carry as a path segment.
_APPLICATION_NAME = {
    "type": "string",
    "pattern": APPLICATION_PATTERN,
    "not": {"enum": sorted(DOT_SEGMENTS)},
}

_ALARM = {
    "type": "object",
    "required": [
        "id",
        "application",
        "business_id",
        "payload",
        "target_ring_at",
        "latest_ring_at",
        "next_try_time",
        "retry_times",
        "status",
        "rung_at",
        "created_at",
        "updated_at",
        "ring_after_count",
        "count",
    ],
    "properties": {
        "id": {"type": "integer"},
        "application": {"type": "string"},
        "business_id": {"type": "string"},
        "payload": {"type": "string"},
        "target_ring_at": {"type": "integer", "description": "epoch ms"},
        "latest_ring_at": {"type": ["integer", "null"], "description": "epoch ms cutoff"},
        "next_try_time": {
            "type": "integer",
            "description": "epoch ms of the next try; while an engine holds the alarm, "
            "the end of its claim",
        },
        "retry_times": {"type": "integer"},
        "status": {"type": "string", "enum": list(STATUSES)},
        "rung_at": {"type": ["integer", "null"], "description": "epoch ms of the publish"},
        "ring_after_count": {
            "type": ["integer", "null"],
            "description": "a count-triggered alarm rings once this many were counted, or at "
            "target_ring_at (its deadline), whichever comes first; null: by time only",
        },
        "count": {"type": "integer", "description": "counted so far (POST .../count)"},
        "created_at": {"type": "integer"},
        "updated_at": {"type": "integer"},
    },
}

_MS = {"type": "integer", "description": "epoch ms"}
_MS_OR_NULL = {"type": ["integer", "null"], "description": "epoch ms; null: no cutoff"}

_EVENT = {
    "type": "object",
    "required": ["at", "kind", "actor", "detail"],
    "properties": {
        "at": _MS,
        "kind": {"type": "string", "enum": list(EVENT_KINDS)},
        "actor": {
            "type": "string",
            "description": "who: the application whose token was used, 'admin' (an admin "
            "token), 'anonymous' (a server without tokens), 'clock' (the engine), or "
            "'unknown' (created before the server kept histories); never a token",
        },
        "detail": {
            "type": "object",
            "description": "by kind: created (target_ring_at, latest_ring_at); moved (from, "
            "to, and those of changed that the same PATCH changed); changed, a PATCH that "
            "kept the target (latest_ring_at_from, latest_ring_at_to, payload_changed); "
            "attempt_failed (attempt, error, retry_at unless it was the last); rung "
            "(attempt); expired (latest_ring_at, attempts); dead (attempts, error); "
            "redriven (from_status, due_at); count_reached (count, ring_after_count); "
            "requeued, its application left the pull channel (from_channel, due_at)",
            "properties": {
                "target_ring_at": _MS,
                "latest_ring_at": _MS_OR_NULL,
                "from": _MS,
                "to": _MS,
                "latest_ring_at_from": _MS_OR_NULL,
                "latest_ring_at_to": _MS_OR_NULL,
                "payload_changed": {"type": "boolean"},
                "attempt": {"type": "integer", "minimum": 1},
                "attempts": {"type": "integer", "minimum": 0},
                "error": {"type": "string"},
                "retry_at": _MS,
                "from_status": {"type": "string", "enum": list(STATUSES)},
                "count": {"type": "integer"},
                "ring_after_count": {"type": "integer"},
                "due_at": _MS,
            },
        },
    },
}

_ERROR = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "field"],
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "field": {"type": ["string", "null"]},
                "status": {"type": "string", "enum": list(STATUSES)},
            },
        }
    },
}

_BATCH_RESULT = {
    "type": "object",
    "required": ["status"],
    "properties": {
        "status": {"type": "integer", "enum": [200, 201, 400, 403, 413, 429]},
        "alarm": {"$ref": "#/components/schemas/Alarm"},
        "error": _ERROR["properties"]["error"],  # type: ignore[index]
    },
}


_COUNTS = {
    "type": "object",
    "required": ["pending", "due_next_minute", "overdue", "dead"],
    "properties": {
        "pending": {"type": "integer", "minimum": 0},
        "due_next_minute": {
            "type": "integer",
            "minimum": 0,
            "description": "pending, due from now to a minute ahead",
        },
        "overdue": {"type": "integer", "minimum": 0, "description": "pending, due before now"},
        "dead": {"type": "integer", "minimum": 0},
    },
}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"content": {"application/json": {"schema": schema}}}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def _errors(*codes: int) -> dict[str, Any]:
    reasons = {
        400: "invalid request",
        401: "no valid bearer token (only when the server has tokens configured)",
        403: "the token does not cover this application, or may only read (':read')",
        404: "no such alarm",
        409: "the alarm is not pending",
        413: "body or payload over the limit",
        429: "over the application's creation rate (rate_limited, with Retry-After; PATCH and "
        "count take the same rate, in a bucket of their own) or its pending alarms "
        "(capacity_exceeded); nothing was stored or changed",
        503: "database unavailable",
    }
    responses = {
        str(code): {"description": reasons[code], **_json(_ref("Error"))} for code in codes
    }
    if 401 in codes:
        responses["401"]["headers"] = {
            "WWW-Authenticate": {"required": True, "schema": {"type": "string"}}
        }
    if 429 in codes:
        responses["429"]["headers"] = {
            "Retry-After": {
                "description": "whole seconds, with rate_limited",
                "schema": {"type": "string"},
            }
        }
    return responses


_EDGE_ERRORS = {
    "403": "a foreign Origin, or a change with Sec-Fetch-Site: cross-site",
    "413": "a declared body length over the route's limit; nothing was read",
    "415": "a body, or a Content-Type, that is not application/json; nothing was read",
    "421": "a Host this server does not serve (CLOCK_ALLOWED_HOSTS)",
}


def _add_edge_errors(paths: dict[str, Any]) -> None:
    """What any request may be answered before it reaches its route (api.request_guard)."""
    for path, operations in paths.items():
        for method, operation in operations.items():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            responses = operation["responses"]
            codes = ["403"] + (["421"] if path not in ("/livez", "/readyz", "/healthz") else [])
            if method in ("post", "put", "patch", "delete"):
                codes.append("415")
            if method in ("post", "put", "patch"):  # each has its limit (BODY_LIMITS)
                codes.append("413")
            for code in codes:
                responses.setdefault(
                    code, {"description": _EDGE_ERRORS[code], **_json(_ref("Error"))}
                )


_SECURITY_SCHEME = {
    "type": "http",
    "scheme": "bearer",
    "description": "Needed on every /v1 operation when the server is configured with tokens "
    "(CLOCK_TOKENS or CLOCK_TOKENS_FILE); each token covers some applications or all of them.",
}


_KEY_PARAMS = [
    {
        "name": "application",
        "in": "path",
        "required": True,
        "schema": _APPLICATION_NAME,
    },
    {
        "name": "business_id",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "minLength": 1, "maxLength": 128},
    },
]

_NO_FILTER = {"const": "", "description": "empty: the same as leaving the parameter out"}

_LIST_PARAMS = [
    {
        "name": "application",
        "in": "query",
        "description": "only this application's alarms; needed with a token that is not admin",
        "schema": {"anyOf": [_APPLICATION_NAME, _NO_FILTER]},
    },
    {
        "name": "status",
        "in": "query",
        "schema": {"anyOf": [{"type": "string", "enum": list(STATUSES)}, _NO_FILTER]},
    },
    {
        "name": "business_id_prefix",
        "in": "query",
        "description": "keys starting with this (needs application); pages in business_id order",
        "schema": {"anyOf": [{"type": "string", "minLength": 1, "maxLength": 128}, _NO_FILTER]},
    },
    {
        "name": "due_from",
        "in": "query",
        "description": "next_try_time at or after this epoch ms; pages in next_try_time order",
        "schema": {
            "anyOf": [{"type": "integer", "minimum": 0, "maximum": MAX_EPOCH_MS}, _NO_FILTER]
        },
    },
    {
        "name": "due_to",
        "in": "query",
        "description": "next_try_time before this epoch ms; pages in next_try_time order",
        "schema": {
            "anyOf": [{"type": "integer", "minimum": 0, "maximum": MAX_EPOCH_MS}, _NO_FILTER]
        },
    },
    {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "default": 100}},
    {
        "name": "cursor",
        "in": "query",
        "description": "next_cursor of the page before, with the same filters",
        "schema": {"type": "string"},
    },
]

# A due time given by both of them is a 400; either may be null, the same as left out.
_ONE_DUE_TIME = {
    "not": {
        "required": ["target_ring_at", "delay_ms"],
        "properties": {"target_ring_at": {"type": "integer"}, "delay_ms": {"type": "integer"}},
    }
}


def _action_body(model: type[BaseModel], statuses: tuple[str, ...] = ()) -> dict[str, Any]:
    """The body of a re-drive or a bulk action: its model's schema (null is the same as
    leaving a field out), with the statuses its filter may name."""
    schema = model.model_json_schema(ref_template=_REF)
    if "status" in schema["properties"]:
        schema["properties"]["status"]["anyOf"][0]["enum"] = list(statuses)
    if "delay_ms" in schema["properties"]:
        schema.update(_ONE_DUE_TIME)
    return schema


_BULK_OUTCOME = {
    "type": "object",
    "required": ["changed", "done"],
    "properties": {
        "changed": {"type": "integer", "minimum": 0, "description": "alarms this call changed"},
        "done": {
            "type": "boolean",
            "description": "false: the call stopped at its time budget; send it again to go on",
        },
    },
}


def _count_path() -> dict[str, Any]:
    counted = {
        "type": "object",
        "required": ["alarm", "counted", "reached"],
        "properties": {
            "alarm": _ref("Alarm"),
            "counted": {"type": "boolean", "description": "false: a repeated increment_id"},
            "reached": {
                "type": "boolean",
                "description": "this count reached ring_after_count: the alarm rings now",
            },
        },
    }
    body = {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "increment_id": {"type": "string", "minLength": 1, "maxLength": 128},
            "by": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 1},
        },
    }
    return {
        "parameters": _KEY_PARAMS,
        "post": {
            "summary": "Count on a count-triggered alarm; a repeated increment_id counts nothing",
            "requestBody": {"required": False, **_json(body)},
            "responses": {
                "200": {"description": "the alarm after the count", **_json(counted)},
                **_errors(400, 401, 403, 404, 409, 413, 429, 503),
            },
        },
    }


def _action_paths() -> dict[str, Any]:
    """Re-drive, the bulk actions, and what the caller's token may do."""
    bulk_errors = _errors(400, 401, 403, 503)
    return {
        "/v1/alarms/{application}/{business_id}/redrive": {
            "parameters": _KEY_PARAMS,
            "post": {
                "summary": "Make a dead or expired alarm pending again, with a fresh retry "
                "budget, due now or at the time given",
                "requestBody": {
                    "required": False,
                    **_json(_action_body(Redrive)),
                },
                "responses": {
                    "200": _alarm_ok("the alarm, pending again"),
                    **_errors(400, 401, 403, 404, 409, 503),
                },
            },
        },
        "/v1/alarms/redrive": {
            "post": {
                "summary": "Re-drive every dead or expired alarm matching a filter (admin)",
                "requestBody": {
                    "required": False,
                    **_json(_action_body(BulkRedrive, (DEAD, EXPIRED))),
                },
                "responses": {"200": {"description": "how many", **_json(_BULK_OUTCOME)}}
                | bulk_errors,
            }
        },
        "/v1/alarms/cancel": {
            "post": {
                "summary": "Cancel every pending alarm matching a filter (admin)",
                "requestBody": {
                    "required": False,
                    **_json(_action_body(BulkCancel, (PENDING,))),
                },
                "responses": {"200": {"description": "how many", **_json(_BULK_OUTCOME)}}
                | bulk_errors,
            }
        },
        "/v1/whoami": {
            "get": {
                "summary": "What the caller's token may do (never the token)",
                "responses": {
                    "200": {
                        "description": "applications: '*' or a list; read_only: only reads",
                        **_json(
                            {
                                "type": "object",
                                "required": ["authenticated", "applications", "read_only"],
                                "properties": {
                                    "authenticated": {"type": "boolean"},
                                    "applications": {
                                        "anyOf": [
                                            {"const": "*"},
                                            {"type": "array", "items": {"type": "string"}},
                                        ]
                                    },
                                    "read_only": {"type": "boolean"},
                                },
                            }
                        ),
                    },
                    **_errors(401),
                },
            }
        },
    }


_COUNTS_PARAM = {
    "name": "counts",
    "in": "query",
    "description": "false: no counts (null), which over millions of alarms answers in "
    "milliseconds rather than seconds",
    "schema": {"type": "string", "enum": ["true", "false"]},
}

_APPLICATION_PATH_PARAM = {
    "name": "application",
    "in": "path",
    "required": True,
    "schema": _APPLICATION_NAME,
}

_APPLICATION_PARAMS = [_APPLICATION_PATH_PARAM, _COUNTS_PARAM]


def _application_schema() -> dict[str, Any]:
    """An application as the registry routes answer it: its settings (null: no limit, or
    the server's default), whether it is registered, and its live counts."""
    settings = ApplicationSettings.model_json_schema(ref_template=_REF)["properties"]
    properties: dict[str, Any] = {"name": {"type": "string", "pattern": APPLICATION_PATTERN}}
    for name, field in settings.items():
        [value] = [branch for branch in field["anyOf"] if branch.get("type") != "null"]
        kind = value["type"]
        properties[name] = {"type": [kind, "null"], "description": field.get("description", "")}
    properties["channel"]["type"] = "string"  # null in a request means amqp; never in an answer
    properties["webhook_secret_set"] = {
        "type": "boolean",
        "description": "whether a secret signs its webhooks (read it at .../webhook-secret)",
    }
    properties["created_at"] = {
        "type": ["integer", "null"],
        "description": "epoch ms; null when not registered",
    }
    properties["updated_at"] = {"type": ["integer", "null"]}
    properties["registered"] = {
        "type": "boolean",
        "description": "false: the application has alarms but no row in the registry",
    }
    properties["counts"] = {
        "anyOf": [_ref("ApplicationCounts"), {"type": "null"}],
        "description": "null when listed with counts=false",
    }
    return {"type": "object", "required": list(properties), "properties": properties}


def _burst_needs_rate(burst: str, rate: str) -> dict[str, Any]:
    return {
        "if": {"required": [burst], "properties": {burst: {"type": "integer"}}},
        "then": {"required": [rate], "properties": {rate: {"type": "number"}}},
    }


def _settings_schema() -> dict[str, Any]:
    """PUT's body: ApplicationSettings' model schema, plus the rules checked in code that JSON
    Schema can say: a burst needs its rate, the webhook channel a webhook_url. The others are
    declared in api/rules_openapi.py."""
    schema = ApplicationSettings.model_json_schema(ref_template=_REF)
    schema["allOf"] = [
        _burst_needs_rate("create_burst", "create_rate_per_s"),
        _burst_needs_rate("ring_burst", "ring_rate_per_s"),
        {
            "if": {"required": ["channel"], "properties": {"channel": {"const": "webhook"}}},
            "then": {
                "required": ["webhook_url"],
                "properties": {"webhook_url": {"type": "string"}},
            },
        },
    ]
    return schema


def _changes_schema() -> dict[str, Any]:
    """PATCH's body: the same settings, at least one. The rules between settings are checked
    against the stored ones, so the document cannot state them."""
    schema = ApplicationSettings.model_json_schema(ref_template=_REF)
    schema["title"] = "ApplicationChanges"
    schema["minProperties"] = 1
    for field in schema["properties"].values():
        field.pop("default", None)
    return schema


def _application_ok(description: str) -> dict[str, Any]:
    return {"description": description, **_json(_ref("Application"))}


def _admin_errors(*codes: int) -> dict[str, Any]:
    responses = _errors(*codes)
    responses["403"]["description"] = "the token is not an admin token (one for '*')"
    if "404" in responses:
        responses["404"]["description"] = "the application is not registered"
    return responses


def _alarm_ok(description: str) -> dict[str, Any]:
    return {"description": description, **_json(_ref("Alarm"))}


def _only(given: str, absent: str) -> dict[str, Any]:
    return {
        "required": [given],
        "properties": {
            given: {"type": "integer"},
            absent: {"type": "null"},
            "count_only": {"not": {"const": True}},
        },
    }


_COUNT_ONLY = {
    "required": ["count_only", "ring_after_count"],
    "properties": {
        "count_only": {"const": True},
        "ring_after_count": {"type": "integer"},
        "target_ring_at": {"type": "null"},
        "delay_ms": {"type": "null"},
        "latest_ring_at": {"type": "null"},
    },
}


def _create_schema() -> dict[str, Any]:
    """CreateAlarm's model schema, plus the rules the model checks in code: one target only,
    or none and no cutoff for a count-only alarm."""
    schema = CreateAlarm.model_json_schema(ref_template=_REF)
    schema["oneOf"] = [
        _only("target_ring_at", "delay_ms"),
        _only("delay_ms", "target_ring_at"),
        _COUNT_ONLY,
    ]
    return schema


def _update_schema() -> dict[str, Any]:
    """UpdateAlarm's model schema, plus what is checked in code: something to change, not
    both targets, and null only for latest_ring_at (it removes the cutoff)."""
    schema = UpdateAlarm.model_json_schema(ref_template=_REF)
    for name in ("payload", "target_ring_at", "delay_ms"):
        field = schema["properties"][name]
        [value] = [branch for branch in field.pop("anyOf") if branch.get("type") != "null"]
        field.pop("default", None)
        field.update(value)
    schema["minProperties"] = 1
    schema["not"] = {"required": ["target_ring_at", "delay_ms"]}
    return schema


@functools.cache
def openapi_document() -> dict[str, Any]:
    """The API as OpenAPI 3.1 (JSON Schema 2020-12 for bodies)."""
    schemas: dict[str, Any] = {
        "Alarm": _ALARM,
        "Error": _ERROR,
        "CreateAlarm": _create_schema(),
        "UpdateAlarm": _update_schema(),
    }
    schemas["BatchCreate"] = {
        "type": "object",
        "required": ["alarms"],
        "additionalProperties": False,
        "properties": {"alarms": {"type": "array", "minItems": 1, "items": _ref("CreateAlarm")}},
    }
    schemas["BatchResult"] = _BATCH_RESULT
    schemas["AlarmEvent"] = _EVENT
    schemas["Application"] = _application_schema()
    schemas["ApplicationCounts"] = _COUNTS
    schemas["ApplicationSettings"] = _settings_schema()
    schemas["ApplicationChanges"] = _changes_schema()
    paths = {
        "/v1/alarms": {
            "post": {
                "summary": "Create an alarm (idempotent by application and business_id)",
                "requestBody": {"required": True, **_json(_ref("CreateAlarm"))},
                "responses": {
                    "201": _alarm_ok("created"),
                    "200": _alarm_ok("already existed; the stored alarm, unchanged"),
                    **_errors(400, 401, 403, 413, 429, 503),
                },
            },
            "get": {
                "summary": "Search alarms, keyset-paginated: in business_id order with "
                "business_id_prefix, in next_try_time order with due_from or due_to, else in "
                "id order",
                "parameters": _LIST_PARAMS,
                "responses": {
                    "200": {
                        "description": "a page",
                        **_json(
                            {
                                "type": "object",
                                "required": ["alarms", "next_cursor"],
                                "properties": {
                                    "alarms": {"type": "array", "items": _ref("Alarm")},
                                    "next_cursor": {"type": ["string", "null"]},
                                },
                            }
                        ),
                    },
                    **_errors(400, 401, 403, 503),
                },
            },
        },
        "/v1/alarms/batch": {
            "post": {
                "summary": "Create many alarms; one result per item, in order",
                "requestBody": {"required": True, **_json(_ref("BatchCreate"))},
                "responses": {
                    "200": {
                        "description": "per-item results",
                        **_json(
                            {
                                "type": "object",
                                "required": ["results"],
                                "properties": {
                                    "results": {"type": "array", "items": _ref("BatchResult")}
                                },
                            }
                        ),
                    },
                    **_errors(400, 401, 403, 413, 503),
                },
            },
        },
        "/v1/alarms/{application}/{business_id}": {
            "parameters": _KEY_PARAMS,
            "get": {
                "summary": "Read an alarm",
                "responses": {"200": _alarm_ok("the alarm"), **_errors(400, 401, 403, 404, 503)},
            },
            "patch": {
                "summary": "Move, re-cut or change the payload of a pending alarm",
                "requestBody": {"required": True, **_json(_ref("UpdateAlarm"))},
                "responses": {
                    "200": _alarm_ok("changed"),
                    **_errors(400, 401, 403, 404, 409, 413, 429, 503),
                },
            },
            "delete": {
                "summary": "Cancel an alarm; never rung after a 200",
                "description": "A cancel keeps the alarm's record, with status cancelled: "
                "GET of the alarm answers 200 (not 404) until the retention purge deletes it "
                "(CLOCK_RETENTION_DAYS after the cancel), and a create with its key answers "
                "200 with it, cancelled. A DELETE repeated answers 200 too.",
                "responses": {
                    "200": _alarm_ok("cancelled; the alarm stays readable, cancelled"),
                    **_errors(400, 401, 403, 404, 409, 503),
                },
            },
        },
        "/v1/alarms/{application}/{business_id}/events": {
            "parameters": _KEY_PARAMS,
            "get": {
                "summary": "An alarm's history, oldest first (its latest 1,000 recorded events)",
                "description": "A business_id that ends in '/events' is read with GET of the "
                "alarm with that '/' sent as %2F.",
                "responses": {
                    "200": {
                        "description": "the events",
                        **_json(
                            {
                                "type": "object",
                                "required": ["events"],
                                "properties": {
                                    "events": {"type": "array", "items": _ref("AlarmEvent")}
                                },
                            }
                        ),
                    },
                    **_errors(400, 401, 403, 404, 503),
                },
            },
        },
        "/v1/applications": {
            "get": {
                "summary": "Every application: the registered ones and any other with alarms, "
                "by name, with live counts (admin token)",
                "parameters": [_COUNTS_PARAM],
                "responses": {
                    "200": {
                        "description": "the applications",
                        **_json(
                            {
                                "type": "object",
                                "required": ["applications"],
                                "properties": {
                                    "applications": {
                                        "type": "array",
                                        "items": _ref("Application"),
                                    }
                                },
                            }
                        ),
                    },
                    **_admin_errors(400, 401, 403, 503),
                },
            },
        },
        "/v1/applications/{application}": {
            "parameters": _APPLICATION_PARAMS,
            "get": {
                "summary": "Read a registered application's settings and counts (admin token)",
                "responses": {
                    "200": _application_ok("the application"),
                    **_admin_errors(400, 401, 403, 404, 503),
                },
            },
            "put": {
                "summary": "Set every setting of an application, registering it if needed; "
                "a setting left out is null (admin token)",
                "requestBody": {"required": True, **_json(_ref("ApplicationSettings"))},
                "responses": {
                    "201": _application_ok("registered now"),
                    "200": _application_ok("was registered; every setting replaced"),
                    **_admin_errors(400, 401, 403, 413, 503),
                },
            },
            "patch": {
                "summary": "Change some settings of a registered application; null clears one "
                "(admin token)",
                "requestBody": {"required": True, **_json(_ref("ApplicationChanges"))},
                "responses": {
                    "200": _application_ok("changed"),
                    **_admin_errors(400, 401, 403, 404, 413, 503),
                },
            },
        },
    }
    paths.update(health_paths())
    paths.update(_action_paths())
    paths["/v1/alarms/{application}/{business_id}/count"] = _count_path()
    paths["/v1/overview"] = overview_path(_admin_errors(401, 403, 503))
    paths.update(pull_paths(_errors(400, 401, 403, 413, 503), _errors(429)["429"]))
    paths["/v1/applications/{application}/webhook-secret"] = webhook_secret_path(
        [_APPLICATION_PATH_PARAM], _admin_errors(400, 401, 403, 404, 503)
    )
    _add_edge_errors(paths)
    declare_rules(paths)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "clock",
            "version": __version__,
            "description": "Alarms stored in a database and rung to RabbitMQ on time. "
            "An integer is written as one: 735, not 735.0, which JSON Schema also counts as "
            "an integer (a 400). The rules the schema cannot state are declared on each "
            f"operation under {RULES_KEY}.",
        },
        "paths": paths,
        "security": [{"bearer": []}],
        "components": {"schemas": schemas, "securitySchemes": {"bearer": _SECURITY_SCHEME}},
    }
