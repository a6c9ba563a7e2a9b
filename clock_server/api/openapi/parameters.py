"""The parameters of the operations: in the path, in the query, as the routes read them."""

from __future__ import annotations

from typing import Any

from clock_server.model import APPLICATION_PATTERN, DOT_SEGMENTS, MAX_EPOCH_MS, STATUSES

# An application's name, other than "." and "..", which a URL cannot carry as a path segment.
APPLICATION_NAME: dict[str, Any] = {
    "type": "string",
    "pattern": APPLICATION_PATTERN,
    "not": {"enum": sorted(DOT_SEGMENTS)},
}
APPLICATION: dict[str, Any] = {
    "name": "application",
    "in": "path",
    "required": True,
    "schema": APPLICATION_NAME,
}
KEY = [
    APPLICATION,
    {
        "name": "business_id",
        "in": "path",
        "required": True,
        "schema": {"type": "string", "minLength": 1, "maxLength": 128},
    },
]
SCHEDULE_KEY = [
    APPLICATION,
    {
        "name": "schedule_id",
        "in": "path",
        "required": True,
        "schema": APPLICATION_NAME,
    },
]
COUNTS: dict[str, Any] = {
    "name": "counts",
    "in": "query",
    "description": "false: no counts (null), which over millions of alarms answers in "
    "milliseconds rather than seconds",
    "schema": {"type": "string", "enum": ["true", "false"]},
}

_NO_FILTER = {"const": "", "description": "empty: the same as leaving the parameter out"}


def _only_application(things: str) -> dict[str, Any]:
    return {
        "name": "application",
        "in": "query",
        "description": f"only this application's {things}; needed with a token that is not admin",
        "schema": {"anyOf": [APPLICATION_NAME, _NO_FILTER]},
    }


SCHEDULE_LIST = [
    _only_application("schedules"),
    {
        "name": "limit",
        "in": "query",
        "schema": {"type": "integer", "minimum": 1, "maximum": 500, "default": 100},
    },
    {
        "name": "cursor",
        "in": "query",
        "description": "a page's next_cursor",
        "schema": {"anyOf": [{"type": "string", "minLength": 1}, _NO_FILTER]},
    },
]

SEARCH = [
    _only_application("alarms"),
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

STATS = [
    {
        "name": "minutes",
        "in": "query",
        "description": "how many minutes, the current one last",
        "schema": {"type": "integer", "minimum": 1, "maximum": 1440, "default": 60},
    },
    {
        "name": "application",
        "in": "query",
        "description": "only this application (its own, with an application's token)",
        "schema": APPLICATION_NAME,
    },
]

# The parameters every operation of a path takes.
OF_PATH: dict[str, list[dict[str, Any]]] = {
    "/v1/alarms/{application}/{business_id}": KEY,
    "/v1/alarms/{application}/{business_id}/events": KEY,
    "/v1/alarms/{application}/{business_id}/count": KEY,
    "/v1/alarms/{application}/{business_id}/redrive": KEY,
    "/v1/applications/{application}": [APPLICATION, COUNTS],
    "/v1/applications/{application}/webhook-secret": [APPLICATION],
    "/v1/applications/{application}/pull": [APPLICATION],
    "/v1/applications/{application}/ack": [APPLICATION],
    **{
        f"/v1/schedules/{{application}}/{{schedule_id}}{tail}": SCHEDULE_KEY
        for tail in ("", "/pause", "/resume", "/next")
    },
}
