"""bench.targets' rule: a target is met only when each run meets it, not by the median."""

from __future__ import annotations

from collections.abc import Callable

import pytest

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
