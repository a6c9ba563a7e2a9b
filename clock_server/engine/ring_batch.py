"""One ring batch: lock the due claims' rows, publish each alarm at its moment, record each
outcome, all in one transaction."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable
from typing import NamedTuple

from clock_server.broker.publisher import Publisher
from clock_server.deadline import Deadline
from clock_server.engine.backoff import RetryPolicy
from clock_server.engine.channels import Channels, Route
from clock_server.engine.delivery_gate import DeliveryGate
from clock_server.engine.heap import ClaimHeap, few_beside_backlog
from clock_server.engine.lead import LockLead
from clock_server.engine.messages import message_of
from clock_server.engine.moments import (
    Sent,
    SentNow,
    hand_over,
    interleaved,
    past_cutoff,
    ready_at,
)
from clock_server.errors import Unavailable
from clock_server.metrics import Metrics
from clock_server.model import AMQP, NOT_CONFIRMED, Claim, RingRow
from clock_server.store.ports import ClaimStore, RingTransaction
from clock_server.timesource import Clock

log = logging.getLogger(__name__)

DB_RETRY_MS = 1_000
# Alarms the broker could not take for the service's own trouble (no connection, a blocked
# connection, no confirm in time) wait in the heap this long, their attempts untouched; the
# publisher reconnects within its own backoff meanwhile.
BROKER_HOLD_MS = 1_000
_LEAD_SLACK_MS = 50
# An express batch rings beside a backlog (or while every lane is busy), where each of its
# transactions is a lock, an UPDATE and a commit that the busy lanes and the broker wait
# behind: four gathering spans per batch took the engine's CPU per alarm of a backlog 6 %
# lower (finding 66).
EXPRESS_GATHER_SPANS = 4


class _Recorded(NamedTuple):
    """How many of a batch's alarms each outcome got, for the metrics and the log."""

    rung: Counter[str]  # by application
    retried: int
    dead_ids: list[int]
    dead: Counter[str]  # by application


class BatchRinger:
    """Rings one batch of due claims in one transaction, on the calling thread.

    The rows are locked and those still pending with the claimed version kept (a concurrent
    cancel either committed first or waits for the lock); each group of alarms is published
    the moment it is due, never before (rows locked ahead of time wait on the Clock); rows
    past their cutoff are marked expired; then, with the broker's confirms, each alarm is
    marked rung, retried with backoff, or dead. Only a refusal (a nack, a message returned
    as unroutable) spends an attempt: while the broker cannot be reached, the batch's AMQP
    alarms stay pending and go back to the heap (`BROKER_HOLD_MS`), those past their cutoff
    are expired, and the rest of the batch rings as usual.

    The lock's round trip is measured into `lead` (`LockLead`), shared with the ring loop,
    which takes claims off the heap that long before they are due, and those due up to
    ``gather_ms`` after that with them (`express_gather_ms` for an express batch): one
    transaction for the alarms of that span.

    A batch whose applications all publish to RabbitMQ hands every moment's group to the
    publisher at once (`Publisher.start_timed`), which sends each when its moment comes;
    the lane then waits once for the confirms instead of waking at each moment.

    With ``express`` a batch publishes on ``express_publisher``; in a batch that holds a
    backlog's many rows, the few rows of other applications go there too: on the backlog's
    own connection the broker would read them after every message sent before them.

    With ``channels``, the alarms of applications on the webhook or pull channel are not
    published: the batch hands them off (`Channels`), a webhook call starting at the moment
    a publish would. ``gate`` gives each application's retry policy, and tells the
    lateness its delivery rate caused apart from the engine's own.

    ``on_pushed_back`` is called when claims went back to the heap sooner than its head
    (a failed transaction): the ring loop may be asleep past their due time. ``on_dead`` is
    called once a batch that marked alarms dead has committed (to wake the dead-letter relay).
    """

    def __init__(
        self,
        claims: ClaimStore,
        heap: ClaimHeap,
        publisher: Publisher,
        clock: Clock,
        metrics: Metrics,
        retry: RetryPolicy,
        lead: LockLead,
        *,
        publish_timeout_s: float,
        few_due: int,
        on_pushed_back: Callable[[], None],
        gather_ms: int = 0,
        express_publisher: Publisher | None = None,
        gate: DeliveryGate | None = None,
        channels: Channels | None = None,
        on_dead: Callable[[], None] | None = None,
    ) -> None:
        self.claims = claims
        self.heap = heap
        self.publisher = publisher
        self.clock = clock
        self.metrics = metrics
        self.retry = retry
        self.lead = lead
        metrics.ring_lead_ms.set(lead.ms)
        self.publish_timeout_s = publish_timeout_s
        self.few_due = few_due
        self._gather_ms = gather_ms
        self.on_pushed_back = on_pushed_back
        self.express_publisher = express_publisher or publisher
        self.gate = gate
        self.channels = channels
        self.on_dead = on_dead
        self._holding = False  # alarms were held for the broker since it last took any

    @property
    def gather_ms(self) -> int:
        """How far past the lead a batch reaches; nothing where a ring transaction holds the
        whole database (a longer one would delay every write)."""
        return self._gather_ms if self.claims.locks_rows else 0

    @property
    def express_gather_ms(self) -> int:
        """How far past the lead an express batch reaches: EXPRESS_GATHER_SPANS times as far."""
        return self.gather_ms * EXPRESS_GATHER_SPANS

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
                died, held = self._ring_locked(
                    tx, due, since_ms, publisher, routes, retries, express
                )
        except Unavailable as error:
            # Nothing was recorded; keep the claims and try again shortly. A batch that was
            # already published is then published again (consumers deduplicate by message_id).
            log.warning(
                "ring batch of %d failed: %s", len(due), error, extra={"action": "ring_db_error"}
            )
            retry_at = self.clock.now_ms() + DB_RETRY_MS
            self._push_back(c._replace(due_ms=max(c.due_ms, retry_at)) for c in due)
            return
        if held:
            self._hold(held, due)
        elif self._holding and self.publisher.is_healthy():
            self._holding = False
            log.info("the broker takes alarms again", extra={"action": "ring_broker_back"})
        self.metrics.heap_size.set(len(self.heap))
        if died and self.on_dead is not None:
            self.on_dead()

    def _hold(self, held: list[RingRow], due: list[Claim]) -> None:
        """Back to the heap for `BROKER_HOLD_MS`, still pending and claimed, their attempts
        untouched: the broker could not take them, which is the service's trouble."""
        again_ms = self.clock.now_ms() + BROKER_HOLD_MS
        claims = {claim.id: claim for claim in due}
        self._push_back(
            claims[row.id]._replace(due_ms=max(claims[row.id].due_ms, again_ms)) for row in held
        )
        self.metrics.count(self.metrics.held, [row.application for row in held])
        if not self._holding:
            self._holding = True
            log.warning(
                "the broker cannot take alarms: %d held, tried again every %d ms",
                len(held),
                BROKER_HOLD_MS,
                extra={"action": "ring_held_for_broker"},
            )

    def _push_back(self, claims: Iterable[Claim]) -> None:
        """Return claims to the heap; the ring loop may sleep past their due time."""
        if self.heap.push_many(claims).head_moved_earlier:
            self.on_pushed_back()

    def _ring_locked(
        self,
        tx: RingTransaction,
        due: list[Claim],
        since_ms: int,
        publisher: Publisher,
        routes: dict[str, Route],
        retries: dict[str, RetryPolicy],
        express: bool,
    ) -> tuple[int, list[RingRow]]:
        """Lock, publish (or hand off) and record `due`; returns how many alarms died, and the
        rows the broker could not take, to hold."""
        live = tx.lock_live(due)
        lead_before = self.lead.ms
        lead_ms = self.lead.observe(self.clock.now_ms() - since_ms)
        if lead_ms != lead_before:  # the gauge is a file write in multi-process mode
            self.metrics.ring_lead_ms.set(lead_ms)
        due_at = {claim.id: claim.due_ms for claim in due}
        gather_ms = self.express_gather_ms if express else self.gather_ms
        rows = self._keep_close(sorted(live, key=lambda r: due_at[r.id]), due_at, due, gather_ms)
        expired: list[RingRow] = []
        held: list[RingRow] = []
        if not publisher.is_healthy():
            rows, expired, held = self._without_broker(rows, routes)
        beside = self._few_beside_backlog(rows, publisher)
        if all(route.channel == AMQP for route in routes.values()):
            # A row whose cutoff has passed by its moment is not sent (`TimedBatch.too_late`),
            # and is expired only then, even when it will have passed by its moment (a retry
            # due after its cutoff).
            sent = hand_over(
                rows, due_at, self.clock, lambda part: self._connections(part, publisher, beside)
            )
        else:
            sent, past = self._publish_by_lane(tx, rows, due, due_at, publisher, beside, routes)
            expired += past
        confirmed: list[tuple[list[RingRow], int, list[bool]]] = []
        deadline = Deadline(self.publish_timeout_s)
        # The latest first: the earlier ones' confirms have come by then, so this thread
        # wakes once for the batch, not once for each moment.
        for ready, at_ms, pending in reversed(sent):
            flags = pending.wait(deadline.remaining_s())
            if not all(flags):  # each confirmed: nothing to sort out (a burst's usual case)
                late = set(pending.too_late)  # not sent: their cutoff passed at the moment
                refused = set(pending.refused)
                expired += [ready[index] for index in sorted(late)]
                # Neither confirmed nor refused: the broker never settled them.
                told = late | refused
                held += [ready[i] for i, ok in enumerate(flags) if not ok and i not in told]
                kept = [i for i, ok in enumerate(flags) if ok or i in refused]
                ready, flags = [ready[i] for i in kept], [flags[i] for i in kept]
            confirmed.append((ready, pending.sent_at_ms or at_ms, flags))
        confirmed.reverse()
        tx.mark_expired(sorted(row.id for row in expired), self.clock.now_ms())
        recorded = self._record(tx, confirmed, due_at, retries)
        self._count(recorded, [row.application for row in expired])
        return len(recorded.dead_ids), held

    def _without_broker(
        self, rows: list[RingRow], routes: dict[str, Route]
    ) -> tuple[list[RingRow], list[RingRow], list[RingRow]]:
        """With the broker out of reach: the rows to ring still (other channels'), the AMQP
        rows past their cutoff (expired), and the other AMQP rows (held)."""
        now_ms = self.clock.now_ms()
        ring: list[RingRow] = []
        expired: list[RingRow] = []
        held: list[RingRow] = []
        for row in rows:
            route = routes.get(row.application)
            if route is not None and route.channel != AMQP:
                ring.append(row)
            elif past_cutoff(row, now_ms):
                expired.append(row)
            else:
                held.append(row)
        return ring, expired, held

    def _publish_by_lane(
        self,
        tx: RingTransaction,
        rows: list[RingRow],
        due: list[Claim],
        due_at: dict[int, int],
        publisher: Publisher,
        beside: set[str],
        routes: dict[str, Route],
    ) -> tuple[list[Sent], list[RingRow]]:
        """Wait on the clock for each moment, then publish its rows and start its webhook
        calls (or hand them to pullers), never before. Returns what was published, and the
        rows past their cutoff at their moment."""
        assert self.channels is not None
        sent: list[Sent] = []
        expired: list[RingRow] = []
        handed: list[tuple[RingRow, int]] = []  # to a webhook or to pullers, and when
        versions: dict[int, int] = {}  # the claims' versions, once a row is handed off
        index = 0
        while index < len(rows):
            now_ms = self.clock.now_ms()
            first = index
            while index < len(rows) and ready_at(rows[index], due_at) <= now_ms:
                index += 1
            if index == first:  # locked ahead of time: publish exactly when due, never before
                self.clock.sleep_until(ready_at(rows[index], due_at))
                continue
            group = rows[first:index]
            expired += [row for row in group if past_cutoff(row, now_ms)]
            ready = interleaved([row for row in group if not past_cutoff(row, now_ms)])
            ready, others = self.channels.split(ready, routes)
            if others and not versions:
                versions = {claim.id: claim.version for claim in due}
            self.channels.call(others, versions, routes)
            handed += [(row, now_ms) for row in others]
            for part, on in self._connections(ready, publisher, beside):
                pending = on.start_batch([message_of(row, now_ms) for row in part])
                sent.append((part, now_ms, SentNow(pending, now_ms)))
        if handed:
            self._hand_off(tx, handed, due_at, routes)
        return sent, expired

    def _few_beside_backlog(self, rows: list[RingRow], publisher: Publisher) -> set[str]:
        """The applications with few rows in a batch that holds a backlog's many."""
        if publisher is self.express_publisher or len(rows) <= self.few_due:
            return set()
        return few_beside_backlog(Counter(row.application for row in rows), self.few_due)

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
        self, rows: list[RingRow], due_at: dict[int, int], due: list[Claim], gather_ms: int
    ) -> list[RingRow]:
        """Rows due within the lead and `gather_ms`; any other goes back to the heap (cannot
        happen while versions hold, since a claim's due time is never before its target)."""
        limit = self.clock.now_ms() + self.lead.ms + gather_ms + _LEAD_SLACK_MS
        far = [r for r in rows if ready_at(r, due_at) > limit]
        if not far:
            return rows
        claims = {claim.id: claim for claim in due}
        self._push_back(claims[r.id]._replace(due_ms=ready_at(r, due_at)) for r in far)
        return [r for r in rows if ready_at(r, due_at) <= limit]

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
        if dead or retries:  # refused by the broker: all the publisher tells of a refusal
            tx.mark_dead(dead, now_ms, NOT_CONFIRMED)
            tx.schedule_retries(retries, now_ms, NOT_CONFIRMED)
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
