"""Each channel's hand-off of a ring batch's rows, one interface for all three: every row at
its moment, never before.

- RabbitMQ: every moment's rows go to the publisher at once (`Publisher.start_timed`), which
  sends each group when its moment comes; the batch waits for the confirms.
- Webhook (`DeliveringHandOff` with calls): the rows are marked delivering in the batch's
  transaction and each call is started in its application's pool, which waits for the
  call's moment on the clock.
- Pull (`DeliveringHandOff`): the rows are marked delivering with their moment as
  `next_try_time`: pullers lease only rows whose time has come, so each becomes visible at
  its moment, however early the transaction commits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from clock_server.broker.publisher import Publisher
from clock_server.engine.channels import Channels, Route
from clock_server.engine.delivery_gate import DeliveryGate
from clock_server.engine.dispatch import EXPRESS, LaneBatch
from clock_server.engine.moments import Sent, by_moment, hand_over, past_cutoff
from clock_server.model import AMQP, PULL, WEBHOOK, Claim, RingRow
from clock_server.store.ports import RingTransaction
from clock_server.timesource import Clock


@dataclass(frozen=True, slots=True)
class Batch:
    """What a hand-off needs to know of the ring batch it is part of."""

    plan: LaneBatch
    routes: Mapping[str, Route]
    claims: list[Claim]  # as taken off the heap, with their versions as claimed
    due_at: dict[int, int]  # each row's due time as the heap had it


@dataclass(slots=True)
class Handed:
    """What one hand-off did with its rows: publishes whose confirms are still to come
    (`waiting`), rows given to their channel at a moment each (`delivered`), rows past their
    cutoff (`expired`), and rows the channel could not take for the service's own trouble,
    to hold (`held`)."""

    waiting: list[Sent] = field(default_factory=list)
    delivered: list[tuple[RingRow, int]] = field(default_factory=list)
    expired: list[RingRow] = field(default_factory=list)
    held: list[RingRow] = field(default_factory=list)


class HandOff(Protocol):
    def hand(self, tx: RingTransaction, rows: list[RingRow], batch: Batch) -> Handed:
        """Deliver each of `rows` at its moment (`moments.ready_at`), never before."""
        ...


class AmqpHandOff:
    """Rows to RabbitMQ: an express batch, and the few rows of applications beside a backlog
    (`LaneBatch.express_connection`), on the express connection; while the broker cannot
    be reached, rows are held (or expired past their cutoff), no attempt spent."""

    def __init__(self, publisher: Publisher, express_publisher: Publisher, clock: Clock) -> None:
        self.publisher = publisher
        self.express_publisher = express_publisher
        self.clock = clock

    def is_healthy(self) -> bool:
        return self.publisher.is_healthy()

    def hand(self, tx: RingTransaction, rows: list[RingRow], batch: Batch) -> Handed:
        publisher = self.express_publisher if batch.plan.lane == EXPRESS else self.publisher
        if not publisher.is_healthy():
            now_ms = self.clock.now_ms()
            expired = [row for row in rows if past_cutoff(row, now_ms)]
            return Handed(expired=expired, held=[r for r in rows if not past_cutoff(r, now_ms)])
        beside = batch.plan.express_connection if publisher is self.publisher else frozenset()

        def connections(part: list[RingRow]) -> list[tuple[list[RingRow], Publisher]]:
            if not beside:
                return [(part, publisher)]
            few = [row for row in part if row.application in beside]
            many = [row for row in part if row.application not in beside]
            split = [(few, self.express_publisher), (many, publisher)]
            return [(rows_of, on) for rows_of, on in split if rows_of]

        # A row whose cutoff has passed by its moment is not sent (`TimedBatch.too_late`).
        return Handed(waiting=hand_over(rows, batch.due_at, self.clock, connections))


class DeliveringHandOff:
    """Rows marked delivering in the batch's transaction, each for its moment.

    A pull row is nobody's and ready from its moment: pullers lease it then. A webhook row
    (with `calls`) keeps the engine's claim until its moment, the call's timeout and a margin
    (a takeover sends the call again), and its call starts in its application's pool at its
    moment; the answers are recorded by the `WebhookRecorder`, fenced by version."""

    def __init__(
        self, channels: Channels, clock: Clock, calls: bool, gate: DeliveryGate | None = None
    ) -> None:
        self.channels = channels
        self.clock = clock
        self.calls = calls
        self.gate = gate  # says when a call's lateness counts from

    def hand(self, tx: RingTransaction, rows: list[RingRow], batch: Batch) -> Handed:
        handed = _due_now_or_later(rows, batch, self.clock.now_ms())
        if handed.delivered:
            self.channels.hand_off(tx, handed.delivered, self.clock.now_ms(), batch.routes)
            if self.calls:
                # Only a batch with webhook calls needs the versions that fence their answers.
                by_id = {claim.id: claim for claim in batch.claims}
                late_from = {row.id: self._late_from(row, batch) for row, _ in handed.delivered}
                self.channels.call(handed.delivered, by_id, batch.routes, late_from)
        return handed

    def _late_from(self, row: RingRow, batch: Batch) -> int:
        if self.gate is None:
            return row.target_ring_at
        return self.gate.lateness_from(row.id, row.target_ring_at, batch.due_at[row.id])


def _due_now_or_later(rows: list[RingRow], batch: Batch, now_ms: int) -> Handed:
    """Each row with its moment, those past their cutoff already apart (one whose cutoff
    passes before its moment is expired by its channel then: the call, or the lease)."""
    handed = Handed()
    for at_ms, group in by_moment(rows, batch.due_at, now_ms):
        for row in group:
            if past_cutoff(row, now_ms):
                handed.expired.append(row)
            else:
                handed.delivered.append((row, at_ms))
    return handed


class HandOffs:
    """The hand-off of each channel."""

    def __init__(
        self, amqp: AmqpHandOff, webhook: HandOff | None = None, pull: HandOff | None = None
    ) -> None:
        self.amqp = amqp
        self._by_channel: dict[str, HandOff] = {AMQP: amqp}
        if webhook is not None:
            self._by_channel[WEBHOOK] = webhook
        if pull is not None:
            self._by_channel[PULL] = pull

    def of(self, channel: str) -> HandOff:
        return self._by_channel[channel]
