"""The ring step: ask the dispatch policy what goes where, take those claims off the heap and
hand each batch to a lane (`BatchRinger` rings it)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor

from clock_server.deadline import Deadline
from clock_server.engine import dispatch
from clock_server.engine.channels import Channels
from clock_server.engine.delivery_gate import DeliveryGate
from clock_server.engine.dispatch import EXPRESS, LANE, Busy, LaneBatch
from clock_server.engine.heap import ClaimHeap
from clock_server.engine.ring_batch import BatchRinger
from clock_server.engine.tuning import RingTuning
from clock_server.errors import Unavailable
from clock_server.model import Claim
from clock_server.store.ports import ClaimStore
from clock_server.timesource import Clock

log = logging.getLogger(__name__)


class Ringer:
    """Runs the ring loop's step: `dispatch.decide` says which claims go to which lane, and
    this carries it out on a plain executor with a bound per kind of lane (`tuning.lanes`
    lanes and `tuning.express_lanes` express lanes), each batch in its own transaction on
    its own thread. With one lane, the loop rings each batch itself.

    Claims are taken off the heap a lead before they are due (`BatchRinger.lead`, grown
    while locking is slow), so the lock's round trip is not part of the lateness; a thread
    that wakes late is late for the lock as much as a slow database is, so the lead is
    measured from when the pass was asked for.

    ``on_lane_free`` wakes the ring loop when a lane comes free while the loop waits for one.
    Not after every batch: at a steady rate that would be one more pass per alarm.

    With ``gate`` (delivery limits) and ``channels`` (webhook room), claims that may not go
    yet wait in the heap, or in the database when their turn is further off than
    `tuning.hold_in_heap_ms`.
    """

    def __init__(
        self,
        batches: BatchRinger,
        tuning: RingTuning,
        *,
        gate: DeliveryGate | None = None,
        on_lane_free: Callable[[], None] | None = None,
    ) -> None:
        self.batches = batches
        self.tuning = tuning
        # The store, heap, clock and channels are the batches' own: one of each.
        self.claims: ClaimStore = batches.claims
        self.heap: ClaimHeap = batches.heap
        self.clock: Clock = batches.clock
        self.channels: Channels | None = batches.channels
        self.lead = batches.lead
        self.gate = gate
        self.on_lane_free = on_lane_free
        self._wake_at_ms: int | None = None  # when run_once last asked to be called again
        self._store_locks_rows: bool | None = None
        threads = tuning.connections
        self._executor = (
            ThreadPoolExecutor(threads, "clock-ring-lane") if tuning.has_express_lanes else None
        )
        self._in_flight: set[futures.Future[None]] = set()
        self._busy = {LANE: 0, EXPRESS: 0}
        self._in_flight_lock = threading.Lock()
        # Set before the loop reads the lanes' occupancy, and read by a lane after it came
        # free: a lane freed after a decision that waits for one always sees it set.
        self._loop_wants_lane = False

    def run_once(self) -> float | None:
        """Ring what is due; returns seconds until the next due claim, 0 to go on, None if idle."""
        self._loop_wants_lane = True
        now_ms = self.clock.now_ms()
        since_ms = min(now_ms, self._wake_at_ms) if self._wake_at_ms is not None else now_ms
        self._wake_at_ms = None
        lead_ms = self.lead.ms
        with self._in_flight_lock:
            busy = Busy(self._busy[LANE], self._busy[EXPRESS])
        horizons = dispatch.horizons(now_ms, lead_ms, busy, self.tuning, self._locks_rows())
        view = self.heap.view(horizons)
        room = {}
        if self.channels is not None and self.channels.webhooks_seen:
            room = self.channels.caps(view.earliest)
        decision = dispatch.decide(view, busy, room, horizons, self.tuning)
        self._loop_wants_lane = decision.waits_for_lane
        for plan in decision.batches:
            due = self.heap.take(plan.take, plan.due_by_ms)
            if due and (self.gate is not None or self.channels is not None):
                due = self._admit(due, now_ms)
            if due:
                self._run(due, since_ms if plan.lane == LANE else now_ms, plan)
        if decision.batches:
            return 0.0
        if decision.next_due_ms is None:
            return None
        wait_ms = max(decision.next_due_ms - lead_ms - now_ms, 1)
        self._wake_at_ms = now_ms + wait_ms
        return wait_ms / 1000

    def _locks_rows(self) -> bool:
        """Whether the store locks rows; False until the database has said so."""
        if self._store_locks_rows is None:
            try:
                self._store_locks_rows = self.claims.locks_rows
            except Unavailable:
                return False
        return self._store_locks_rows

    def _run(self, due: list[Claim], since_ms: int, plan: LaneBatch) -> None:
        if self._executor is None:
            self.batches.ring(due, since_ms, plan)
            return
        with self._in_flight_lock:
            self._busy[plan.lane] += 1
        future = self._executor.submit(self._ring_in_lane, due, since_ms, plan)
        with self._in_flight_lock:
            self._in_flight.add(future)
        future.add_done_callback(self._finished)

    def _admit(self, due: list[Claim], now_ms: int) -> list[Claim]:
        """What the delivery limits and the webhook room let through now; the rest wait in
        the heap, or in the database, due at their turn, when that is further off than
        `hold_in_heap_ms` (the window: the preloader reads them when it comes). Those the
        full heap displaces the preloader reads again."""
        go, later = self.gate.admit(due, now_ms) if self.gate is not None else (due, [])
        if self.channels is not None:
            go, busy = self.channels.admit(go, now_ms)
            later += busy
        if later:
            horizon_ms = now_ms + self.tuning.hold_in_heap_ms
            far = [claim for claim in later if claim.due_ms > horizon_ms]
            self.heap.push_many(claim for claim in later if claim.due_ms <= horizon_ms)
            self._defer(far, now_ms)
        return go

    def _defer(self, claims: list[Claim], now_ms: int) -> None:
        if not claims:
            return
        try:
            self.batches.metrics.released.inc(self.claims.defer(claims, now_ms))
        except Unavailable as error:
            # Back to the heap, due as they were: held back again at their turn.
            log.warning("could not defer %d held-back alarms: %s", len(claims), error,
                        extra={"action": "defer_failed"})  # fmt: skip
            self.heap.push_many(claims)
            return
        if self.gate is not None:
            self.gate.forget(claims)

    @property
    def in_flight(self) -> int:
        """Ring batches handed to lanes and not finished yet."""
        with self._in_flight_lock:
            return len(self._in_flight)

    def close(self, deadline: Deadline) -> int:
        """Wait until the batches in flight finish or `deadline` passes; returns how many were
        still unfinished then (the engines that share the slots next read them)."""
        if self._executor is None:
            return 0
        self._executor.shutdown(wait=False)
        with self._in_flight_lock:
            in_flight = set(self._in_flight)
        _done, unfinished = futures.wait(in_flight, timeout=deadline.remaining_s())
        return len(unfinished)

    def _finished(self, future: futures.Future[None]) -> None:
        with self._in_flight_lock:
            self._in_flight.discard(future)

    def _ring_in_lane(self, due: list[Claim], since_ms: int, plan: LaneBatch) -> None:
        try:
            self.batches.ring(due, since_ms, plan)
        except Exception:
            log.exception("ring batch of %d failed; its alarms are tried again shortly",
                          len(due), extra={"action": "ring_error"})  # fmt: skip
            self.batches.metrics.loop_error("ring_batch")
            self.batches.try_again_later(due)
        finally:
            with self._in_flight_lock:
                self._busy[plan.lane] -= 1
            if self._loop_wants_lane and self.on_lane_free is not None:
                self.on_lane_free()
