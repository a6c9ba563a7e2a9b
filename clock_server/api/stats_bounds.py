"""How much of the per-minute statistics one answer of GET /v1/stats carries: the total of
every application, and a series of its own for at most a bounded number of them, the
busiest, so that an answer's size does not grow with the number of applications."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

# Applications given a series of their own when the request names none.
MAX_SERIES = 20
# Minute entries in one answer, the total's included (about 150 bytes each in JSON): an
# hour has room for MAX_SERIES, a day for 9.
MAX_ENTRIES = 14_400


def series_bound(minutes: int) -> int:
    """How many applications get a series of their own in an answer of `minutes` minutes."""
    return max(1, min(MAX_SERIES, MAX_ENTRIES // minutes - 1))


def busiest(activity: Mapping[str, int], candidates: Iterable[str], most: int) -> list[str]:
    """The `most` candidates with the most activity (rings plus creates in the window; none
    counts 0), ties by name, listed by name."""
    ranked = sorted(candidates, key=lambda name: (-activity.get(name, 0), name))
    return sorted(ranked[:most])
