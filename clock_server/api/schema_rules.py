"""The rules between a request body's fields that its model checks in code, said in JSON
Schema: each model hands its own to pydantic (`json_schema_extra`), so the schema the
OpenAPI document generates from it states them too."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# Where the document keeps its schemas; pydantic writes every reference with it.
REF = "#/components/schemas/{model}"


def _only(given: str, absent: str) -> dict[str, Any]:
    return {
        "required": [given],
        "properties": {given: {"type": "integer"}, absent: {"type": "null"}},
    }


# CreateAlarm: one target only, or none and no cutoff for a count-only alarm. Said with
# if/then/else rather than a oneOf beside the properties, which client generators take for
# a union of three types without the properties.
CREATE_ALARM: dict[str, Any] = {
    "if": {"required": ["count_only"], "properties": {"count_only": {"const": True}}},
    "then": {
        "required": ["ring_after_count"],
        "properties": {
            "ring_after_count": {"type": "integer"},
            "target_ring_at": {"type": "null"},
            "delay_ms": {"type": "null"},
            "latest_ring_at": {"type": "null"},
        },
    },
    "else": {"oneOf": [_only("target_ring_at", "delay_ms"), _only("delay_ms", "target_ring_at")]},
}

# BatchCreate's items are validated one by one (each gets its own result), so its model
# takes any list; the document says what each item should be.
BATCH_ALARMS: dict[str, Any] = {
    "type": "array",
    "minItems": 1,
    "items": {"$ref": REF.format(model="CreateAlarm")},
}


def update_alarm(schema: dict[str, Any]) -> None:
    """UpdateAlarm: something to change, not both targets, and null only for latest_ring_at
    (it removes the cutoff)."""
    for name in ("payload", "target_ring_at", "delay_ms"):
        field = schema["properties"][name]
        [value] = [branch for branch in field.pop("anyOf") if branch.get("type") != "null"]
        field.pop("default", None)
        field.update(value)
    schema["minProperties"] = 1
    schema["not"] = {"required": ["target_ring_at", "delay_ms"]}


# Redrive: a due time given by both of them is a 400; either may be null, the same as left out.
ONE_DUE_TIME: dict[str, Any] = {
    "not": {
        "required": ["target_ring_at", "delay_ms"],
        "properties": {"target_ring_at": {"type": "integer"}, "delay_ms": {"type": "integer"}},
    }
}


def bulk_action(*statuses: str) -> Callable[[dict[str, Any]], None]:
    """A bulk action's body (BulkRedrive, BulkCancel): the statuses its filter may name, and
    with a due time, ONE_DUE_TIME."""

    def rules(schema: dict[str, Any]) -> None:
        schema["properties"]["status"]["anyOf"][0]["enum"] = list(statuses)
        if "delay_ms" in schema["properties"]:
            schema.update(ONE_DUE_TIME)

    return rules


def _burst_needs_rate(burst: str, rate: str) -> dict[str, Any]:
    return {
        "if": {"required": [burst], "properties": {burst: {"type": "integer"}}},
        "then": {"required": [rate], "properties": {rate: {"type": "number"}}},
    }


# ApplicationSettings (PUT): a burst needs its rate, the webhook channel a webhook_url.
# retry_cap_s must also be at least retry_base_s, which JSON Schema cannot say
# (api/openapi/rules.py).
APPLICATION_SETTINGS: dict[str, Any] = {
    "allOf": [
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
}


def application_changes(schema: dict[str, Any]) -> None:
    """ApplicationChanges (PATCH): at least one setting; one left out keeps its value. The
    rules between settings are checked against the stored ones, so the schema cannot say
    them."""
    schema["minProperties"] = 1
    for field in schema["properties"].values():
        field.pop("default", None)


def schedule_changes(schema: dict[str, Any]) -> None:
    """ScheduleChanges (PATCH): at least one field; null only for cron, every_s (the other
    one given), end_at and cutoff_ms."""
    schema["minProperties"] = 1
    for name in ("timezone", "payload", "start_at", "catch_up", "catch_up_max", "paused"):
        field = schema["properties"][name]
        [value] = [branch for branch in field.pop("anyOf") if branch.get("type") != "null"]
        field.pop("default", None)
        field.update(value)
