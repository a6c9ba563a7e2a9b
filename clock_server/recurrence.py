"""When a schedule rings: a cron expression or an interval, read in an IANA time zone, and the
occurrences it makes, in UTC milliseconds. Pure: no clock, no store.

Cron expressions are parsed and stepped by cronsim, whose calendar is Debian cron's:
- 5 fields (minute, hour, day of month, month, day of week), or 6 with seconds first; `L`
  for the last day of the month, `#` for the n-th weekday, names of months and days;
- when both day fields are restricted, either matching is enough (cron's rule);
- a time the clocks skip (spring forward) rings once, at the jump: 02:30 in Berlin on the
  last Sunday of March rings at 03:00 CEST;
- a time the clocks repeat (fall back) rings once, at its first pass, when its hour is
  fixed; an expression whose hour is `*` or a step rings in both passes, every real hour.

An interval (`every_s`) counts in UTC from its anchor, so clocks changing do not move it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from clock_server.errors import ValidationError
from clock_server.model import MAX_EPOCH_MS

MIN_EVERY_S = 1
MAX_EVERY_S = 366 * 24 * 3600
MAX_TIMEZONE_LENGTH = 64


@dataclass(frozen=True, slots=True)
class Recurrence:
    """A schedule's calendar: exactly one of `cron` and `every_s`, read in `timezone`; no
    occurrence before `start_ms` or after `end_ms` (when set). An interval's occurrences are
    `start_ms` + k * `every_s` seconds."""

    cron: str | None
    every_s: int | None
    timezone: str
    start_ms: int
    end_ms: int | None = None

    def after(self, after_ms: int, count: int) -> list[int]:
        """The first `count` occurrences later than `after_ms`, in UTC milliseconds (fewer
        once `end_ms` is passed)."""
        found: list[int] = []
        for at_ms in self._from(max(after_ms, self.start_ms - 1)):
            if self.end_ms is not None and at_ms > self.end_ms:
                break
            found.append(at_ms)
            if len(found) == count:
                break
        return found

    def between(self, after_ms: int, until_ms: int, count: int) -> tuple[list[int], int | None]:
        """At most the first `count` occurrences later than `after_ms` and not later than
        `until_ms`, and the occurrence after those (None when there is none)."""
        found: list[int] = []
        for at_ms in self._from(max(after_ms, self.start_ms - 1)):
            if self.end_ms is not None and at_ms > self.end_ms:
                return found, None
            if at_ms > until_ms or len(found) >= count:
                return found, at_ms
            found.append(at_ms)
        return found, None

    def last_before(self, before_ms: int, not_before_ms: int, count: int) -> list[int]:
        """The last `count` occurrences earlier than `before_ms` and not earlier than
        `not_before_ms`, oldest first."""
        low = max(not_before_ms, self.start_ms)
        high = before_ms - 1 if self.end_ms is None else min(before_ms - 1, self.end_ms)
        if count <= 0 or high < low:
            return []
        found: list[int] = []
        if self.every_s is not None:
            step_ms = self.every_s * 1000
            k = (high - self.start_ms) // step_ms
            while k >= 0 and len(found) < count:
                at_ms = self.start_ms + k * step_ms
                if at_ms < low:
                    break
                found.append(at_ms)
                k -= 1
        else:
            assert self.cron is not None
            zone = ZoneInfo(self.timezone)
            # Backwards, cronsim yields times strictly before its start (in whole seconds).
            start = datetime.fromtimestamp(high // 1000 + 1, UTC).astimezone(zone)
            for moment in CronSim(self.cron, start, reverse=True):
                at_ms = int(moment.timestamp()) * 1000
                if at_ms < low:
                    break
                if at_ms <= high:
                    found.append(at_ms)
                if len(found) == count:
                    break
        found.reverse()
        return found

    def _from(self, after_ms: int) -> Iterator[int]:
        """The occurrences later than `after_ms`, up to the end of the year 9999 (an alarm's
        last time)."""
        if self.every_s is not None:
            step_ms = self.every_s * 1000
            k = max((after_ms - self.start_ms) // step_ms + 1, 0)
            while self.start_ms + k * step_ms <= MAX_EPOCH_MS:
                yield self.start_ms + k * step_ms
                k += 1
            return
        assert self.cron is not None
        zone = ZoneInfo(self.timezone)
        # cronsim steps in whole seconds, strictly after its start: start from the second
        # that holds after_ms, so that an occurrence in the same second is not repeated.
        start = datetime.fromtimestamp(min(after_ms, MAX_EPOCH_MS) // 1000, UTC).astimezone(zone)
        moments = iter(CronSim(self.cron, start))
        while True:
            try:
                at_ms = int(next(moments).timestamp()) * 1000
            except (OverflowError, ValueError, StopIteration):  # past the year 9999
                return
            if at_ms > MAX_EPOCH_MS:
                return
            yield at_ms


def recurrence(
    cron: str | None,
    every_s: int | None,
    timezone: str,
    start_ms: int,
    end_ms: int | None,
) -> Recurrence:
    """A checked Recurrence; ValidationError naming the field when a rule is broken: both or
    neither of cron and every_s, a cron expression cronsim refuses (30 February included),
    an unknown time zone, an interval out of range, an end before the start, or a calendar
    with no occurrence between the start and the end."""
    if (cron is None) == (every_s is None):
        raise ValidationError("give exactly one of cron and every_s", field="cron")
    zone_name = _zone(timezone)
    if cron is not None:
        _check_cron(cron)
    if every_s is not None and not MIN_EVERY_S <= every_s <= MAX_EVERY_S:
        raise ValidationError(
            f"every_s must be a whole number of seconds from {MIN_EVERY_S} to {MAX_EVERY_S}",
            field="every_s",
        )
    if end_ms is not None and end_ms < start_ms:
        raise ValidationError("end_at must not be before start_at", field="end_at")
    checked = Recurrence(cron, every_s, zone_name, start_ms, end_ms)
    if not checked.after(start_ms - 1, 1):
        field = "end_at" if end_ms is not None else "cron"
        raise ValidationError("the schedule has no occurrence: it would never ring", field=field)
    return checked


def local_iso(at_ms: int, timezone: str) -> str:
    """`at_ms` as an ISO 8601 time in `timezone`, with its offset."""
    moment = datetime.fromtimestamp(at_ms / 1000, UTC).astimezone(ZoneInfo(timezone))
    return moment.isoformat(timespec="milliseconds")


@functools.cache
def iana_zones() -> frozenset[str]:
    """The zones of the IANA database as the tzdata package ships them, the same on every
    server: not whatever else a machine's zoneinfo folder holds (`localtime`, `posixrules`,
    `right/...`), which another server may not have, or read otherwise."""
    listed = resources.files("tzdata").joinpath("zones").read_text(encoding="utf-8").split()
    return frozenset(name for name in listed if name != "Factory")


def _zone(name: str) -> str:
    if name not in iana_zones():
        raise ValidationError(
            f"timezone is not an IANA time zone: {name[:MAX_TIMEZONE_LENGTH]!r}",
            field="timezone",
        )
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValidationError(
            f"timezone is not an IANA time zone: {name!r}", field="timezone"
        ) from None
    return name


def _check_cron(expression: str) -> None:
    try:
        CronSim(expression, datetime(2000, 1, 1, tzinfo=UTC))
    except (CronSimError, ValueError, TypeError, KeyError, IndexError) as error:
        raise ValidationError(f"cron is not a valid expression: {error}", field="cron") from None
