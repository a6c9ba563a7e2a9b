"""When a schedule rings, as a table: cron in a time zone across spring-forward and fall-back
in Europe/Berlin and America/New_York, 29 February, the last day of the month, intervals,
the bounds; and the calendars refused with the field named."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from clock_server.errors import ValidationError
from clock_server.recurrence import local_iso, recurrence


def ms(text: str) -> int:
    """A UTC time, 'YYYY-MM-DD HH:MM[:SS]', in milliseconds."""
    moment = datetime.fromisoformat(text).replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def utc(at_ms: int) -> str:
    return datetime.fromtimestamp(at_ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


@pytest.mark.parametrize(
    ("case", "cron", "zone", "after", "expected"),
    [
        # Berlin springs forward on 2026-03-29 at 02:00 CET to 03:00 CEST (01:00 UTC).
        ("daily, in the skipped hour: once, at the jump", "30 2 * * *", "Europe/Berlin",
         "2026-03-28 12:00", ["2026-03-29 01:00:00", "2026-03-30 00:30:00"]),
        ("hourly across the jump: the skipped hour has none", "0 * * * *", "Europe/Berlin",
         "2026-03-29 00:30", ["2026-03-29 01:00:00", "2026-03-29 02:00:00"]),
        # Berlin falls back on 2026-10-25 at 03:00 CEST to 02:00 CET (01:00 UTC).
        ("daily, in the repeated hour: once, its first pass", "30 2 * * *", "Europe/Berlin",
         "2026-10-24 12:00", ["2026-10-25 00:30:00", "2026-10-26 01:30:00"]),
        ("every 30 minutes: both passes of the repeated hour", "*/30 * * * *", "Europe/Berlin",
         "2026-10-25 00:10",
         ["2026-10-25 00:30:00", "2026-10-25 01:00:00", "2026-10-25 01:30:00"]),
        # New York springs forward on 2026-03-08 at 02:00 EST to 03:00 EDT (07:00 UTC).
        ("New York, in the skipped hour", "30 2 * * *", "America/New_York",
         "2026-03-07 12:00", ["2026-03-08 07:00:00", "2026-03-09 06:30:00"]),
        # ... and falls back on 2026-11-01 at 02:00 EDT to 01:00 EST (06:00 UTC).
        ("New York, in the repeated hour", "30 1 * * *", "America/New_York",
         "2026-10-31 12:00", ["2026-11-01 05:30:00", "2026-11-02 06:30:00"]),
        ("Monday 09:00 Berlin, winter then summer time", "0 9 * * MON", "Europe/Berlin",
         "2026-03-20 00:00", ["2026-03-23 08:00:00", "2026-03-30 07:00:00"]),
        ("02:00 Shanghai, no daylight saving", "0 2 * * *", "Asia/Shanghai",
         "2026-03-28 00:00", ["2026-03-28 18:00:00", "2026-03-29 18:00:00"]),
        ("29 February: leap years only", "0 0 29 2 *", "UTC",
         "2026-01-01 00:00", ["2028-02-29 00:00:00", "2032-02-29 00:00:00"]),
        ("the last day of the month", "0 12 L * *", "UTC",
         "2026-01-31 12:00", ["2026-02-28 12:00:00", "2026-03-31 12:00:00"]),
        ("six fields: seconds first", "*/20 * * * * *", "UTC",
         "2026-01-01 00:00", ["2026-01-01 00:00:20", "2026-01-01 00:00:40"]),
    ],
)  # fmt: skip
def test_cron_occurrences(case: str, cron: str, zone: str, after: str, expected: list[str]):
    calendar = recurrence(cron, None, zone, 0, None)
    assert [utc(at) for at in calendar.after(ms(after), len(expected))] == expected, case


def test_an_interval_counts_from_its_start_in_utc_and_stops_at_its_end():
    start = ms("2026-10-25 00:10")
    calendar = recurrence(None, 3600, "Europe/Berlin", start, start + 3 * 3_600_000)
    assert [utc(at) for at in calendar.after(start - 1, 10)] == [
        "2026-10-25 00:10:00",
        "2026-10-25 01:10:00",  # an hour of real time, though the clocks went back
        "2026-10-25 02:10:00",
        "2026-10-25 03:10:00",  # the end is included
    ]
    assert calendar.after(start + 3 * 3_600_000, 5) == []


def test_nothing_before_the_start_and_nothing_twice_in_one_second():
    calendar = recurrence("* * * * *", None, "UTC", ms("2026-01-01 00:05"), None)
    assert [utc(at) for at in calendar.after(0, 1)] == ["2026-01-01 00:05:00"]
    assert [utc(at) for at in calendar.after(ms("2026-01-01 00:05") + 500, 1)] == [
        "2026-01-01 00:06:00"
    ]


def test_local_time_says_its_offset():
    assert local_iso(ms("2026-10-25 00:30"), "Europe/Berlin") == "2026-10-25T02:30:00.000+02:00"
    assert local_iso(ms("2026-10-25 01:30"), "Europe/Berlin") == "2026-10-25T02:30:00.000+01:00"


@pytest.mark.parametrize(
    ("cron", "every_s", "zone", "end", "field", "says"),
    [
        ("0 0 30 2 *", None, "UTC", None, "cron", "not a valid expression"),
        ("61 * * * *", None, "UTC", None, "cron", "not a valid expression"),
        ("@daily", None, "UTC", None, "cron", "not a valid expression"),
        ("* * * *", None, "UTC", None, "cron", "not a valid expression"),
        ("0 0 * * *", 60, "UTC", None, "cron", "exactly one of cron and every_s"),
        (None, None, "UTC", None, "cron", "exactly one of cron and every_s"),
        (None, 0, "UTC", None, "every_s", "from 1 to"),
        (None, 10**9, "UTC", None, "every_s", "from 1 to"),
        ("0 0 * * *", None, "Mars/Olympus", None, "timezone", "not an IANA time zone"),
        ("0 0 * * *", None, "../../etc/passwd", None, "timezone", "not an IANA time zone"),
        ("0 0 * * *", None, "", None, "timezone", "not an IANA time zone"),
        ("0 0 * * *", None, "UTC", -1, "end_at", "not be before start_at"),
        ("0 0 29 2 *", None, "UTC", ms("2027-01-01 00:00"), "end_at", "no occurrence"),
    ],
)  # fmt: skip
def test_a_calendar_that_breaks_a_rule_is_refused_naming_the_field(
    cron: str | None, every_s: int | None, zone: str, end: int | None, field: str, says: str
):
    start = ms("2026-01-01 00:00")
    with pytest.raises(ValidationError) as refused:
        recurrence(
            cron, every_s, zone, start, None if end is None else start + end if end < 0 else end
        )
    assert refused.value.field == field
    assert says in refused.value.message


def test_no_occurrence_is_past_the_year_9999():
    last = 253_402_300_799_999  # 9999-12-31 23:59:59.999, an alarm's last time
    with pytest.raises(ValidationError) as refused:
        recurrence("0 0 1 1 *", None, "UTC", last - 1_000, None)
    assert refused.value.field == "cron"
    every_minute = recurrence("* * * * *", None, "UTC", last - 120_000, None)
    assert every_minute.after(last - 120_000, 5) == [last - 119_999, last - 59_999]
    yearly = recurrence(None, 366 * 24 * 3600, "UTC", last - 1, None)
    assert yearly.after(last - 2, 3) == [last - 1]
