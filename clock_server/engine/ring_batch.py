"""One ring batch: lock the due claims' rows, hand each row to its channel for its moment,
wait for the broker's confirms, record the outcomes, all in one transaction."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from clock_server.deadline import Deadline
from clock_server.engine.backoff import RetryPolicy
from clock_server.engine.channels import Channels, Route
from clock_server.engine.dispatch import LaneBatch
from clock_server.engine.hand_offs import Batch, Handed, HandOffs
from clock_server.engine.heap import ClaimHeap
from clock_server.engine.lead import LockLead
from clock_server.engine.moments import Sent, ready_at
from clock_server.engine.outcomes import Confirmed, Outcomes
from clock_server.engine.tuning import RingTuning
from clock_server.errors import Unavailable
from clock_server.metrics import Metrics
from clock_server.model import AMQP, PULL, WEBHOOK, Claim, RingRow
from clock_server.store.ports import ClaimStore, RingTransaction
from clock_server.timesource import Clock

log = logging.getLogger(__name__)


class BatchRinger:
    """Rings one batch of due claims on the calling thread, in one transaction.

    The rows are locked and those still pending with the claimed version kept (a concurrent
    cancel either committed first or waits for the lock); each row goes to its channel's
    hand-off (`hand_offs`) to be delivered at its moment, never before; with the broker's
    confirms, `Outcomes` records each alarm rung, retried, dead or expired. Rows the broker
    could not take for the service's own trouble go back to the heap for
    `tuning.broker_hold_ms`, their attempts untouched.

    A batch's pull rows are handed off in a transaction of their own, committed at once:
    they become visible to pullers at their moments, not when the batch's publishes have
    been confirmed.

    The lock's round trip is measured into `lead` (`LockLead`), shared with the ring loop,
    which takes claims off the heap that long before they are due.

    ``on_pushed_back`` is called when claims went back to the heap sooner than its head (a
    failed transaction): the ring loop may be asleep past their due time. ``on_dead`` is
    called once a batch that marked alarms dead has committed (to wake the dead-letter relay).
    """

    def __init__(
        self,
        claims: ClaimStore,
        heap: ClaimHeap,
        clock: Clock,
        metrics: Metrics,
        lead: LockLead,
        hand_offs: HandOffs,
        outcomes: Outcomes,
        tuning: RingTuning,
        *,
        publish_timeout_s: float,
        on_pushed_back: Callable[[], None],
        channels: Channels | None = None,
        on_dead: Callable[[], None] | None = None,
        engine_id: Callable[[], int] = lambda: 0,
    ) -> None:
        """`engine_id`: this engine's registry id now, which its rings and calls carry."""
        self.claims = claims
        self.engine_id = engine_id
        self.heap = heap
        self.clock = clock
        self.metrics = metrics
        self.lead = lead
        metrics.ring_lead_ms.set(lead.ms)
        self.hand_offs = hand_offs
        self.outcomes = outcomes
        self.tuning = tuning
        self.publish_timeout_s = publish_timeout_s
        self.on_pushed_back = on_pushed_back
        self.channels = channels
        self.on_dead = on_dead

    def ring(self, due: list[Claim], since_ms: int, plan: LaneBatch) -> None:
        """Ring `due`, which was to be taken off the heap at `since_ms`, as `plan` says."""
        # The registry is read before the transaction: on SQLite a read inside it would wait
        # for the lock the transaction holds.
        applications = {claim.application for claim in due}
        routes = self.channels.routes(applications) if self.channels is not None else {}
        retries = {
            application: self.outcomes.retry_for(application) for application in applications
        }
        for part in _pull_apart(due, routes):
            self._ring_part(part, since_ms, plan, routes, retries)

    def _ring_part(
        self,
        due: list[Claim],
        since_ms: int,
        plan: LaneBatch,
        routes: dict[str, Route],
        retries: dict[str, RetryPolicy],
    ) -> None:
        try:
            with self.claims.ring_transaction(self.engine_id()) as tx:
                died, held, again = self._ring_locked(tx, due, since_ms, plan, routes, retries)
        except Unavailable as error:
            # Nothing was recorded; keep the claims and try again shortly. A batch that was
            # already published is then published again (consumers deduplicate by message_id).
            log.warning(
                "ring batch of %d failed: %s", len(due), error, extra={"action": "ring_db_error"}
            )
            self.try_again_later(due)
            return
        if again:
            self._push_back(again)
        if held:
            self._hold(held, due)
        elif self.hand_offs.amqp.is_healthy():
            self.outcomes.broker_took()
        self.metrics.heap_size.set(len(self.heap))
        if died and self.on_dead is not None:
            self.on_dead()

    def _ring_locked(
        self,
        tx: RingTransaction,
        due: list[Claim],
        since_ms: int,
        plan: LaneBatch,
        routes: dict[str, Route],
        retries: dict[str, RetryPolicy],
    ) -> tuple[int, list[RingRow], list[Claim]]:
        """Lock, hand off and record `due`; returns how many alarms died, the rows the
        broker could not take, to hold, and the claims to hold again: the retries, and those
        not found live but still pending (`_not_live`)."""
        live = tx.lock_live(due)
        again = self._not_live(tx, due, live)
        lead_before = self.lead.ms
        lead_ms = self.lead.observe(self.clock.now_ms() - since_ms)
        if lead_ms != lead_before:  # the gauge is a file write in multi-process mode
            self.metrics.ring_lead_ms.set(lead_ms)
        due_at = {claim.id: claim.due_ms for claim in due}
        rows = self._keep_close(sorted(live, key=lambda r: due_at[r.id]), due_at, due, plan)
        batch = Batch(plan, routes, due, due_at)
        handed = Handed()
        for channel, rows_of in _by_channel(rows, routes).items():
            one = self.hand_offs.of(channel).hand(tx, rows_of, batch)
            handed.waiting += one.waiting
            handed.delivered += one.delivered
            handed.expired += one.expired
            handed.held += one.held
        confirmed = self._confirms(handed)
        webhooks = {name for name, route in routes.items() if route.channel == WEBHOOK}
        channel_of = {application: route.channel for application, route in routes.items()}
        died = self.outcomes.record(
            tx, confirmed, handed.expired, handed.delivered, due_at, retries, webhooks, channel_of
        )
        return died, handed.held, again + _retried(tx.retried, due)

    def _not_live(self, tx: RingTransaction, due: list[Claim], live: list[RingRow]) -> list[Claim]:
        """The claims of `due` not found live that are still pending: one whose row another
        transaction held locked (a cancel deciding, another engine's batch, a stalled
        server's), to look at again in a moment; one that moved since it was read (changed,
        retried by another engine), at its new time. Nothing else would read them again."""
        if len(live) == len(due):
            return []
        found = {row.id for row in live}
        missed = {claim.id: claim for claim in due if claim.id not in found}
        again_ms = self.clock.now_ms() + self.tuning.locked_retry_ms
        again: list[Claim] = []
        for fresh in tx.still_pending(list(missed.values())):
            read = missed[fresh.id]
            same = fresh.version == read.version
            again.append(read._replace(due_ms=max(read.due_ms, again_ms)) if same else fresh)
        return again

    def _confirms(self, handed: Handed) -> list[Confirmed]:
        """Wait for the confirms of `handed.waiting`; the rows not sent because their cutoff
        had passed at their moment join `handed.expired`, those the broker never settled
        `handed.held`."""
        confirmed: list[Confirmed] = []
        deadline = Deadline(self.publish_timeout_s)
        # The latest first: the earlier ones' confirms have come by then, so this thread
        # wakes once for the batch, not once for each moment.
        sent: list[Sent] = handed.waiting
        for ready, at_ms, pending in reversed(sent):
            flags = pending.wait(deadline.remaining_s())
            if not all(flags):  # each confirmed: nothing to sort out (a burst's usual case)
                late = set(pending.too_late)
                refused = set(pending.refused)
                handed.expired += [ready[index] for index in sorted(late)]
                told = late | refused  # neither confirmed nor refused: never settled
                handed.held += [ready[i] for i, ok in enumerate(flags) if not ok and i not in told]
                kept = [i for i, ok in enumerate(flags) if ok or i in refused]
                ready, flags = [ready[i] for i in kept], [flags[i] for i in kept]
            confirmed.append(Confirmed(ready, pending.sent_at_ms or at_ms, flags))
        confirmed.reverse()
        return confirmed

    def _hold(self, held: list[RingRow], due: list[Claim]) -> None:
        """Back to the heap for a while, still pending and claimed, their attempts untouched:
        the broker could not take them, which is the service's trouble."""
        again_ms = self.clock.now_ms() + self.tuning.broker_hold_ms
        claims = {claim.id: claim for claim in due}
        self._push_back(
            claims[row.id]._replace(due_ms=max(claims[row.id].due_ms, again_ms)) for row in held
        )
        self.outcomes.held(held, self.tuning.broker_hold_ms)

    def try_again_later(self, due: Iterable[Claim]) -> None:
        """Return the claims of a batch that failed to the heap, `RingTuning.db_retry_ms`
        from now: nothing else would read them again before the preloader's next reading
        from the start. Those it recorded after all are not live to the next try."""
        retry_at = self.clock.now_ms() + self.tuning.db_retry_ms
        self._push_back(c._replace(due_ms=max(c.due_ms, retry_at)) for c in due)

    def _push_back(self, claims: Iterable[Claim]) -> None:
        """Return claims to the heap; the ring loop may sleep past their due time."""
        if self.heap.push_many(claims).head_moved_earlier:
            self.on_pushed_back()

    def _keep_close(
        self, rows: list[RingRow], due_at: dict[int, int], due: list[Claim], plan: LaneBatch
    ) -> list[RingRow]:
        """Rows due within the lead and the batch's span; any other goes back to the heap
        (cannot happen while versions hold, since a claim's due time is never before its
        target)."""
        limit = self.clock.now_ms() + self.lead.ms + plan.gather_ms + self.tuning.lead_slack_ms
        far = [r for r in rows if ready_at(r, due_at) > limit]
        if not far:
            return rows
        claims = {claim.id: claim for claim in due}
        self._push_back(claims[r.id]._replace(due_ms=ready_at(r, due_at)) for r in far)
        return [r for r in rows if ready_at(r, due_at) <= limit]


def _retried(retried: list[tuple[int, int]], due: list[Claim]) -> list[Claim]:
    """The claims of the retries a batch scheduled, each (id, due again at), as its
    transaction left them: their version moved once more."""
    claims = {claim.id: claim for claim in due}
    return [
        claims[alarm_id]._replace(due_ms=at_ms, version=claims[alarm_id].version + 1)
        for alarm_id, at_ms in retried
    ]


def _pull_apart(due: list[Claim], routes: dict[str, Route]) -> list[list[Claim]]:
    """`due` as one part, or, when it mixes pull rows with others, the pull rows first as a
    part of their own: their transaction commits at once, before their moments."""
    pulls = {app for app, route in routes.items() if route.channel == PULL}
    if not pulls or len(pulls) == len(routes):
        return [due]
    return [
        [claim for claim in due if claim.application in pulls],
        [claim for claim in due if claim.application not in pulls],
    ]


def _by_channel(rows: list[RingRow], routes: dict[str, Route]) -> dict[str, list[RingRow]]:
    if not routes or all(route.channel == AMQP for route in routes.values()):
        return {AMQP: rows} if rows else {}
    split: dict[str, list[RingRow]] = {}
    for row in rows:
        split.setdefault(routes[row.application].channel, []).append(row)
    return split
