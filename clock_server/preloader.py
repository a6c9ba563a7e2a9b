"""The preload step: claim the alarms due within the window into the in-memory heap."""

from __future__ import annotations

import logging

from clock_server.claims import ClaimStore
from clock_server.heap import ClaimHeap
from clock_server.metrics import Metrics
from clock_server.timesource import Clock
from clock_server.worker import Waker

log = logging.getLogger(__name__)


class Preloader:
    """Claims pending alarms due before now + window, earliest first, as far as the heap allows."""

    def __init__(
        self,
        claims: ClaimStore,
        heap: ClaimHeap,
        clock: Clock,
        ring_waker: Waker,
        metrics: Metrics,
        *,
        window_ms: int,
        interval_s: float,
        lease_ms: int,
        batch: int,
    ) -> None:
        self.claims = claims
        self.heap = heap
        self.clock = clock
        self.ring_waker = ring_waker
        self.metrics = metrics
        self.window_ms = window_ms
        self.interval_s = interval_s
        self.lease_ms = lease_ms
        self.batch = batch

    def run_once(self) -> float:
        """One claim pass; returns seconds until the next (0 when the batch came back full)."""
        now_ms = self.clock.now_ms()
        horizon_ms = now_ms + self.window_ms
        limit = min(self.heap.free(), self.batch)
        if limit == 0:
            # Full: only alarms due sooner than the latest held one are worth a swap.
            latest = self.heap.latest_due_ms()
            if latest is None:
                return self.interval_s
            horizon_ms = min(horizon_ms, latest - 1)
            limit = self.batch
        claimed = self.claims.claim_due(horizon_ms, now_ms + self.lease_ms, limit)
        if claimed:
            self._hold(claimed, now_ms)
        return 0.0 if len(claimed) == limit else self.interval_s

    def _hold(self, claimed: list, now_ms: int) -> None:  # type: ignore[type-arg]
        result = self.heap.push_many(claimed)
        self.metrics.claimed.inc(len(claimed))
        self.metrics.heap_size.set(len(self.heap))
        if result.head_moved_earlier:
            self.ring_waker.wake()
        if result.displaced:
            released = self.claims.release(result.displaced, now_ms)
            self.metrics.released.inc(released)
            log.debug("heap full: gave back %d later claims", len(result.displaced))
