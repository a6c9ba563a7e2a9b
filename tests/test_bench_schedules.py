"""bench.schedules' count of the occurrences a window should hold: none before a schedule's
first, wherever the window opens."""

from __future__ import annotations

import pytest

from bench.schedules import _due_in

ANCHOR = 1_796_187_000_000  # a minute boundary
COUNT = 600  # ten a second: intervals 100 ms apart, crons ten on each second


@pytest.mark.parametrize("kind", ["interval", "cron"])
@pytest.mark.parametrize(
    ("opens_s", "expected"),
    [
        (0, COUNT),  # at the anchor: each schedule once a minute
        (5, COUNT),  # later: still a whole minute of them
        (-1, COUNT - 10),  # a second early: the last second's schedules begin after it ends
        (-60, 0),  # a minute early: before any began
    ],
)
def test_a_minute_window_holds_each_schedule_once_after_its_first(
    kind: str, opens_s: int, expected: int
):
    window = range(ANCHOR + opens_s * 1_000, ANCHOR + opens_s * 1_000 + 60_000)
    total = sum(_due_in(kind, i, COUNT, ANCHOR, window) for i in range(COUNT))
    assert total == expected
