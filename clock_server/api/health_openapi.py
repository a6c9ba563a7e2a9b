"""The OpenAPI entries of the probes, GET /livez, /readyz and /healthz (api/openapi.py adds
them to the document). None needs a token."""

from __future__ import annotations

from typing import Any

from clock_server.model import CHANNELS

_UP_DOWN: dict[str, Any] = {"type": "string", "enum": ["ok", "down"]}

LIVE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["status", "loops", "stalled"],
    "properties": {
        "status": {"type": "string", "enum": ["ok", "stalled"]},
        "loops": {
            "type": "object",
            "description": "each engine loop by thread name (clock-preload, clock-ring, "
            "clock-liveness, ...; engine-status: the engine process's status file, in a web "
            "process); empty in a process with no engine",
            "additionalProperties": {"type": "string", "enum": ["ok", "stalled"]},
        },
        "stalled": {"type": "array", "items": {"type": "string"}},
    },
}

READY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["status", "database"],
    "properties": {
        "status": {"type": "string", "enum": ["ok", "unavailable"]},
        "database": _UP_DOWN,
    },
}

HEALTH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["status", "database", "broker", "channels"],
    "properties": {
        "status": {"type": "string", "enum": ["ok", "degraded", "unavailable"]},
        "database": _UP_DOWN,
        "broker": {"type": "string", "enum": ["ok", "down", "disabled"]},
        "channels": {
            "type": "object",
            "description": "the channels of the registered applications: amqp as the broker "
            "is, webhook and pull ok (empty while the database is down)",
            "properties": {
                channel: {"type": "string", "enum": ["ok", "down", "disabled"]}
                for channel in CHANNELS
            },
            "additionalProperties": False,
        },
    },
}


def _probe(summary: str, answers: dict[str, tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    responses = {
        status: {"description": text, "content": {"application/json": {"schema": schema}}}
        for status, (text, schema) in answers.items()
    }
    # open, also when tokens are configured
    return {"get": {"summary": summary, "security": [], "responses": responses}}


def health_paths() -> dict[str, Any]:
    """The path items of the three probes."""
    return {
        "/livez": _probe(
            "Liveness: the process and the engine's loops are alive; restart it on 503. "
            "Touches neither the database nor the broker",
            {
                "200": ("alive", LIVE_SCHEMA),
                "503": ("a loop is stalled (named in `stalled`)", LIVE_SCHEMA),
            },
        ),
        "/readyz": _probe(
            "Readiness: the process can accept and store alarms (the database answers)",
            {"200": ("ready", READY_SCHEMA), "503": ("the database is down", READY_SCHEMA)},
        ),
        "/healthz": _probe(
            "Each part: database, broker and the channels in use. A broker outage is "
            "`degraded` with 200 (alarms are still taken and kept); 503 only when the "
            "database is down",
            {
                "200": ("ok, or degraded (the broker or a channel is down)", HEALTH_SCHEMA),
                "503": ("unavailable: the database is down", HEALTH_SCHEMA),
            },
        ),
    }
