"""The per-minute statistics each process keeps in memory until it writes them to the shared
table (`store/minute_stats.py`): alarms created, rung and failed, and the engine's lateness
as counts per fixed bucket, by minute and application. Counts per bucket add up across
processes and servers, so percentiles read from the merged rows are the service's own."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

MINUTE_MS = 60_000
# The upper bounds (ms, inclusive) of the lateness buckets; a last bucket takes the rest.
LATENESS_BOUNDS_MS: tuple[int, ...] = (
    0,
    1,
    2,
    5,
    10,
    20,
    50,
    100,
    200,
    500,
    1_000,
    2_000,
    5_000,
    10_000,
    30_000,
    60_000,
    300_000,
    900_000,
    3_600_000,
    21_600_000,
    86_400_000,
)
BUCKETS = len(LATENESS_BOUNDS_MS) + 1
# A process whose writes keep failing forgets its oldest minutes beyond this many
# (minute, application) entries, so that an outage of the database bounds its memory.
MAX_PENDING_KEYS = 10_000

Key = tuple[int, str]  # (minute start, epoch ms; application)


def minute_of(at_ms: int) -> int:
    """The start of the minute `at_ms` falls in."""
    return at_ms - at_ms % MINUTE_MS


def bucket_of(lateness_ms: int) -> int:
    """The index of the bucket counting a lateness of `lateness_ms`."""
    return bisect.bisect_left(LATENESS_BOUNDS_MS, lateness_ms)


@dataclass
class MinuteCounts:
    """One (minute, application)'s counts; additive."""

    created: int = 0
    rung: int = 0
    failed: int = 0
    lateness: list[int] = field(default_factory=lambda: [0] * BUCKETS)
    lateness_sum_ms: int = 0

    def add(self, other: MinuteCounts) -> None:
        self.created += other.created
        self.rung += other.rung
        self.failed += other.failed
        self.lateness = [a + b for a, b in zip(self.lateness, other.lateness, strict=True)]
        self.lateness_sum_ms += other.lateness_sum_ms


@dataclass
class RingTally:
    """One application's part of a ring batch: rung, failed, and the lateness of the rung."""

    rung: int = 0
    failed: int = 0
    lateness_ms: list[int] = field(default_factory=list)


class MinuteTally:
    """What this process counted since its last write, by (minute, application); thread-safe,
    one lock per call, so a ring batch adds once for all its applications."""

    def __init__(self, max_keys: int = MAX_PENDING_KEYS) -> None:
        self.max_keys = max_keys
        self._counts: dict[Key, MinuteCounts] = {}
        self._lock = threading.Lock()

    def created(self, at_ms: int, by_application: Mapping[str, int]) -> None:
        """Alarms created at `at_ms`, by application."""
        minute = minute_of(at_ms)
        with self._lock:
            for application, count in by_application.items():
                if count > 0:
                    self._entry((minute, application)).created += count

    def rang(self, at_ms: int, by_application: Mapping[str, RingTally]) -> None:
        """A batch's outcomes at `at_ms`, by application."""
        minute = minute_of(at_ms)
        prepared = [(name, *_buckets(one.lateness_ms)) for name, one in by_application.items()]
        with self._lock:
            for application, buckets, total in prepared:
                one = by_application[application]
                entry = self._entry((minute, application))
                entry.rung += one.rung
                entry.failed += one.failed
                entry.lateness_sum_ms += total
                for index, count in buckets.items():
                    entry.lateness[index] += count

    def take(self) -> dict[Key, MinuteCounts]:
        """Everything counted since the last take, which starts over from nothing."""
        with self._lock:
            taken, self._counts = self._counts, {}
        return taken

    def give_back(self, taken: Mapping[Key, MinuteCounts]) -> int:
        """Put back what a failed write took, merged with what came since; beyond `max_keys`
        the oldest minutes are dropped. Returns how many entries were dropped."""
        with self._lock:
            for key, counts in taken.items():
                self._entry(key).add(counts)
            excess = len(self._counts) - self.max_keys
            if excess <= 0:
                return 0
            for key in sorted(self._counts)[:excess]:
                del self._counts[key]
            return excess

    def _entry(self, key: Key) -> MinuteCounts:
        entry = self._counts.get(key)
        if entry is None:
            entry = self._counts[key] = MinuteCounts()
        return entry


def _buckets(values: Iterable[int]) -> tuple[dict[int, int], int]:
    counts: dict[int, int] = {}
    total = 0
    for value in values:
        index = bucket_of(value)
        counts[index] = counts.get(index, 0) + 1
        total += value
    return counts, total


def quantile(q: float, counts: Sequence[int]) -> float | None:
    """The q-quantile (0..1) of a lateness histogram (`counts` per bucket of
    LATENESS_BOUNDS_MS, the last unbounded), as Prometheus' histogram_quantile computes it:
    linear within the bucket it falls in, from 0 for the first bucket; in the unbounded
    bucket, the last bound. None when nothing was counted."""
    total = sum(counts)
    if total == 0:
        return None
    rank = q * total
    seen = 0
    for index, count in enumerate(counts):
        if count and seen + count >= rank:
            if index >= len(LATENESS_BOUNDS_MS):
                return float(LATENESS_BOUNDS_MS[-1])
            lower = LATENESS_BOUNDS_MS[index - 1] if index else 0
            upper = LATENESS_BOUNDS_MS[index]
            return lower + (upper - lower) * (rank - seen) / count
        seen += count
    return float(LATENESS_BOUNDS_MS[-1])
