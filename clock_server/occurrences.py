"""A recurring schedule, the key of each of its occurrences, and which occurrences to make
alarms of now: the policy, pure (no clock, no store), tested by a table in
tests/test_occurrences.py.

The rules, in words:
- An occurrence is made an alarm once it falls due within `ahead_ms` of now, so that the
  engine has it in hand before it is due, as it has any alarm.
- An occurrence due more than `MISSED_AFTER_MS` ago that was never made (clock was down, or
  the schedule paused) was missed. `catch_up` says what becomes of the missed ones:
  `skip` makes none of them; `latest` makes the latest of them; `all` makes the latest
  `catch_up_max` of them. A missed occurrence that is made rings at once, late.
- One run makes at most `MAX_PER_RUN` occurrences of a schedule; the next run goes on.
- `next_at` is then the first occurrence not made yet; None once the schedule has ended.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from clock_server.recurrence import Recurrence, local_iso

SKIP, LATEST, ALL = "skip", "latest", "all"
CATCH_UP = (SKIP, LATEST, ALL)
# An occurrence due longer ago than this was missed: a planner run late by less than this
# still makes it (and it rings late), rather than counting it missed.
MISSED_AFTER_MS = 60_000
MAX_PER_RUN = 1_000
MAX_CATCH_UP = 1_000


# Every occurrence's alarm has a business_id under this prefix, which no created alarm may use.
OCCURRENCE_PREFIX = "~schedule/"


def occurrence_key(schedule_id: str, at_ms: int) -> str:
    """The business_id of the occurrence of `schedule_id` at `at_ms`: the same whenever it is
    made, so that it is made, and rings, once."""
    moment = datetime.fromtimestamp(at_ms / 1000, UTC).isoformat(timespec="milliseconds")
    return f"{OCCURRENCE_PREFIX}{schedule_id}/{moment.replace('+00:00', 'Z')}"


def occurrences_prefix(schedule_id: str) -> str:
    """The business_id prefix of every occurrence of `schedule_id`."""
    return f"{OCCURRENCE_PREFIX}{schedule_id}/"


@dataclass(frozen=True, slots=True)
class Schedule:
    """A stored schedule: its calendar, what each occurrence carries (`payload`, a cutoff
    `cutoff_ms` after its time), what becomes of missed ones (`catch_up`, `catch_up_max`),
    and `next_at`, its first occurrence not made an alarm yet (None once it has ended)."""

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
    version: int
    created_at: int
    updated_at: int

    @property
    def calendar(self) -> Recurrence:
        return Recurrence(self.cron, self.every_s, self.timezone, self.start_at, self.end_at)

    def to_json(self) -> dict[str, Any]:
        return {
            "application": self.application,
            "schedule_id": self.schedule_id,
            "cron": self.cron,
            "every_s": self.every_s,
            "timezone": self.timezone,
            "payload": self.payload,
            "start_at": self.start_at,
            "end_at": self.end_at,
            "cutoff_ms": self.cutoff_ms,
            "catch_up": self.catch_up,
            "catch_up_max": self.catch_up_max,
            "paused": self.paused,
            "next_at": None if self.paused else self.next_at,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        }


def preview(calendar: Recurrence, after_ms: int, count: int) -> list[dict[str, Any]]:
    """The next `count` occurrences later than `after_ms`, in UTC and in the calendar's zone."""
    return [
        {"at": at_ms, "utc": local_iso(at_ms, "UTC").replace("+00:00", "Z"),
         "local": local_iso(at_ms, calendar.timezone)}
        for at_ms in calendar.after(after_ms, count)
    ]  # fmt: skip


@dataclass(frozen=True, slots=True)
class Plan:
    """The occurrences to make now, oldest first; the first not made yet (None: none left);
    and whether missed occurrences were passed over (`catch_up`)."""

    make: list[int]
    next_at: int | None
    skipped_missed: bool = False


def plan(
    calendar: Recurrence,
    next_at: int | None,
    now_ms: int,
    ahead_ms: int,
    catch_up: str,
    catch_up_max: int,
) -> Plan:
    """What to make of a schedule whose first occurrence not made yet is `next_at`."""
    if next_at is None:
        return Plan([], None)
    missed_before = now_ms - MISSED_AFTER_MS
    make: list[int] = []
    skipped = False
    after = next_at - 1
    if next_at < missed_before:
        kept = {SKIP: 0, LATEST: 1, ALL: catch_up_max}[catch_up]
        make = calendar.last_before(missed_before, next_at, min(kept, MAX_PER_RUN))
        skipped = (make[0] if make else missed_before) > next_at
        after = missed_before - 1
    upcoming, following = calendar.between(after, now_ms + ahead_ms, MAX_PER_RUN - len(make))
    return Plan(make + upcoming, following, skipped)
