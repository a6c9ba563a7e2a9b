"""bench.targets' rule: a target is met only when each run meets it, not by the median."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bench.collector import Arrival
from bench.scenarios import _delivery_figures
from bench.stats import median_and_spread
from bench.targets import _row

AT_MOST_120: Callable[[float], bool] = lambda v: v <= 120  # noqa: E731
AT_LEAST_9900: Callable[[float], bool] = lambda v: v >= 9_900  # noqa: E731
NONE: Callable[[float], bool] = lambda v: v == 0  # noqa: E731


@pytest.mark.parametrize(
    ("runs", "ok", "met"),
    [
        ([103, 118, 127], AT_MOST_120, False),  # the median meets it, one run does not
        ([103, 118, 119], AT_MOST_120, True),
        ([9_720, 9_997, 10_000], AT_LEAST_9900, False),
        ([9_900, 9_950, 10_000], AT_LEAST_9900, True),
        ([0, 0, 1], NONE, False),
        ([0, 0, 0], NONE, True),
        ([130], AT_MOST_120, False),
    ],
)
def test_a_target_is_met_in_each_run_or_not_at_all(
    runs: list[float], ok: Callable[[float], bool], met: bool
) -> None:
    assert _row("figure", median_and_spread(runs), "target", ok)["met"] is met


def test_a_figure_without_a_target_or_a_measure_is_neither_met_nor_missed() -> None:
    assert _row("figure", None, "<= 120", AT_MOST_120)["met"] is None
    assert _row("figure", median_and_spread([1, 2, 3]), "-", None)["met"] is None


@pytest.mark.parametrize(
    ("created", "rows", "received", "lost", "unrung"),
    [
        # rows: (id, status); received: the ids the consumer got
        (3, [(1, "rung"), (2, "rung"), (3, "rung")], [1, 2, 3], 0, 0),
        (3, [(1, "rung"), (2, "pending"), (3, "pending")], [1], 0, 2),  # late, not lost
        (3, [(1, "rung"), (2, "rung"), (3, "pending")], [1, 3], 1, 0),  # 2 rung, never received
        (3, [(1, "rung"), (2, "pending")], [1], 1, 1),  # 3 accepted and gone from the table
        (2, [(1, "pending"), (2, "rung")], [1, 2], 0, 0),  # received before it was marked
    ],
)
def test_an_alarm_still_due_when_the_run_stops_is_late_not_lost(
    created: int, rows: list[tuple[int, str]], received: list[int], lost: int, unrung: int
) -> None:
    arrivals = [Arrival(alarm_id, 1_000, 1_001) for alarm_id in received]
    table = [(alarm_id, 1_000, 1_000 if status == "rung" else None, status)
             for alarm_id, status in rows]  # fmt: skip
    figures = _delivery_figures(arrivals, table, created)
    assert (figures["lost"], figures["unrung_at_end"]) == (lost, unrung)
