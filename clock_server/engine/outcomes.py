"""What a ring batch's results do to its alarms: rung, retried, expired, dead, held; their
lateness; the counts and the log lines. Apart from locking (`BatchRinger`) and delivery
(`hand_offs`)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from typing import NamedTuple

from clock_server.engine.backoff import RetryPolicy
from clock_server.engine.delivery_gate import DeliveryGate
from clock_server.metrics import Metrics
from clock_server.minute_stats import RingTally
from clock_server.model import AMQP, NOT_CONFIRMED, PULL, RingRow
from clock_server.store.ports import RingTransaction
from clock_server.timesource import Clock

log = logging.getLogger(__name__)


class Confirmed(NamedTuple):
    """One publish group's rows, when they were published, and whether the broker took
    each (False: refused, a nack or a return)."""

    rows: list[RingRow]
    published_at: int
    flags: list[bool]


class Outcomes:
    """Records each alarm's outcome in the ring batch's transaction and counts it.

    Only a refusal by the receiving side spends an attempt: a refused alarm is retried after
    its application's backoff, or dead after its last retry. An alarm past its cutoff at its
    moment is expired. An alarm the broker could not take for the service's own trouble is
    held (`held`), its attempts untouched. Lateness is the engine's own: from the target, or,
    for an alarm its application's delivery rate held back, from when the rate let it go.
    """

    def __init__(
        self, clock: Clock, metrics: Metrics, retry: RetryPolicy, gate: DeliveryGate | None
    ) -> None:
        self.clock = clock
        self.metrics = metrics
        self.retry = retry
        self.gate = gate
        self._holding = False  # alarms were held for the broker since it last took any

    def retry_for(self, application: str) -> RetryPolicy:
        return self.gate.retry_for(application) if self.gate is not None else self.retry

    def record(
        self,
        tx: RingTransaction,
        confirmed: Sequence[Confirmed],
        expired: Sequence[RingRow],
        handed: Sequence[tuple[RingRow, int]],
        due_at: dict[int, int],
        retries_of: dict[str, RetryPolicy],
        webhooks: Collection[str] = (),
        channel_of: Mapping[str, str] | None = None,
    ) -> int:
        """Mark each confirmed row rung, each refused one retried or dead and each of
        `expired` expired; `handed` were given to a webhook or to pullers for a moment each
        (their lateness is the engine's until then, or until now if later), by their
        application's channel in `channel_of` (pull when not named there). Returns how many
        alarms died.

        The lateness and the per-minute statistics count a pull row as rung when handed; a
        row of an application of `webhooks` is counted when its 2xx answer is recorded
        (`WebhookRecorder`), its lateness to the start of that call.
        """
        now_ms = self.clock.now_ms()
        tx.mark_expired(sorted(row.id for row in expired), now_ms)
        rung: list[tuple[int, int]] = []
        rung_of: list[str] = []
        dead: list[int] = []
        dead_of: list[str] = []
        retries: list[tuple[int, int]] = []
        tallies: dict[str, RingTally] = {}
        lateness_s: list[tuple[str, str, float]] = []
        channel_of = channel_of or {}
        for row, at_ms in handed:
            # A handed row is the channel's from its moment, or from now if that has passed.
            late_ms = self._lateness_ms(row, max(at_ms, now_ms), due_at)  # and its throttle
            if row.application in webhooks:
                continue  # late until the start of the call that delivers: counted then
            lateness_s.append(
                (row.application, channel_of.get(row.application, PULL), late_ms / 1000)
            )
            tally = _tally(tallies, row.application)
            tally.rung += 1
            tally.lateness_ms.append(late_ms)
        for rows, published_at, flags in confirmed:
            for row, ok in zip(rows, flags, strict=True):
                # once per application, not per row: this loop is the ring path's per alarm
                tally = tallies.get(row.application) or _tally(tallies, row.application)
                if ok:
                    rung.append((row.id, published_at))
                    rung_of.append(row.application)
                    late_ms = self._lateness_ms(row, published_at, due_at)
                    lateness_s.append((row.application, AMQP, late_ms / 1000))
                    tally.rung += 1
                    tally.lateness_ms.append(late_ms)
                    continue
                tally.failed += 1
                retry = retries_of.get(row.application) or self.retry_for(row.application)
                if retry.gives_up(row.retry_times + 1):
                    dead.append(row.id)
                    dead_of.append(row.application)
                else:
                    retries.append((row.id, now_ms + retry.delay_ms(row.retry_times + 1)))
        for row in expired:
            _tally(tallies, row.application).failed += 1
        self.metrics.observe_lateness(lateness_s)
        if tallies:
            self.metrics.minutes.rang(now_ms, tallies)
        tx.mark_rung(rung, now_ms)
        if dead or retries:  # refused by the broker: all the publisher tells of a refusal
            tx.mark_dead(dead, now_ms, NOT_CONFIRMED)
            tx.schedule_retries(retries, now_ms, NOT_CONFIRMED)
        self._count(rung_of, len(retries), dead, dead_of, [row.application for row in expired])
        return len(dead)

    def held(self, rows: Sequence[RingRow], hold_ms: int) -> None:
        """`rows` go back to the heap for `hold_ms`: the broker could not take them."""
        self.metrics.count(self.metrics.held, [row.application for row in rows])
        if not self._holding:
            self._holding = True
            log.warning(
                "the broker cannot take alarms: %d held, tried again every %d ms",
                len(rows),
                hold_ms,
                extra={"action": "ring_held_for_broker"},
            )

    def broker_took(self) -> None:
        """A batch went through with nothing held: say once that the broker is back."""
        if self._holding:
            self._holding = False
            log.info("the broker takes alarms again", extra={"action": "ring_broker_back"})

    def _lateness_ms(self, row: RingRow, published_at: int, due_at: dict[int, int]) -> int:
        if self.gate is not None:
            held_ms = self.gate.policy_delay_ms(row.id, row.target_ring_at, due_at[row.id])
            if held_ms is not None:
                self.metrics.throttle_delay.observe(held_ms / 1000)
                return max(published_at - max(due_at[row.id], row.target_ring_at), 0)
        return max(published_at - row.target_ring_at, 0)

    def _count(
        self,
        rung_of: list[str],
        retried: int,
        dead: list[int],
        dead_of: list[str],
        expired_of: list[str],
    ) -> None:
        metrics = self.metrics
        metrics.count(metrics.rung, Counter(rung_of))
        metrics.count(metrics.expired, expired_of)
        if not retried and not dead:
            return
        metrics.publish_failures.inc(retried + len(dead))
        metrics.count(metrics.dead, Counter(dead_of))
        log.warning(
            "publish failed for %d alarms: %d will retry, %d are dead",
            retried + len(dead),
            retried,
            len(dead),
            extra={"action": "publish_failed"},
        )
        if dead:
            log.error(
                "%d alarms dead after their last retry (by application: %s): %s",
                len(dead),
                dict(Counter(dead_of)),
                dead[:20],
                extra={"action": "alarm_dead", "dead": len(dead)},
            )


def _tally(tallies: dict[str, RingTally], application: str) -> RingTally:
    tally = tallies.get(application)
    if tally is None:
        tally = tallies[application] = RingTally()
    return tally
