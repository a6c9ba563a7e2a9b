"""Schedule request bodies and query strings turned into a checked Schedule, or a 400 that
names the field."""

from __future__ import annotations

import base64
import binascii
import json
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field

from clock_server.api import schema_rules
from clock_server.api.validation import EpochMs, Text, _Body, _validate, _whole_number
from clock_server.errors import ValidationError
from clock_server.model import APPLICATION_CHARS, is_application_name
from clock_server.occurrences import MAX_CATCH_UP, Schedule
from clock_server.recurrence import MAX_EVERY_S, MIN_EVERY_S, recurrence

MAX_CUTOFF_MS = 366 * 24 * 3600 * 1000
MAX_PREVIEW = 100
MAX_PAGE = 500
DEFAULT_CATCH_UP_MAX = 100

Cron = Annotated[Text, Field(min_length=1, max_length=255, description="5 fields, or 6 "
                             "with seconds first (cron's calendar, as Debian's)")]  # fmt: skip
EveryS = Annotated[int, Field(ge=MIN_EVERY_S, le=MAX_EVERY_S, description="an interval in "
                              "seconds, counted from start_at")]  # fmt: skip
Zone = Annotated[Text, Field(min_length=1, max_length=64, description="an IANA time zone")]
CutoffMs = Annotated[int, Field(ge=0, le=MAX_CUTOFF_MS, description="an occurrence not rung "
                                "this long after its time expires")]  # fmt: skip
CatchUp = Literal["skip", "latest", "all"]
CatchUpMax = Annotated[int, Field(ge=1, le=MAX_CATCH_UP)]


class ScheduleSettings(_Body):
    """PUT /v1/schedules/{application}/{schedule_id}: exactly one of cron and every_s."""

    cron: Cron | None = None
    every_s: EveryS | None = None
    timezone: Zone = "UTC"
    payload: Text
    start_at: EpochMs | None = None
    end_at: EpochMs | None = None
    cutoff_ms: CutoffMs | None = None
    catch_up: CatchUp = "skip"
    catch_up_max: CatchUpMax = DEFAULT_CATCH_UP_MAX
    paused: bool = False


class ScheduleChanges(_Body):
    """PATCH /v1/schedules/{application}/{schedule_id}: the fields given replace the stored
    ones; null clears end_at or cutoff_ms; giving cron clears every_s, and the reverse."""

    model_config = ConfigDict(json_schema_extra=schema_rules.schedule_changes)

    cron: Cron | None = None
    every_s: EveryS | None = None
    timezone: Zone | None = None
    payload: Text | None = None
    start_at: EpochMs | None = None
    end_at: EpochMs | None = None
    cutoff_ms: CutoffMs | None = None
    catch_up: CatchUp | None = None
    catch_up_max: CatchUpMax | None = None
    paused: bool | None = None


def check_schedule_id(schedule_id: str) -> None:
    if not is_application_name(schedule_id):
        raise ValidationError(
            f"schedule_id must be 1 to 64 characters of {APPLICATION_CHARS}", field="schedule_id"
        )


def schedule_from(
    application: str,
    schedule_id: str,
    data: dict[str, Any],
    now_ms: int,
    payload_max_bytes: int,
    stored_start: int | None = None,
) -> Schedule:
    """The schedule a PUT body makes, its calendar checked (recurrence.recurrence). Without
    start_at it starts at `stored_start` (that of the schedule it replaces), else now: a PUT
    sent again does not move an interval's anchor."""
    body: ScheduleSettings = _validate(ScheduleSettings, data, payload_max_bytes)
    fields = body.model_dump()
    if body.start_at is None:
        fields["start_at"] = stored_start
    return _checked(application, schedule_id, fields, now_ms)


def changed_schedule(
    stored: Schedule, data: dict[str, Any], now_ms: int, payload_max_bytes: int
) -> Schedule:
    """`stored` with a PATCH body's fields, checked as a whole."""
    body: ScheduleChanges = _validate(ScheduleChanges, data, payload_max_bytes)
    given = body.model_fields_set
    if not given:
        raise ValidationError("give at least one field to change")
    fields = {name: getattr(stored, name) for name in ScheduleChanges.model_fields}
    if "cron" in given and "every_s" not in given:
        fields["every_s"] = None
    if "every_s" in given and "cron" not in given:
        fields["cron"] = None
    for name in given:
        value = getattr(body, name)
        if value is None and name not in ("cron", "every_s", "end_at", "cutoff_ms"):
            raise ValidationError(f"{name} cannot be null", field=name)
        fields[name] = value
    return _checked(stored.application, stored.schedule_id, fields, now_ms)


def _checked(application: str, schedule_id: str, fields: dict[str, Any], now_ms: int) -> Schedule:
    """The Schedule of `fields`; one with no start_at starts now."""
    start = now_ms if fields["start_at"] is None else fields["start_at"]
    calendar = recurrence(
        fields["cron"], fields["every_s"], fields["timezone"], start, fields["end_at"]
    )
    return Schedule(
        application=application,
        schedule_id=schedule_id,
        cron=calendar.cron,
        every_s=calendar.every_s,
        timezone=calendar.timezone,
        payload=fields["payload"],
        start_at=calendar.start_ms,
        end_at=calendar.end_ms,
        cutoff_ms=fields["cutoff_ms"],
        catch_up=fields["catch_up"],
        catch_up_max=fields["catch_up_max"],
        paused=fields["paused"],
        next_at=None,
        version=0,
        created_at=now_ms,
        updated_at=now_ms,
    )


def preview_count(raw: str | None) -> int:
    """GET .../next?count=N: 1 to MAX_PREVIEW, 5 by default."""
    return 5 if raw is None else _whole_number("count", raw, MAX_PREVIEW, 1)


def page_limit(raw: str | None) -> int:
    return 100 if raw is None else _whole_number("limit", raw, MAX_PAGE, 1)


def after_cursor(cursor: str) -> tuple[str, str]:
    """The (application, schedule_id) a list's `next_cursor` points after; 400 for any other."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        value = json.loads(raw)
    except (binascii.Error, UnicodeDecodeError, ValueError, RecursionError):
        value = None
    if (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(part, str) and is_application_name(part) for part in value)
    ):
        return value[0], value[1]
    raise ValidationError("cursor is not one this server handed out", field="cursor")
