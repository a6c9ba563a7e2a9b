"""The ring step: publish every due claim in one batch and record each outcome."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from clock_server.backoff import RetryPolicy
from clock_server.claims import ClaimStore, RingTransaction
from clock_server.errors import Unavailable
from clock_server.heap import ClaimHeap
from clock_server.metrics import Metrics
from clock_server.model import Claim, RingRow
from clock_server.publishing import OutgoingMessage, Publisher
from clock_server.timesource import Clock

log = logging.getLogger(__name__)

DB_RETRY_MS = 1_000


@dataclass
class RingOutcome:
    """What one batch did, for logs, metrics and tests."""

    rung: list[int] = field(default_factory=list)
    retried: list[int] = field(default_factory=list)
    dead: list[int] = field(default_factory=list)
    expired: list[int] = field(default_factory=list)
    skipped: int = 0


class Ringer:
    """Takes due claims off the heap, re-checks them under row locks, publishes, records.

    With ``lanes`` > 1, up to that many batches are in flight at once, each in its own
    transaction on its own thread: an alarm falling due while a batch waits for the broker's
    confirms and the database's commit is rung at once in another lane instead of waiting.
    When every lane is busy, due alarms gather in the heap and go out as one larger batch.
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
        on_lane_free: Callable[[], None] | None = None,
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
        self._lanes = threading.BoundedSemaphore(lanes) if lanes > 1 else None
        self._executor = ThreadPoolExecutor(lanes, "clock-ring-lane") if lanes > 1 else None

    def run_once(self) -> float | None:
        """Ring what is due; returns seconds until the next due claim, 0 to go on, None if idle."""
        if self._lanes is not None and not self._lanes.acquire(timeout=0.05):
            return 0.0
        now_ms = self.clock.now_ms()
        due = self.heap.pop_due(now_ms, self.batch)
        if due:
            if self._executor is not None:
                self._executor.submit(self._ring_in_lane, due)
            else:
                self.ring(due)
            return 0.0
        if self._lanes is not None:
            self._lanes.release()
        next_due = self.heap.next_due_ms()
        if next_due is None:
            return None
        return max(next_due - now_ms, 1) / 1000

    def close(self) -> None:
        """Wait for the batches in flight to finish."""
        if self._executor is not None:
            self._executor.shutdown(wait=True)

    def _ring_in_lane(self, due: list[Claim]) -> None:
        try:
            self.ring(due)
        except Exception:
            log.exception("ring batch of %d failed; its claims return when their lease ends",
                          len(due), extra={"action": "ring_error"})  # fmt: skip
        finally:
            assert self._lanes is not None
            self._lanes.release()
            if self.on_lane_free is not None:
                self.on_lane_free()

    def ring(self, due: list[Claim]) -> RingOutcome:
        try:
            with self.claims.ring_transaction() as tx:
                outcome = self._ring_locked(tx, due)
        except Unavailable as error:
            # Nothing was recorded; keep the claims and try again shortly. A batch that was
            # already published is then published again (consumers deduplicate by message_id).
            log.warning(
                "ring batch of %d failed: %s", len(due), error, extra={"action": "ring_db_error"}
            )
            retry_at = self.clock.now_ms() + DB_RETRY_MS
            self.heap.push_many(Claim(max(c.due_ms, retry_at), c.id, c.version) for c in due)
            return RingOutcome()
        self.metrics.heap_size.set(len(self.heap))
        return outcome

    def _ring_locked(self, tx: RingTransaction, due: list[Claim]) -> RingOutcome:
        outcome = RingOutcome()
        live = tx.lock_live(due)
        outcome.skipped = len(due) - len(live)
        now_ms = self.clock.now_ms()
        expired = [r for r in live if r.latest_ring_at is not None and r.latest_ring_at < now_ms]
        expired_ids = {r.id for r in expired}
        ready = [r for r in live if r.id not in expired_ids and r.target_ring_at <= now_ms]
        early = [r for r in live if r.id not in expired_ids and r.target_ring_at > now_ms]
        if early:  # cannot happen while versions hold; never publish before the target anyway
            claims = {c.id: c for c in due}
            self.heap.push_many(Claim(r.target_ring_at, r.id, claims[r.id].version) for r in early)
        tx.mark_expired([r.id for r in expired], now_ms)
        outcome.expired = [r.id for r in expired]
        if ready:
            self._publish(tx, ready, outcome)
        self._count(outcome)
        return outcome

    def _publish(self, tx: RingTransaction, ready: list[RingRow], outcome: RingOutcome) -> None:
        published_at = self.clock.now_ms()
        messages = [_message(row) for row in ready]
        confirmed = self.publisher.publish_batch(messages, self.publish_timeout_s)
        now_ms = self.clock.now_ms()
        retries: list[tuple[int, int]] = []
        for row, ok in zip(ready, confirmed, strict=True):
            if ok:
                outcome.rung.append(row.id)
                self.metrics.lateness.observe(max(published_at - row.target_ring_at, 0) / 1000)
            elif self.retry.gives_up(row.retry_times + 1):
                outcome.dead.append(row.id)
            else:
                retries.append((row.id, now_ms + self.retry.delay_ms(row.retry_times + 1)))
        outcome.retried = [alarm_id for alarm_id, _ in retries]
        tx.mark_rung(outcome.rung, published_at, now_ms)
        tx.schedule_retries(retries, now_ms)
        tx.mark_dead(outcome.dead, now_ms)

    def _count(self, outcome: RingOutcome) -> None:
        self.metrics.rung.inc(len(outcome.rung))
        self.metrics.publish_failures.inc(len(outcome.retried) + len(outcome.dead))
        self.metrics.expired.inc(len(outcome.expired))
        self.metrics.dead.inc(len(outcome.dead))
        if outcome.retried or outcome.dead:
            log.warning(
                "publish failed for %d alarms: %d will retry, %d are dead",
                len(outcome.retried) + len(outcome.dead),
                len(outcome.retried),
                len(outcome.dead),
                extra={"action": "publish_failed"},
            )
        if outcome.dead:
            log.error(
                "alarms dead after their last retry: %s",
                outcome.dead[:20],
                extra={"action": "alarm_dead"},
            )


def _message(row: RingRow) -> OutgoingMessage:
    body = {
        "id": row.id,
        "application": row.application,
        "business_id": row.business_id,
        "payload": row.payload,
        "target_ring_at": row.target_ring_at,
        "attempt": row.retry_times + 1,
    }
    return OutgoingMessage(
        message_id=str(row.id),
        application=row.application,
        body=json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8"),
    )
