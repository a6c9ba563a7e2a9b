"""Percentiles and summaries of lateness samples (milliseconds)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from typing import Any


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    if not sorted_values:
        return float("nan")
    rank = max(0, min(len(sorted_values) - 1, math.ceil(fraction * len(sorted_values)) - 1))
    return float(sorted_values[rank])


def summarize(lateness_ms: Sequence[float]) -> dict[str, float]:
    values = sorted(lateness_ms)
    return {
        "count": len(values),
        "p50": percentile(values, 0.50),
        "p99": percentile(values, 0.99),
        "p999": percentile(values, 0.999),
        "max": float(values[-1]) if values else float("nan"),
        "early": sum(1 for v in values if v < 0),
    }


def median_and_spread(runs: Sequence[float]) -> dict[str, float]:
    """Median of repeated runs, with the lowest and highest for the spread."""
    return {
        "median": statistics.median(runs),
        "min": min(runs),
        "max": max(runs),
        "runs": len(runs),
    }


def figure(result: dict[str, Any], path: tuple[str, ...]) -> float | None:
    """The number at `path` in a scenario's result, or None when it is missing or null."""
    value: Any = result
    for key in path:
        if not isinstance(value, dict) or value.get(key) is None:
            return None
        value = value[key]
    return float(value)
