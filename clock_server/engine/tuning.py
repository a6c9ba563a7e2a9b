"""Every measured constant of the ring path, in one frozen value with its reasons.

A change to any of these lands only with a threshold declared before the run and met in two
sittings of `bench.ab` (CONTRIBUTING.md). The findings cited are in docs/perf/.
"""

from __future__ import annotations

from dataclasses import dataclass

from clock_server.settings import Settings


@dataclass(frozen=True, slots=True)
class RingTuning:
    """How the ring path takes, gathers and delivers due claims.

    The first fields come from the settings (CLOCK_RING_*); the rest were measured on the
    bench and are changed here, nowhere else. Tests read them from here and assert
    behaviour, never the numbers.
    """

    # From the settings.
    batch: int = 1_000  # claims one ring transaction takes at most
    lanes: int = 4  # ring transactions in flight at once, besides the express lanes
    lead_floor_ms: int = 5  # rows are locked at least this long before they are due
    lead_ceiling_ms: int = 50  # and at most this long, however slow locking gets
    gather_ms: int = 50  # one transaction takes the claims due over this span

    # Express batches in flight at once: each waits for its last moment, its confirms and its
    # commit; with three, beside a backlog, what fell due meanwhile waited for one (finding 64).
    express_lanes: int = 6
    # Lanes ringing a backlog's batches at once beside other applications' claims: each more
    # busy lane is one more thread the express lanes wait behind for the GIL (finding 47).
    beside_backlog_lanes: int = 2
    # An application with at most this many due rings in an express lane beside a backlog.
    few_due: int = 50
    # An express batch gathers this many spans: each of its transactions is a lock, an UPDATE
    # and a commit that a backlog's lanes wait behind; four took 6 % off its CPU (finding 66).
    express_gather_spans: int = 4
    # The lead is twice the slowest of this many recent lock waits, plus a margin: covering
    # the slowest alone left p99 at 8-11 ms under API load, twice it at 5-10 ms.
    lead_window: int = 100
    lead_margin_ms: int = 2
    # A locked row due later than the lead, the span and this slack goes back to the heap.
    lead_slack_ms: int = 50
    # Alarms the broker could not take (no connection, blocked, unconfirmed) wait this long in
    # the heap, their attempts untouched, while the publisher reconnects.
    broker_hold_ms: int = 1_000
    # A ring transaction that failed on the database is tried again this much later.
    db_retry_ms: int = 1_000
    # A due row another transaction held locked (a cancel deciding, another engine's batch
    # while the slots move, a stalled server's) is looked at again this much later: a ring
    # batch passes over such rows rather than wait behind them.
    locked_retry_ms: int = 100
    # An application whose webhook calls are all busy is looked at again this much later.
    busy_webhook_wait_ms: int = 10
    # Claims a delivery limit holds back further off than this go back to the database.
    hold_in_heap_ms: int = 10_000
    # A full heap whose head is this overdue holds a backlog: the preloader shares the heap.
    backlog_ms: int = 100

    @classmethod
    def from_settings(cls, settings: Settings) -> RingTuning:
        return cls(
            batch=settings.ring_batch,
            lanes=settings.ring_lanes,
            lead_floor_ms=settings.ring_lead_ms,
            lead_ceiling_ms=settings.ring_lead_max_ms,
            # Gathering is locking ahead too: with no lead, no gathering either.
            gather_ms=settings.ring_gather_ms if settings.ring_lead_ms > 0 else 0,
            hold_in_heap_ms=settings.preload_window_ms,
        )

    @property
    def express_gather_ms(self) -> int:
        return self.gather_ms * self.express_gather_spans

    @property
    def has_express_lanes(self) -> bool:
        """With one lane the loop rings inline, and there are no express lanes."""
        return self.lanes > 1

    @property
    def connections(self) -> int:
        """Database connections the ring path may hold at once: one per lane of each kind."""
        return self.lanes + (self.express_lanes if self.has_express_lanes else 0)
