"""The preload step: claim the alarms due within the window into the in-memory heap."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable

from clock_server.engine.heap import ClaimHeap
from clock_server.engine.loop import Waker
from clock_server.metrics import Metrics
from clock_server.model import Claim
from clock_server.slot_space import ALL_SLOTS, SlotRange
from clock_server.store.ports import ClaimStore
from clock_server.timesource import Clock

log = logging.getLogger(__name__)


class Preloader:
    """Claims pending alarms due before now + window, earliest first, as far as the heap allows,
    each under the engine id that `claiming()` gives (engine.liveness).

    A pass whose batch came back full is followed at once by another, which starts its scan
    at the due time where the last one stopped (the scan floor) instead of walking again the
    entries the claims before it left behind. Rows can still appear below the floor: a new or
    moved alarm (the engine calls rescan()), claims given back, rows another transaction held
    when the scan passed. So the floor is dropped after every wait, after claims are given
    back, on rescan(), and at the latest one interval after a scan from the start.

    While the heap is full of a backlog (its head overdue by `backlog_ms`), a pass instead
    claims the due alarms of the applications that hold less than an equal part of the heap,
    each application's earliest first, and makes room for them by giving back the latest of
    the application holding the most: one application's backlog, however large, does not
    keep the others' alarms out of the heap. The first such pass comes as soon as the full
    heap's head is that overdue, not at the next interval.
    """

    def __init__(
        self,
        claims: ClaimStore,
        heap: ClaimHeap,
        clock: Clock,
        ring_waker: Waker,
        metrics: Metrics,
        claiming: Callable[[], contextlib.AbstractContextManager[int]],
        *,
        slots: Callable[[], SlotRange] = lambda: ALL_SLOTS,
        window_ms: int,
        interval_s: float,
        lease_ms: int,
        batch: int,
        backlog_ms: int = 100,
    ) -> None:
        """`backlog_ms`: `RingTuning.backlog_ms`; `slots`: the slots this engine owns now."""
        self.claims = claims
        self.slots = slots
        self.backlog_ms = backlog_ms
        self.heap = heap
        self.clock = clock
        self.ring_waker = ring_waker
        self.metrics = metrics
        self.claiming = claiming
        self.window_ms = window_ms
        self.interval_s = interval_s
        self.lease_ms = lease_ms
        self.batch = batch
        self._floor_ms: int | None = None
        self._floor_until_ms = 0
        self._rescan = threading.Event()

    def rescan(self) -> None:
        """Make the next pass scan from the start: an alarm may have become due below the floor."""
        self._rescan.set()

    def run_once(self) -> float:
        """One claim pass; returns seconds until the next (0 when the batch came back full)."""
        # Real time, not the Clock's: how long the pass took, for clock_preload_duration.
        started = time.perf_counter()
        try:
            return self._pass()
        finally:
            self.metrics.preload_duration.observe(time.perf_counter() - started)

    def _pass(self) -> float:
        now_ms = self.clock.now_ms()
        from_ms = self._scan_floor(now_ms)
        horizon_ms = now_ms + self.window_ms
        limit = min(self.heap.free(), self.batch)
        wait_s = self.interval_s
        if limit == 0:
            if self._backlogged(now_ms):
                self._share(now_ms, horizon_ms)
                return self.interval_s
            wait_s = self._until_backlogged_s(now_ms)
            # Full: only alarms due sooner than the latest held one are worth a swap.
            latest = self.heap.latest_due_ms()
            if latest is None:
                return wait_s
            horizon_ms = min(horizon_ms, latest - 1)
            limit = self.batch
        lease_until_ms = now_ms + self.lease_ms
        with self.claiming() as owner:
            claimed = self.claims.claim_due(
                horizon_ms, lease_until_ms, limit, now_ms=now_ms, from_ms=from_ms, owner=owner,
                slots=self.slots(),
            )  # fmt: skip
            if claimed:
                self._hold(claimed, now_ms)
        if len(claimed) < limit:
            self._floor_ms = None
            return wait_s
        if from_ms is None:
            self._floor_until_ms = now_ms + int(self.interval_s * 1000)
        self._floor_ms = max(claim.due_ms for claim in claimed)
        return 0.0

    def _scan_floor(self, now_ms: int) -> int | None:
        if self._rescan.is_set():  # cleared before the scan: a rescan asked during it counts
            self._rescan.clear()
            self._floor_ms = None
        elif now_ms >= self._floor_until_ms:
            self._floor_ms = None
        return self._floor_ms

    def _until_backlogged_s(self, now_ms: int) -> float:
        """With the heap full: the interval, or less when its head falls a backlog behind
        before then. Other applications' alarms due after the latest held are claimed only
        once it does (`_share`); a full interval later, they were already late."""
        head_ms = self.heap.next_due_ms()
        if head_ms is None:
            return self.interval_s
        return min(max(head_ms + self.backlog_ms + 1 - now_ms, 1) / 1000, self.interval_s)

    def _backlogged(self, now_ms: int) -> bool:
        head_ms = self.heap.next_due_ms()
        return head_ms is not None and head_ms < now_ms - self.backlog_ms

    def _share(self, now_ms: int, horizon_ms: int) -> None:
        held = self.heap.held_per_application()
        slots = self.slots()
        due = self.claims.due_applications(horizon_ms, slots)
        if not due:
            return
        equal = self.heap.capacity // len(held.keys() | due.keys())
        wanting = {app: equal - held.get(app, 0) for app in due if held.get(app, 0) < equal}
        if not wanting:
            return
        each = max(self.batch // len(wanting), 1)
        lease_until_ms = now_ms + self.lease_ms
        with self.claiming() as owner:
            for application, room in wanting.items():
                claimed = self.claims.claim_due(
                    horizon_ms, lease_until_ms, min(each, room), owner=owner,
                    application=application, now_ms=now_ms, slots=slots,
                )  # fmt: skip
                if claimed:
                    self._hold(claimed, now_ms, shared=True)

    def _hold(self, claimed: list[Claim], now_ms: int, shared: bool = False) -> None:
        result = self.heap.push_many(claimed, shared, self.slots)
        self.metrics.claimed.inc(len(claimed))
        self.metrics.heap_size.set(len(self.heap))
        if result.head_moved_earlier:
            self.ring_waker.wake()
        if result.outside:  # claimed from a share that moved meanwhile (engine.liveness)
            self.metrics.released.inc(self.claims.release(result.outside, now_ms))
        if result.displaced:
            self._rescan.set()  # given back at their own due times, below the floor
            released = self.claims.release(result.displaced, now_ms)
            self.metrics.released.inc(released)
            log.debug("heap full: gave back %d later claims", len(result.displaced),
                      extra={"action": "claims_displaced"})  # fmt: skip
