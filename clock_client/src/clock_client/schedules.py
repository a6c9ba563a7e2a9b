"""Recurring schedules as the server answers them, and the calls that read and change them
(``ClockClient.schedule`` and the rest)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .calls import Call, _segment
from .errors import ClockError

SCHEDULE_FIELDS = (
    "cron", "every_s", "timezone", "payload", "start_at", "end_at", "cutoff_ms", "catch_up",
    "catch_up_max", "paused",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Schedule:
    """A stored schedule. Its occurrences ring as alarms whose ``business_id`` is
    ``~schedule/<schedule_id>/<the occurrence's time in UTC>``; ``next_at`` is the first not
    made an alarm yet (None while paused or once ended)."""

    application: str
    schedule_id: str
    cron: str | None
    every_s: int | None
    timezone: str
    payload: str
    start_at: int
    end_at: int | None
    cutoff_ms: int | None
    catch_up: str
    catch_up_max: int
    paused: bool
    next_at: int | None
    created_at: int
    updated_at: int


@dataclass(frozen=True, slots=True)
class Occurrence:
    """One occurrence to come: epoch ms, and ISO 8601 in UTC and in the schedule's zone."""

    at: int
    utc: str
    local: str


@dataclass(frozen=True, slots=True)
class SchedulePage:
    schedules: tuple[Schedule, ...]
    next_cursor: str | None


def schedule_from_json(data: Mapping[str, Any]) -> Schedule:
    """A Schedule from a decoded answer; ClockError(code="bad_response") if malformed."""
    try:
        return Schedule(**{name: data[name] for name in Schedule.__slots__})  # type: ignore[arg-type]
    except (KeyError, TypeError) as error:
        raise ClockError(f"not a schedule: {error}", code="bad_response") from None


def _page(data: Mapping[str, Any]) -> SchedulePage:
    try:
        found = tuple(schedule_from_json(item) for item in data["schedules"])
        return SchedulePage(found, data["next_cursor"])
    except (KeyError, TypeError) as error:
        raise ClockError(f"not a page of schedules: {error}", code="bad_response") from None


def _occurrences(data: Mapping[str, Any]) -> tuple[Occurrence, ...]:
    try:
        return tuple(Occurrence(int(o["at"]), o["utc"], o["local"]) for o in data["occurrences"])
    except (KeyError, TypeError, ValueError) as error:
        raise ClockError(f"not occurrences: {error}", code="bad_response") from None


def schedule_path(application: str, schedule_id: str) -> str:
    return (
        f"/v1/schedules/{_segment(application, 'application')}/"
        f"{_segment(schedule_id, 'schedule_id')}"
    )


def check_fields(fields: Mapping[str, Any]) -> None:
    unknown = sorted(set(fields) - set(SCHEDULE_FIELDS))
    if unknown:
        raise TypeError(f"not fields of a schedule: {', '.join(unknown)}")


def put(application: str, schedule_id: str, fields: Mapping[str, Any]) -> Call[Schedule]:
    check_fields(fields)
    body = {name: value for name, value in fields.items() if value is not None}
    return Call("PUT", schedule_path(application, schedule_id), schedule_from_json, json=body)


def patch(application: str, schedule_id: str, fields: Mapping[str, Any]) -> Call[Schedule]:
    check_fields(fields)
    path = schedule_path(application, schedule_id)
    return Call("PATCH", path, schedule_from_json, json=dict(fields))


def get(application: str, schedule_id: str) -> Call[Schedule]:
    return Call("GET", schedule_path(application, schedule_id), schedule_from_json)


def delete(application: str, schedule_id: str) -> Call[Schedule]:
    return Call("DELETE", schedule_path(application, schedule_id), schedule_from_json)


def pause(application: str, schedule_id: str, paused: bool) -> Call[Schedule]:
    path = schedule_path(application, schedule_id) + ("/pause" if paused else "/resume")
    return Call("POST", path, schedule_from_json)


def upcoming(application: str, schedule_id: str, count: int) -> Call[tuple[Occurrence, ...]]:
    path = schedule_path(application, schedule_id) + "/next"
    return Call("GET", path, _occurrences, params={"count": str(count)})


def listing(application: str | None, limit: int, cursor: str | None) -> Call[SchedulePage]:
    params = {"limit": str(limit)}
    if application is not None:
        params["application"] = application
    if cursor is not None:
        params["cursor"] = cursor
    return Call("GET", "/v1/schedules", _page, params=params)
