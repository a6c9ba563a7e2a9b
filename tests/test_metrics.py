"""The lateness histogram takes a ring batch at once and counts it as per-alarm observes would."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import generate_latest

from clock_server.metrics import Metrics

_LATENESS_S = st.lists(st.integers(min_value=0, max_value=120_000).map(lambda ms: ms / 1000))


def _histogram_lines(metrics: Metrics) -> list[str]:
    text = generate_latest(metrics.registry).decode()
    return [line for line in text.splitlines() if line.startswith("clock_ring_lateness_seconds_")]


@given(_LATENESS_S)
def test_a_batch_counts_like_one_observe_per_alarm(values: list[float]) -> None:
    batched, one_by_one = Metrics(), Metrics()
    batched.observe_lateness(values)
    for value in values:
        one_by_one.lateness.observe(value)
    lines = _histogram_lines(batched)
    assert [line for line in lines if "_created" not in line] == [
        line for line in _histogram_lines(one_by_one) if "_created" not in line
    ]


def test_values_on_a_bucket_bound_count_in_that_bucket() -> None:
    metrics = Metrics()
    metrics.observe_lateness([0.001, 0.001, 0.0011, 60.0, 61.0])
    lines = _histogram_lines(metrics)
    assert 'clock_ring_lateness_seconds_bucket{le="0.001"} 2.0' in lines
    assert 'clock_ring_lateness_seconds_bucket{le="0.002"} 3.0' in lines
    assert 'clock_ring_lateness_seconds_bucket{le="60.0"} 4.0' in lines
    assert 'clock_ring_lateness_seconds_bucket{le="+Inf"} 5.0' in lines
    assert "clock_ring_lateness_seconds_count 5.0" in lines
