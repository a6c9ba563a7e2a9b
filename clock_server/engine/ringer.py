"""The ring step: publish every due claim in one batch and record each outcome."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from clock_server.broker.publisher import PendingBatch, Publisher
from clock_server.deadline import Deadline
from clock_server.engine.backoff import RetryPolicy
from clock_server.engine.channels import Channels, Route
from clock_server.engine.delivery_gate import DeliveryGate
from clock_server.engine.heap import ClaimHeap
from clock_server.engine.lead import LockLead
from clock_server.engine.messages import message_of
from clock_server.errors import Unavailable
from clock_server.metrics import Metrics
from clock_server.model import (
    NOT_CONFIRMED,
    PUBLISHER_UNAVAILABLE,
    Claim,
    RingRow,
)
from clock_server.store.ports import ClaimStore, RingTransaction
from clock_server.timesource import Clock

log = logging.getLogger(__name__)

DB_RETRY_MS = 1_000
# Express batches in flight at once: each waits for the broker's confirms and its commit.
EXPRESS_LANES = 3
# Lanes ringing a backlog's batches at once while other applications have claims held: each
# busy lane is one more thread that the express lanes and the express connection's IO thread
# wait behind for the interpreter lock, 5 ms at a time, after every wake-up (finding 47).
BESIDE_BACKLOG_LANES = 2
_LEAD_SLACK_MS = 50


class _Recorded(NamedTuple):
    """How many of a batch's alarms each outcome got, for the metrics and the log."""

    rung: Counter[str]  # by application
    retried: int
    dead_ids: list[int]
    dead: Counter[str]  # by application


class Ringer:
    """Takes due claims off the heap, re-checks them under row locks, publishes, records.

    With ``lanes`` > 1, up to that many batches are in flight at once, each in its own
    transaction on its own thread: an alarm falling due while a batch waits for the broker's
    confirms and the database's commit is rung at once in another lane instead of waiting.
    When every lane is busy, due alarms gather in the heap and go out as one larger batch,
    except those of applications with at most ``few_due`` due: the express lanes ring them
    at once, so that a backlog of one application, which keeps every lane
    busy, does not make the others' few alarms wait for a lane. Beside such a backlog they
    go to an express lane even while a lane is free, so that they are not locked and
    published with a large batch of the backlog; and with ``express_publisher`` the express
    lanes publish on a connection of their own, not queued behind the backlog's messages, as
    do the few alarms of such applications that a backlog's batch takes all the same (when
    every express lane is busy).
    There are EXPRESS_LANES of them: while one waits for its confirms and its commit, which
    take tens of milliseconds beside a backlog, the next few due start in another. And
    beside such a backlog at most BESIDE_BACKLOG_LANES of the lanes ring its batches at once,
    so that fewer busy threads stand between the express lanes and the interpreter lock.

    With ``lead_ms`` > 0, alarms are taken off the heap that much before they are due and
    their rows locked in advance; the lane then publishes each one the moment it is due, so
    the lock's round trip is not part of the lateness. While locking takes longer than that
    (a database busy with other work, threads woken late on a busy machine), the lead grows to
    cover it, up to ``lead_max_ms`` (`LockLead`). A cancel may wait that much longer.

    ``on_lane_free`` wakes the ring loop: when a lane comes free while the loop waits for one,
    and when a batch puts claims back that fall due before the loop was to wake. Not after
    every batch: at a steady rate each wake-up would be one more pass of the loop per alarm.

    ``on_dead`` is called once a batch that marked alarms dead has committed (to wake the
    dead-letter relay).

    With ``channels``, the alarms of applications on the webhook or pull channel are not
    published: the batch hands them off (`Channels`), a webhook call starting at the moment
    a publish would.
    """

    def __init__(
        self,
        claims: ClaimStore,
        heap: ClaimHeap,
        publisher: Publisher,
        clock: Clock,
        metrics: Metrics,
        retry: RetryPolicy,
        *,
        batch: int,
        publish_timeout_s: float,
        lanes: int = 1,
        lead_ms: int = 0,
        lead_max_ms: int = 0,
        on_lane_free: Callable[[], None] | None = None,
        gate: DeliveryGate | None = None,
        hold_in_heap_ms: int = 10_000,
        few_due: int = 50,
        express_publisher: Publisher | None = None,
        on_dead: Callable[[], None] | None = None,
        channels: Channels | None = None,
    ) -> None:
        self.claims = claims
        self.heap = heap
        self.publisher = publisher
        self.clock = clock
        self.metrics = metrics
        self.retry = retry
        self.batch = batch
        self.publish_timeout_s = publish_timeout_s
        self.on_lane_free = on_lane_free
        self.gate = gate
        self.hold_in_heap_ms = hold_in_heap_ms
        self.few_due = few_due
        self.express_publisher = express_publisher or publisher
        self.on_dead = on_dead
        self.channels = channels
        self.lead = LockLead(lead_ms, lead_max_ms)
        metrics.ring_lead_ms.set(self.lead.ms)
        self._wake_at_ms: int | None = None  # when run_once last asked to be called again
        self._lanes = threading.BoundedSemaphore(lanes) if lanes > 1 else None
        self._express = threading.BoundedSemaphore(EXPRESS_LANES) if lanes > 1 else None
        threads = lanes + EXPRESS_LANES
        self._executor = ThreadPoolExecutor(threads, "clock-ring-lane") if lanes > 1 else None
        self._in_flight: set[futures.Future[None]] = set()
        self._lanes_busy = 0  # of the `lanes`, not the express ones
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
        due = self.heap.pop_due(now_ms + lead_ms, self.batch, caps)
        if due and (self.gate is not None or self.channels is not None):
            due = self._admit(due, now_ms)
        if due:
            if self._lanes is not None:
                self._submit(due, since_ms, self._lanes)
            else:
                self.ring(due, since_ms)
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
        due, next_due = self.heap.pop_few(
            now_ms + self.lead.ms, self.batch, self.few_due, beside_backlog
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
            self.ring(due, since_ms, express=lane is self._express)
        except Exception:
            log.exception("ring batch of %d failed; its claims return when their lease ends",
                          len(due), extra={"action": "ring_error"})  # fmt: skip
        finally:
            with self._in_flight_lock:
                self._lanes_busy -= lane is self._lanes
            lane.release()
            if self._loop_wants_lane:
                self._wake_loop()

    def _wake_loop(self) -> None:
        if self.on_lane_free is not None:
            self.on_lane_free()

    def _push_back(self, claims: Iterable[Claim]) -> None:
        """Return claims to the heap from a lane: the loop may sleep past their due time."""
        if self.heap.push_many(claims).head_moved_earlier:
            self._wake_loop()

    def ring(self, due: list[Claim], since_ms: int | None = None, express: bool = False) -> None:
        """Ring `due`, which was to be taken off the heap at `since_ms` (now, if not given)."""
        if since_ms is None:
            since_ms = self.clock.now_ms()
        publisher = self.express_publisher if express else self.publisher
        # The registry is read before the transaction: on SQLite a read inside it would wait
        # for the lock the transaction holds.
        applications = {claim.application for claim in due}
        routes = self.channels.routes(applications) if self.channels is not None else {}
        retries = {application: self._retry_for(application) for application in applications}
        try:
            with self.claims.ring_transaction() as tx:
                died = self._ring_locked(tx, due, since_ms, publisher, routes, retries)
        except Unavailable as error:
            # Nothing was recorded; keep the claims and try again shortly. A batch that was
            # already published is then published again (consumers deduplicate by message_id).
            log.warning(
                "ring batch of %d failed: %s", len(due), error, extra={"action": "ring_db_error"}
            )
            retry_at = self.clock.now_ms() + DB_RETRY_MS
            self._push_back(c._replace(due_ms=max(c.due_ms, retry_at)) for c in due)
            return
        self.metrics.heap_size.set(len(self.heap))
        if died and self.on_dead is not None:
            self.on_dead()

    def _ring_locked(
        self,
        tx: RingTransaction,
        due: list[Claim],
        since_ms: int,
        publisher: Publisher,
        routes: dict[str, Route],
        retries: dict[str, RetryPolicy],
    ) -> int:
        """Lock, publish (or hand off) and record `due`; returns how many alarms died."""
        live = tx.lock_live(due)
        lead_before = self.lead.ms
        lead_ms = self.lead.observe(self.clock.now_ms() - since_ms)
        if lead_ms != lead_before:  # the gauge is a file write in multi-process mode
            self.metrics.ring_lead_ms.set(lead_ms)
        due_at = {claim.id: claim.due_ms for claim in due}
        rows = self._keep_close(sorted(live, key=lambda r: due_at[r.id]), due_at, due)
        beside = self._few_beside_backlog(rows, publisher)
        sent: list[tuple[list[RingRow], int, PendingBatch]] = []
        expired: list[int] = []
        expired_of: list[str] = []  # their applications
        handed: list[tuple[RingRow, int]] = []  # to a webhook or to pullers, and when
        versions: dict[int, int] = {}  # the claims' versions, once a row is handed off
        index = 0
        while index < len(rows):
            now_ms = self.clock.now_ms()
            first = index
            while index < len(rows) and _ready_at(rows[index], due_at) <= now_ms:
                index += 1
            if index == first:  # locked ahead of time: publish exactly when due, never before
                self.clock.sleep_until(_ready_at(rows[index], due_at))
                continue
            group = rows[first:index]
            late = {
                r.id for r in group if r.latest_ring_at is not None and r.latest_ring_at < now_ms
            }
            expired += sorted(late)
            expired_of += [r.application for r in group if r.id in late]
            ready = _interleaved([r for r in group if r.id not in late])
            if ready and self.channels is not None:
                ready, others = self.channels.split(ready, routes)
                if others and not versions:
                    versions = {claim.id: claim.version for claim in due}
                self.channels.call(others, versions, routes)
                handed += [(row, now_ms) for row in others]
            for part, on in self._connections(ready, publisher, beside):
                sent.append((part, now_ms, on.start_batch([message_of(r, now_ms) for r in part])))
        tx.mark_expired(expired, self.clock.now_ms())
        if handed:
            self._hand_off(tx, handed, due_at, routes)
        confirmed = [
            (ready, published_at, pending.wait(self.publish_timeout_s))
            for ready, published_at, pending in sent
        ]
        recorded = self._record(tx, confirmed, due_at, retries)
        self._count(recorded, expired_of)
        return len(recorded.dead_ids)

    def _few_beside_backlog(self, rows: list[RingRow], publisher: Publisher) -> set[str]:
        """The applications with few rows in a batch that holds a backlog's many."""
        if publisher is self.express_publisher or len(rows) <= self.few_due:
            return set()
        counts = Counter(row.application for row in rows)
        if len(counts) < 2 or max(counts.values()) <= self.few_due:
            return set()
        return {application for application, count in counts.items() if count <= self.few_due}

    def _connections(
        self, ready: list[RingRow], publisher: Publisher, beside: set[str]
    ) -> list[tuple[list[RingRow], Publisher]]:
        """`ready` split by the connection that publishes it: the few rows of applications
        beside a backlog go on the express connection. On the backlog's own connection the
        broker reads them only after every message sent before them, which beside a backlog
        holds them there for 100 ms and more (finding 47)."""
        if not beside:
            return [(ready, publisher)] if ready else []
        few = [row for row in ready if row.application in beside]
        many = [row for row in ready if row.application not in beside]
        parts = [(few, self.express_publisher), (many, publisher)]
        return [(part, on) for part, on in parts if part]

    def _hand_off(
        self,
        tx: RingTransaction,
        handed: list[tuple[RingRow, int]],
        due_at: dict[int, int],
        routes: dict[str, Route],
    ) -> None:
        """Mark `handed` delivering; their lateness is the engine's until they were handed."""
        assert self.channels is not None
        self.channels.hand_off(tx, handed, self.clock.now_ms(), routes)
        self.metrics.observe_lateness(
            [self._lateness_ms(row, at_ms, due_at) / 1000 for row, at_ms in handed]
        )

    def _keep_close(
        self, rows: list[RingRow], due_at: dict[int, int], due: list[Claim]
    ) -> list[RingRow]:
        """Rows due within the lead; any other goes back to the heap (cannot happen while
        versions hold, since a claim's due time is never before its target)."""
        limit = self.clock.now_ms() + self.lead.ms + _LEAD_SLACK_MS
        far = [r for r in rows if _ready_at(r, due_at) > limit]
        if not far:
            return rows
        claims = {claim.id: claim for claim in due}
        self._push_back(claims[r.id]._replace(due_ms=_ready_at(r, due_at)) for r in far)
        return [r for r in rows if _ready_at(r, due_at) <= limit]

    def _record(
        self,
        tx: RingTransaction,
        confirmed: list[tuple[list[RingRow], int, list[bool]]],
        due_at: dict[int, int],
        retries_of: dict[str, RetryPolicy],
    ) -> _Recorded:
        """Each publish group's rows, when it was published and what the broker said of each."""
        now_ms = self.clock.now_ms()
        rung: list[tuple[int, int]] = []
        rung_of: list[str] = []  # their applications
        dead: list[int] = []
        dead_of: list[str] = []
        retries: list[tuple[int, int]] = []
        lateness_s: list[float] = []
        for ready, published_at, flags in confirmed:
            for row, ok in zip(ready, flags, strict=True):
                if ok:
                    rung.append((row.id, published_at))
                    rung_of.append(row.application)
                    lateness_s.append(self._lateness_ms(row, published_at, due_at) / 1000)
                    continue
                retry = retries_of.get(row.application) or self._retry_for(row.application)
                if retry.gives_up(row.retry_times + 1):
                    dead.append(row.id)
                    dead_of.append(row.application)
                else:
                    retries.append((row.id, now_ms + retry.delay_ms(row.retry_times + 1)))
        self.metrics.observe_lateness(lateness_s)
        tx.mark_rung(rung, now_ms)
        if dead or retries:  # the history's error: all the publisher tells of a failure
            error = NOT_CONFIRMED if self.publisher.is_healthy() else PUBLISHER_UNAVAILABLE
            tx.mark_dead(dead, now_ms, error)
            tx.schedule_retries(retries, now_ms, error)
        return _Recorded(Counter(rung_of), len(retries), dead, Counter(dead_of))

    def _retry_for(self, application: str) -> RetryPolicy:
        return self.gate.retry_for(application) if self.gate is not None else self.retry

    def _lateness_ms(self, row: RingRow, published_at: int, due_at: dict[int, int]) -> int:
        """The engine's own lateness: from the target, or for an alarm its application's
        delivery rate held back, from when the rate let it go (that delay counted apart)."""
        if self.gate is not None:
            held_ms = self.gate.policy_delay_ms(row.id, row.target_ring_at, due_at[row.id])
            if held_ms is not None:
                self.metrics.throttle_delay.observe(held_ms / 1000)
                return max(published_at - max(due_at[row.id], row.target_ring_at), 0)
        return max(published_at - row.target_ring_at, 0)

    def _count(self, recorded: _Recorded, expired_of: list[str]) -> None:
        dead = len(recorded.dead_ids)
        metrics = self.metrics
        metrics.count(metrics.rung, recorded.rung)
        if recorded.retried or dead:
            metrics.publish_failures.inc(recorded.retried + dead)
        metrics.count(metrics.expired, expired_of)
        metrics.count(metrics.dead, recorded.dead)
        if recorded.retried or dead:
            log.warning(
                "publish failed for %d alarms: %d will retry, %d are dead",
                recorded.retried + dead,
                recorded.retried,
                dead,
                extra={"action": "publish_failed"},
            )
        if dead:
            log.error(
                "%d alarms dead after their last retry (by application: %s): %s",
                dead,
                dict(recorded.dead),
                recorded.dead_ids[:20],
                extra={"action": "alarm_dead", "dead": dead},
            )


def _interleaved(rows: list[RingRow]) -> list[RingRow]:
    """Rows published together, taken from each application in turn (each in its own order):
    in a backlog's batch, an application's few rows are not queued behind another's many."""
    if len(rows) < 2 or all(row.application == rows[0].application for row in rows):
        return rows
    rank: dict[str, int] = {}
    keyed = []
    for position, row in enumerate(rows):
        turn = rank.get(row.application, 0)
        rank[row.application] = turn + 1
        keyed.append((turn, position, row))
    keyed.sort(key=lambda item: (item[0], item[1]))
    return [row for _, _, row in keyed]


def _ready_at(row: RingRow, due_at: dict[int, int]) -> int:
    """Never before the target, unless the alarm's count was reached: its target is then only
    the deadline it beat."""
    if row.count_reached:
        return due_at[row.id]
    return max(due_at[row.id], row.target_ring_at)
