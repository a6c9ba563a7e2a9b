"""Which occurrences the planner makes, as a table: on time ahead of their moment, and what
becomes of the missed ones by `catch_up`; the occurrences' keys."""

from __future__ import annotations

import pytest

from clock_server.occurrences import MAX_PER_RUN, MISSED_AFTER_MS, occurrence_key, plan
from clock_server.recurrence import recurrence

MIN = 60_000
T0 = 1_800_000_000_000 - 1_800_000_000_000 % (60 * MIN)  # a whole hour, UTC
EVERY_MINUTE = recurrence("* * * * *", None, "UTC", 0, None)


@pytest.mark.parametrize(
    ("rule", "next_at", "now", "ahead", "catch_up", "most", "make", "next_after"),
    [
        ("an occurrence within the look-ahead is made before it is due",
         T0 + MIN, T0, MIN, "skip", 100, [T0 + MIN], T0 + 2 * MIN),
        ("one further off than the look-ahead waits",
         T0 + 2 * MIN, T0, MIN, "skip", 100, [], T0 + 2 * MIN),
        ("one due a moment ago, the planner late, is made: it rings late, not never",
         T0, T0 + MISSED_AFTER_MS - 1, 0, "skip", 100, [T0], T0 + MIN),
        ("skip: missed ones are not made, the next on time is",
         T0, T0 + 10 * MIN, 0, "skip", 100, [T0 + 9 * MIN, T0 + 10 * MIN], T0 + 11 * MIN),
        ("latest: the latest missed one is made, then those on time",
         T0, T0 + 10 * MIN + 1, 0, "latest", 100, [T0 + 9 * MIN, T0 + 10 * MIN],
         T0 + 11 * MIN),
        ("all: the latest catch_up_max missed ones",
         T0, T0 + 10 * MIN + 1, 0, "all", 3,
         [T0 + 7 * MIN, T0 + 8 * MIN, T0 + 9 * MIN, T0 + 10 * MIN], T0 + 11 * MIN),
        ("all: fewer missed than the bound, every one of them",
         T0 + 7 * MIN, T0 + 10 * MIN + 1, 0, "all", 100,
         [T0 + 7 * MIN, T0 + 8 * MIN, T0 + 9 * MIN, T0 + 10 * MIN], T0 + 11 * MIN),
    ],
)  # fmt: skip
def test_the_occurrences_made(rule, next_at, now, ahead, catch_up, most, make, next_after):
    step = plan(EVERY_MINUTE, next_at, now, ahead, catch_up, most)
    assert (step.make, step.next_at) == (make, next_after), rule


def test_a_run_makes_at_most_its_bound_and_the_next_goes_on_from_there():
    every_second = recurrence(None, 1, "UTC", T0, None)
    first = plan(every_second, T0 + 1000, T0, 2 * MAX_PER_RUN * 1000, "skip", 100)
    assert len(first.make) == MAX_PER_RUN and first.next_at == first.make[-1] + 1000
    second = plan(every_second, first.next_at, T0, 2 * MAX_PER_RUN * 1000, "skip", 100)
    assert second.make[0] == first.make[-1] + 1000


def test_an_ended_schedule_makes_nothing_more():
    ends = recurrence("* * * * *", None, "UTC", T0, T0 + 2 * MIN)
    step = plan(ends, T0 + MIN, T0, 10 * MIN, "skip", 100)
    assert (step.make, step.next_at) == ([T0 + MIN, T0 + 2 * MIN], None)
    assert plan(ends, None, T0, 10 * MIN, "skip", 100).make == []


def test_the_missed_are_said_to_be_passed_over():
    assert plan(EVERY_MINUTE, T0, T0 + 10 * MIN, 0, "skip", 1).skipped_missed
    assert not plan(EVERY_MINUTE, T0 + MIN, T0, MIN, "skip", 1).skipped_missed


def test_the_latest_missed_of_a_cron_schedule_in_a_zone():
    daily = recurrence("0 9 * * *", None, "Europe/Berlin", 0, None)
    # 2026-03-30 09:00 CEST is 07:00 UTC; missed since 2026-03-25 08:00 UTC (09:00 CET)
    missed_from = 1_774_425_600_000  # 2026-03-25 08:00 UTC
    now = 1_774_854_000_000 + 2 * MIN  # 2026-03-30 07:02 UTC
    step = plan(daily, missed_from, now, 0, "latest", 1)
    assert step.make == [1_774_854_000_000] and step.skipped_missed


def test_an_occurrence_key_is_the_schedule_and_its_time_in_utc():
    assert occurrence_key("settle", T0) == "~schedule/settle/2027-01-15T08:00:00.000Z"
    assert occurrence_key("settle", T0) == occurrence_key("settle", T0)
    assert occurrence_key("settle", T0) != occurrence_key("settle", T0 + 1)
