"""The ring step: take due claims off the heap and hand them, a batch at a time, to a ring
lane (`BatchRinger` rings each batch)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor

from clock_server.deadline import Deadline
from clock_server.engine.channels import Channels
from clock_server.engine.delivery_gate import DeliveryGate
from clock_server.engine.heap import ClaimHeap
from clock_server.engine.ring_batch import BatchRinger
from clock_server.errors import Unavailable
from clock_server.model import Claim
from clock_server.store.ports import ClaimStore
from clock_server.timesource import Clock

log = logging.getLogger(__name__)

# Express batches in flight at once: each waits for its last moment, the broker's confirms and
# its commit, so a lane is held up to the lead and the gathering span past the batch's first
# alarm; with three, beside a backlog, what fell due meanwhile waited for a lane (finding 64).
EXPRESS_LANES = 6
# Lanes ringing a backlog's batches at once while other applications have claims held: each
# busy lane is one more thread that the express lanes and the express connection's IO thread
# wait behind for the interpreter lock, 5 ms at a time, after every wake-up (finding 47).
BESIDE_BACKLOG_LANES = 2


class Ringer:
    """Takes due claims off the heap and rings them, a batch at a time, in ring lanes; each
    batch is re-checked under row locks, published and recorded by `BatchRinger`.

    With ``lanes`` > 1, up to that many batches are in flight at once, each in its own
    transaction on its own thread: an alarm falling due while a batch waits for the broker's
    confirms and the database's commit is rung at once in another lane instead of waiting.
    When every lane is busy, due alarms gather in the heap and go out as one larger batch,
    except those of applications with at most `batches.few_due` due: the express lanes ring them
    at once, so that a backlog of one application, which keeps every lane
    busy, does not make the others' few alarms wait for a lane. Beside such a backlog they
    go to an express lane even while a lane is free, and a lane's batch leaves them in the
    heap even while every express lane is busy, so that they are not locked and published
    with a large batch of the backlog; and the express lanes publish on the batches' express
    connection, not queued behind the backlog's messages.
    There are EXPRESS_LANES of them: while one waits for its confirms and its commit, which
    take tens of milliseconds beside a backlog, the next few due start in another. And
    beside such a backlog at most BESIDE_BACKLOG_LANES of the lanes ring its batches at once,
    so that fewer busy threads stand between the express lanes and the interpreter lock.

    Alarms are taken off the heap `batches.lead` before they are due, and their rows locked
    in advance; each is then published the moment it is due, so the lock's round trip is not
    part of the lateness (`LockLead`, grown while locking is slow). A pass takes with them
    those due up to `batches.gather_ms` later, so that at a steady rate one batch covers that
    span instead of each alarm paying for a transaction of its own. An express batch gathers
    a longer span, `batches.express_gather_ms`, up to `few_due` of each of its applications.

    ``on_lane_free`` wakes the ring loop when a lane comes free while the loop waits for one.
    Not after every batch: at a steady rate that would be one more pass of the loop per
    alarm. (A batch that puts claims back wakes it through `BatchRinger.on_pushed_back`.)

    With ``channels``, applications on the webhook channel with no room for more calls keep
    their claims in the heap.
    """

    def __init__(
        self,
        batches: BatchRinger,
        *,
        batch: int,
        lanes: int = 1,
        on_lane_free: Callable[[], None] | None = None,
        hold_in_heap_ms: int = 10_000,
    ) -> None:
        # The store, heap, clock, limits and channels are the batches' own: one of each.
        self.claims: ClaimStore = batches.claims
        self.heap: ClaimHeap = batches.heap
        self.clock: Clock = batches.clock
        self.gate: DeliveryGate | None = batches.gate
        self.channels: Channels | None = batches.channels
        self.batches = batches
        self.batch = batch
        self.on_lane_free = on_lane_free
        self.hold_in_heap_ms = hold_in_heap_ms
        self.few_due = batches.few_due
        self.lead = batches.lead
        self._wake_at_ms: int | None = None  # when run_once last asked to be called again
        self._lane_count = lanes
        self._lanes = threading.BoundedSemaphore(lanes) if lanes > 1 else None
        self._express = threading.BoundedSemaphore(EXPRESS_LANES) if lanes > 1 else None
        threads = lanes + EXPRESS_LANES
        self._executor = ThreadPoolExecutor(threads, "clock-ring-lane") if lanes > 1 else None
        self._in_flight: set[futures.Future[None]] = set()
        self._lanes_busy = 0  # of the `lanes`, not the express ones
        self._express_busy = 0
        self._in_flight_lock = threading.Lock()
        # Set before the loop tries for a lane, and read by a lane after it came free: a lane
        # freed after a failed try always sees it set.
        self._loop_wants_lane = False

    def run_once(self) -> float | None:
        """Ring what is due; returns seconds until the next due claim, 0 to go on, None if idle."""
        self._loop_wants_lane = True
        if self._express is not None:
            self._express_beside_backlog()
        if self._lanes is not None and (
            self._held_back_beside_others() or not self._lanes.acquire(blocking=False)
        ):
            return self._express_once()
        self._loop_wants_lane = False
        now_ms = self.clock.now_ms()
        # A thread that wakes late (a busy machine) is late for the lock as much as a slow
        # database is: the lead is measured from when this pass was asked for.
        since_ms = min(now_ms, self._wake_at_ms) if self._wake_at_ms is not None else now_ms
        self._wake_at_ms = None
        lead_ms = self.lead.ms
        # A webhook application with no room for more calls keeps its claims in the heap:
        # taking them off only to put them back would churn a backlog on every pass.
        caps = {}
        if self.channels is not None and self.channels.webhooks_seen:
            caps = self.channels.caps(self.heap.held_per_application())
        # Beside a backlog the few due of other applications are the express lanes' (a
        # backlog's batch would lock them with its own rows, 100 ms and more: finding 64).
        few = self.few_due if self._express is not None else None
        due = self.heap.pop_due(now_ms + lead_ms + self._gather_ms(), self.batch, caps, few)
        if due and (self.gate is not None or self.channels is not None):
            due = self._admit(due, now_ms)
        if due:
            if self._lanes is not None:
                self._submit(due, since_ms, self._lanes)
            else:
                self.batches.ring(due, since_ms)
            return 0.0
        if self._lanes is not None:
            self._lanes.release()
        # Those with no room wait for a call of theirs to end, which wakes this loop.
        next_due = self.heap.next_due_ms(skip={app for app, room in caps.items() if not room})
        if next_due is None:
            return None
        wait_ms = max(next_due - lead_ms - now_ms, 1)
        self._wake_at_ms = now_ms + wait_ms
        return wait_ms / 1000

    def _gather_ms(self, express: bool = False) -> int:
        """How far past the lead this pass takes claims: `batches.gather_ms` (for an express
        batch `batches.express_gather_ms`) while the lead is no longer than `gather_ms` and a
        lane (an express lane, for an express batch) stays free beside this pass's, else
        nothing. A batch holds its lane for the lead, the gathering and its confirms: with
        the lead grown under load, gathered batches kept every lane busy and what fell due
        waited for one."""
        if self.lead.ms > self.batches.gather_ms:
            return 0
        with self._in_flight_lock:
            busy = self._express_busy if express else self._lanes_busy
        lanes = EXPRESS_LANES if express else self._lane_count
        if busy + 2 > lanes:
            return 0
        return self.batches.express_gather_ms if express else self.batches.gather_ms

    def _held_back_beside_others(self) -> bool:
        """Whether BESIDE_BACKLOG_LANES lanes are busy while a backlog is due beside other
        applications' claims: another lane then waits for one of them to finish."""
        with self._in_flight_lock:
            if self._lanes_busy < BESIDE_BACKLOG_LANES:
                return False
        due_by_ms = self.clock.now_ms() + self.lead.ms
        return self.heap.backlog_beside_others(due_by_ms, self.batch)

    def _express_beside_backlog(self) -> None:
        self._express_take(self.clock.now_ms(), beside_backlog=True)

    def _express_once(self) -> float | None:
        """With every lane busy: the due claims of applications with few due, in an express
        lane; returns seconds until the next of theirs falls due, or None to wait for a lane."""
        now_ms = self.clock.now_ms()
        lead_ms = self.lead.ms
        submitted, next_due = self._express_take(now_ms, beside_backlog=False)
        if submitted:
            return 0.0
        if next_due is None:
            return None  # nothing of theirs left, or the express lanes are busy too: the
            # first lane to finish wakes this loop
        wait_ms = max(next_due - lead_ms - now_ms, 1)
        self._wake_at_ms = now_ms + wait_ms
        return wait_ms / 1000

    def _express_take(self, now_ms: int, beside_backlog: bool) -> tuple[bool, int | None]:
        """Hand the due claims of applications with few due to a free express lane, if there
        is one; whether a batch went, and when the next of theirs falls due (ClaimHeap.pop_few)."""
        assert self._express is not None
        if not self._express.acquire(blocking=False):
            return False, None
        due_by_ms = now_ms + self.lead.ms
        # The few of each application gathered too: beside a backlog, a steady application's
        # alarms would otherwise pay for an express batch each (finding 54).
        gather_ms = self._gather_ms(express=True)
        due, next_due = self.heap.pop_few(
            due_by_ms,
            self.batch,
            self.few_due,
            beside_backlog,
            gather_to_ms=due_by_ms + gather_ms if gather_ms else None,
        )
        if due and (self.gate is not None or self.channels is not None):
            due = self._admit(due, now_ms)
        if due:
            self._submit(due, now_ms, self._express)
            return True, next_due
        self._express.release()
        return False, next_due

    def _admit(self, due: list[Claim], now_ms: int) -> list[Claim]:
        """What the delivery limits let through now; the rest wait in the heap, or in the
        database when their turn is further off than `hold_in_heap_ms`."""
        go, later = self.gate.admit(due, now_ms) if self.gate is not None else (due, [])
        if self.channels is not None:
            go, busy = self.channels.admit(go, now_ms)
            later += busy
        if later:
            horizon_ms = now_ms + self.hold_in_heap_ms
            far = [claim for claim in later if claim.due_ms > horizon_ms]
            pushed = self.heap.push_many(claim for claim in later if claim.due_ms <= horizon_ms)
            self._give_back(far + pushed.displaced, now_ms)
        return go

    def _give_back(self, claims: list[Claim], now_ms: int) -> None:
        if not claims:
            return
        try:
            self.claims.release(claims, now_ms)
        except Unavailable as error:  # they stay claimed; their lease ends them
            log.warning("could not give back %d held claims: %s", len(claims), error,
                        extra={"action": "release_failed"})  # fmt: skip
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
        still unfinished then (their claims return when their lease ends)."""
        if self._executor is None:
            return 0
        self._executor.shutdown(wait=False)
        with self._in_flight_lock:
            in_flight = set(self._in_flight)
        _done, unfinished = futures.wait(in_flight, timeout=deadline.remaining_s())
        return len(unfinished)

    def _submit(self, due: list[Claim], since_ms: int, lane: threading.BoundedSemaphore) -> None:
        assert self._executor is not None
        with self._in_flight_lock:
            self._lanes_busy += lane is self._lanes
            self._express_busy += lane is self._express
        future = self._executor.submit(self._ring_in_lane, due, since_ms, lane)
        with self._in_flight_lock:
            self._in_flight.add(future)
        future.add_done_callback(self._finished)

    def _finished(self, future: futures.Future[None]) -> None:
        with self._in_flight_lock:
            self._in_flight.discard(future)

    def _ring_in_lane(
        self, due: list[Claim], since_ms: int, lane: threading.BoundedSemaphore
    ) -> None:
        try:
            self.batches.ring(due, since_ms, express=lane is self._express)
        except Exception:
            log.exception("ring batch of %d failed; its claims return when their lease ends",
                          len(due), extra={"action": "ring_error"})  # fmt: skip
        finally:
            with self._in_flight_lock:
                self._lanes_busy -= lane is self._lanes
                self._express_busy -= lane is self._express
            lane.release()
            if self._loop_wants_lane and self.on_lane_free is not None:
                self.on_lane_free()
