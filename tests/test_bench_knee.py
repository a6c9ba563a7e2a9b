"""bench.knee's policy: which rate it tries next, and when a steady run held its rate."""

from __future__ import annotations

from typing import Any

import pytest

from bench.knee import holds, next_rate
from bench.stats import median_and_spread
from bench.targets import _knee_rows


@pytest.mark.parametrize(
    ("held", "failed", "rate"),
    [
        (0, 20_000, 10_000),  # first: half of the limit
        (10_000, 20_000, 15_000),  # held: up
        (0, 10_000, 5_000),  # failed: down
        (10_000, 15_000, 12_500),
        (12_500, 12_600, 0),  # nothing left between them at whole hundreds
        (0, 150, 0),  # a limit too low to try anything
        (12_450, 12_700, 12_500),  # rounded down, still between them
    ],
)
def test_the_next_rate_bisects_between_what_held_and_what_failed(
    held: float, failed: float, rate: int
):
    assert next_rate(20_000, held, failed) == rate


def run(p99: float, created: int, lost: int = 0, early: int = 0) -> dict[str, Any]:
    return {"rate": 1_000, "duration_s": 10, "received_lateness_ms": {"p99": p99},
            "lost": lost, "early": early, "load": {"created": created}}  # fmt: skip


@pytest.mark.parametrize(
    ("result", "held"),
    [
        (run(25, 10_000), True),
        (run(25.1, 10_000), False),  # over the bound
        (run(10, 9_500), True),  # the load made 95 % of what was asked
        (run(10, 9_499), False),  # it could not create the rate
        (run(10, 10_000, lost=1), False),
        (run(10, 10_000, early=1), False),
    ],
)
def test_a_rate_holds_within_the_bound_with_nothing_lost_or_early(
    result: dict[str, Any], held: bool
):
    assert holds(result, 25) is held


def test_the_knees_target_is_met_only_when_every_run_meets_it():
    def pick(runs: list[dict[str, Any]], key: str) -> dict[str, float]:
        return median_and_spread([run[key] for run in runs])

    runs = [{"p99_bound_ms": 25, "knee_per_s": rate, "knee_share_of_limit": share}
            for rate, share in ((9_000, 0.45), (11_000, 0.55), (12_000, 0.6))]  # fmt: skip
    rate_row, share_row = _knee_rows(runs, pick)
    assert rate_row["figure"] == "knee: highest steady rate with p99 <= 25 ms (alarms/s)"
    assert share_row["met"] is False  # the median is 0.55, one run missed
    runs[0]["knee_share_of_limit"] = 0.5
    assert _knee_rows(runs, pick)[1]["met"] is True
