"""Recording webhook answers in batches: one transaction for every answer that came in since
the last, as a ring batch records its publishes."""

from __future__ import annotations

import logging
import threading
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import NamedTuple

from clock_server.delivery.sender_port import WebhookOutcome, call_outcome
from clock_server.engine.backoff import RetryPolicy
from clock_server.errors import Unavailable
from clock_server.metrics import Metrics
from clock_server.minute_stats import RingTally
from clock_server.model import WEBHOOK, Claim, RingRow
from clock_server.store.ports import ClaimStore, RingTransaction
from clock_server.timesource import Clock

log = logging.getLogger(__name__)

BATCH = 1_000
DB_RETRY_S = 1.0


class WebhookCall(NamedTuple):
    """An alarm handed to its webhook: the row as the ring batch locked it, and the version
    its hand-off gave it, which fences the answer's record."""

    row: RingRow
    version: int
    at_ms: int = 0  # its moment: the call starts then, never before
    late_from_ms: int = 0  # the moment its lateness counts from; 0: its target
    slot: int = 0  # the alarm's (clock_server.slot_space)


class Answer(NamedTuple):
    """How a call ended: sent at `sent_at` with `outcome`, or, with none, never sent because
    its cutoff had passed."""

    call: WebhookCall
    sent_at: int
    outcome: WebhookOutcome | None
    took_s: float | None = None  # how long the HTTP call took; None when none was made
    # How long, past its due time, it waited for a free call of its application (every one
    # busy on a slow receiver): the receiver's delay, not the engine's lateness.
    slot_wait_ms: int = 0


class WebhookRecorder:
    """Gathers the answers of webhook calls and records them in batches, each in one
    transaction fenced by the rows' versions: a 2xx makes the alarm rung; anything else is a
    failed attempt, retried after the application's backoff (and no sooner than a 429's or
    503's Retry-After) or dead after its last retry; an alarm past its cutoff is expired.
    An answer whose alarm moved on meanwhile (taken over, re-driven) records nothing.

    `run_once` records one batch; a batch the database refused is kept and tried again.
    """

    def __init__(
        self,
        claims: ClaimStore,
        clock: Clock,
        metrics: Metrics,
        retry_for: Callable[[str], RetryPolicy],
        on_answer: Callable[[], None],
        on_dead: Callable[[], None] | None = None,
        on_retry: Callable[[list[Claim]], None] | None = None,
    ) -> None:
        """`on_retry` is given the alarms a batch made due again for a retry, once it has
        committed: the engine holds them (nothing else reads them again)."""
        self.claims = claims
        self.on_retry = on_retry
        self.clock = clock
        self.metrics = metrics
        self.retry_for = retry_for
        self.on_answer = on_answer  # wakes the loop that runs run_once
        self.on_dead = on_dead
        self._answers: list[Answer] = []
        self._lock = threading.Lock()

    def add(self, answer: Answer) -> None:
        with self._lock:
            self._answers.append(answer)
        self.on_answer()

    @property
    def waiting(self) -> int:
        """Answers not recorded yet."""
        with self._lock:
            return len(self._answers)

    def run_once(self) -> float | None:
        """Record up to BATCH answers; 0 when more are waiting, None when none are."""
        with self._lock:
            batch, self._answers = self._answers[:BATCH], self._answers[BATCH:]
        if not batch:
            return None
        # The registry is read before the transaction, as a ring batch does.
        retries = {a.call.row.application: self.retry_for(a.call.row.application) for a in batch}
        tallies: dict[str, RingTally] = defaultdict(RingTally)  # the per-minute statistics
        try:
            with self.claims.delivery_transaction() as tx:
                died = self._record(tx, batch, retries, tallies)
                retried = self._retried(tx.retried, batch)
        except Unavailable as error:
            log.warning(
                "could not record %d webhook answers: %s; trying again",
                len(batch),
                error,
                extra={"action": "webhook_record_failed"},
            )
            with self._lock:
                self._answers[:0] = batch
            return DB_RETRY_S
        if tallies:  # counted once committed: a refused batch is recorded again
            self.metrics.minutes.rang(self.clock.now_ms(), tallies)
        if retried and self.on_retry is not None:
            self.on_retry(retried)
        if died and self.on_dead is not None:
            self.on_dead()
        return 0.0 if self.waiting else None

    @staticmethod
    def _retried(retried: list[tuple[int, int]], batch: list[Answer]) -> list[Claim]:
        """The claims of the retries a batch scheduled, each (id, due again at), as the
        transaction left them: pending at their next try, their version moved once more."""
        calls = {answer.call.row.id: answer.call for answer in batch}
        return [
            Claim(at_ms, alarm_id, calls[alarm_id].version + 1, calls[alarm_id].row.application,
                  calls[alarm_id].slot)
            for alarm_id, at_ms in retried
        ]  # fmt: skip

    def _record(
        self,
        tx: RingTransaction,
        batch: list[Answer],
        retries: dict[str, RetryPolicy],
        tallies: dict[str, RingTally],
    ) -> int:
        """Record `batch` in `tx`, counting the per-minute statistics in `tallies`; returns
        how many alarms died."""
        claims = [
            Claim(a.sent_at, a.call.row.id, a.call.version, a.call.row.application) for a in batch
        ]
        live = {row.id for row in tx.lock_live(claims)}
        now_ms = self.clock.now_ms()
        rung: list[tuple[int, int]] = []
        expired: list[int] = []
        retried: dict[str, list[tuple[int, int]]] = defaultdict(list)  # by error
        dead: dict[str, list[int]] = defaultdict(list)  # by error
        counted: Counter[tuple[str, str]] = Counter()  # (application, what happened)
        calls: list[tuple[str, str, float | None]] = []  # (application, outcome, duration)
        lateness: list[tuple[str, str, float]] = []  # (application, channel, seconds)
        slot_waits: list[tuple[str, float]] = []  # (application, seconds)
        for answer in batch:
            row, outcome = answer.call.row, answer.outcome
            if row.id not in live:
                continue
            tally = tallies[row.application]
            if outcome is None or not outcome.ok:
                tally.failed += 1
            if outcome is None:
                expired.append(row.id)
                counted[row.application, "expired"] += 1
                continue
            label = call_outcome(outcome)
            counted[row.application, label] += 1
            calls.append((row.application, label, answer.took_s))
            if outcome.ok:
                rung.append((row.id, answer.sent_at))
                # The engine's lateness: to the start of the call that delivered it, less
                # the wait for a free call of its application. The receiver's own time is
                # clock_webhook_call_seconds, that wait clock_webhook_slot_wait_seconds.
                due_ms = answer.call.late_from_ms or row.target_ring_at
                late_ms = max(answer.sent_at - due_ms - answer.slot_wait_ms, 0)
                if answer.slot_wait_ms:
                    slot_waits.append((row.application, answer.slot_wait_ms / 1000))
                tally.rung += 1
                tally.lateness_ms.append(late_ms)
                lateness.append((row.application, WEBHOOK, late_ms / 1000))
                continue
            error = outcome.error or "failed"
            retry = retries[row.application]
            if retry.gives_up(row.retry_times + 1):
                dead[error].append(row.id)
                counted[row.application, "dead"] += 1
            else:
                delay_ms = max(retry.delay_ms(row.retry_times + 1), outcome.retry_after_ms or 0)
                retried[error].append((row.id, now_ms + delay_ms))
        tx.mark_rung(rung, now_ms)
        tx.mark_expired(expired, now_ms)
        for error, ids_at in retried.items():
            tx.schedule_retries(ids_at, now_ms, error)
        for error, ids in dead.items():
            tx.mark_dead(ids, now_ms, error)
        self.metrics.observe_webhook_calls(calls)
        self.metrics.observe_lateness(lateness)
        self.metrics.observe_slot_waits(slot_waits)
        self._count(counted, dead)
        return sum(len(ids) for ids in dead.values())

    def _count(self, counted: Counter[tuple[str, str]], dead: dict[str, list[int]]) -> None:
        metrics = self.metrics
        for (application, what), count in counted.items():
            if what == "expired":
                metrics.expired.labels(application).inc(count)
            elif what == "dead":
                metrics.dead.labels(application).inc(count)
            elif what == "2xx":
                metrics.rung.labels(application).inc(count)
            # Failed calls are counted by outcome in clock_webhook_calls only:
            # clock_publish_failures is the broker's.
        for error, ids in dead.items():
            log.error(
                "%d alarms dead after their last webhook attempt (%s): %s",
                len(ids),
                error,
                ids[:20],
                extra={"action": "alarm_dead", "dead": len(ids)},
            )
