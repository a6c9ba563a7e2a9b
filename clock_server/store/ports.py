"""What the engine needs of the store, as interfaces: the engine imports this module only.

`clock_server.store.claims` and `clock_server.store.alarms` implement them on SQL; tests may
give the engine anything else with the same methods.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from typing import NamedTuple, Protocol

from clock_server.minute_stats import Key, MinuteCounts
from clock_server.model import (
    NOT_CONFIRMED,
    ApplicationPolicy,
    Claim,
    DeadLetter,
    EngineRecord,
    RingRow,
)
from clock_server.slot_space import ALL_SLOTS, SlotRange


class RingTransaction(Protocol):
    """One ring batch's transaction: its row locks are held until it ends.

    Each outcome is also written to the alarms' history within the transaction: an expiry,
    a failed attempt with its `error` and attempt number, a death (a ring is read from the
    alarm itself).
    """

    retried: list[tuple[int, int]]  # (id, due again at) of every schedule_retries so far

    def lock_live(self, claims: Sequence[Claim]) -> list[RingRow]:
        """Lock the claimed rows and return those still pending with the claimed version."""
        ...

    def still_pending(self, claims: Sequence[Claim]) -> list[Claim]:
        """Of claims `lock_live` did not find live, those still pending and held by no
        engine, as they stand now: the same version means another transaction held the row."""
        ...

    def mark_rung(self, rung_at: Sequence[tuple[int, int]], now_ms: int) -> None:
        """Each (id, rung_at_ms): published then and confirmed."""
        ...

    def hand_off(self, next_try: Sequence[tuple[int, int]], now_ms: int, keep_claim: bool) -> None:
        """Each (id, next_try_time): handed to its webhook or pull channel, `delivering` until
        answered; with `keep_claim` the engine's claim stays on the row."""
        ...

    def mark_expired(self, ids: Sequence[int], now_ms: int) -> None:
        """Past their cutoff: never published."""
        ...

    def mark_dead(self, ids: Sequence[int], now_ms: int, error: str = NOT_CONFIRMED) -> None:
        """Their last retry failed, with `error`."""
        ...

    def schedule_retries(
        self, retries: Sequence[tuple[int, int]], now_ms: int, error: str = NOT_CONFIRMED
    ) -> None:
        """Each (id, next_try_time): count the try that failed with `error` and make the
        alarm due again then."""
        ...


# Where a read of due alarms stopped: the last (next_try_time, id) it returned.
Position = tuple[int, int]


class ClaimStore(Protocol):
    """Due alarms read into an engine's heap, valid while the row's version holds."""

    @property
    def reads_in_parallel(self) -> bool:
        """Whether reads on several connections at once run side by side."""
        ...

    def load_due(
        self,
        horizon_ms: int,
        limit: int,
        *,
        after: Position | None = None,
        application: str | None = None,
        slots: SlotRange = ALL_SLOTS,
    ) -> list[Claim]:
        """Up to `limit` pending alarms of `slots` due by `horizon_ms`, in (next_try_time, id)
        order after `after` (of `application` alone, when given), read without a write. An
        alarm an engine of a release before slots claimed is read at its lease's end."""
        ...

    def load_new(
        self, after_id: int, gaps: Sequence[int], limit: int
    ) -> tuple[list[int], list[Claim]]:
        """The alarms inserted after `after_id` (up to `limit`, by id) and those of `gaps`:
        every id found, and the pending ones, as claims."""
        ...

    def newest_id(self) -> int:
        """The highest alarm id so far."""
        ...

    def due_applications(self, horizon_ms: int, slots: SlotRange = ALL_SLOTS) -> dict[str, int]:
        """Each application with pending alarms of `slots` due by `horizon_ms`, and its
        earliest."""
        ...

    def defer(self, claims: Sequence[Claim], now_ms: int) -> int:
        """Make each alarm due again at its claim's (later) due time; returns how many were
        still live."""
        ...

    def ring_transaction(
        self, owner: int = 0
    ) -> contextlib.AbstractContextManager[RingTransaction]:
        """A transaction for one ring batch of the engine `owner` (what it rings and the
        webhook calls it makes name it); committed when the block ends without error."""
        ...

    def delivery_transaction(self) -> contextlib.AbstractContextManager[RingTransaction]:
        """A transaction recording the outcomes of webhook calls: `lock_live` finds alarms
        still `delivering` with the version their hand-off gave them."""
        ...

    def give_back_deliveries(self, claims: Sequence[Claim], now_ms: int) -> int:
        """Alarms handed to a webhook and never sent: pending again, due now."""
        ...

    def connect_ahead(self, connections: int) -> None:
        """Open up to `connections` pooled connections now (threads starting together)."""
        ...

    @property
    def locks_rows(self) -> bool:
        """Whether a ring transaction holds only the rows it locked (False: the whole
        database, as SQLite's does)."""
        ...


class BacklogCounter(Protocol):
    """What maintenance measures."""

    def count_overdue(self, before_ms: int) -> int:
        """Pending alarms whose next try was due before `before_ms`."""
        ...


class PullRequeue(Protocol):
    """Pull messages of applications that moved to another channel (store.pull_requeue)."""

    def requeue_left_pull(self, now_ms: int) -> dict[str, int]:
        """Make them pending again; how many, by application."""
        ...


class PullSweeper(Protocol):
    """Pull messages found without a puller: past their cutoff, or with a lease ended
    unacked (store.pull_sweep)."""

    def sweep(self, now_ms: int) -> PullSwept:
        """Expire them, kill those with their leases spent, record the other failed leases,
        as a pull would; how many of each, by application."""
        ...


class PullSwept(Protocol):
    """What a sweep found, by application."""

    @property
    def expired(self) -> Mapping[str, int]: ...

    @property
    def dead(self) -> Mapping[str, int]: ...

    @property
    def retried(self) -> Mapping[str, int]: ...


class Takeover(NamedTuple):
    """What giving back a dead engine's claims did."""

    released: int  # due again now or at their target, for any engine to claim
    held: int  # locked by a transaction still open (a ring batch in flight); tried again


class EngineRegistry(Protocol):
    """Live engines and their heartbeats; the claims of a silent one are given back."""

    def register(
        self, instance_id: str, lease_ms: int, now_ms: int, slots: SlotRange = ALL_SLOTS
    ) -> int:
        """Add a live engine; returns the id its claims carry."""
        ...

    def heartbeat(self, engine_id: int, now_ms: int, slots: SlotRange = ALL_SLOTS) -> bool:
        """Say the engine is alive and owns `slots`; False once another engine has declared
        it dead."""
        ...

    def declare_dead(self, silent_since_ms: int, now_ms: int) -> list[EngineRecord]:
        """Mark dead every engine silent since before `silent_since_ms`; returns every engine
        not yet removed, live or marked dead (`dead_at` set)."""
        ...

    def live_engines(self) -> list[EngineRecord]:
        """The engines not declared dead, oldest first."""
        ...

    def take_over(self, dead: EngineRecord, now_ms: int) -> Takeover:
        """Give back the claims `dead` holds, except rows another transaction has locked."""
        ...

    def moves_of(self, engine_id: int) -> tuple[int, int | None]:
        """How many times alarms of the engine's slots were made due earlier by others (a
        change, a re-drive, a takeover), and the earliest due time they were given since it
        last cleared them (None: none)."""
        ...

    def clear_moves(self, engine_id: int, moves: int) -> bool:
        """Forget the moves read as `moves`; False when another came since (read again)."""
        ...

    def remove(self, engine_id: int) -> None:
        """Forget an engine."""
        ...


class ApplicationPolicies(Protocol):
    """Each application's limits and defaults, as of a few seconds ago."""

    def policy(self, name: str) -> ApplicationPolicy:
        """The application's policy; one with no limits when it is not registered."""
        ...

    def listed(self, name: str) -> bool:
        """Whether the application was registered as of the last reading of the registry;
        reads nothing, so a ring batch may ask inside its transaction."""
        ...


class Grant(NamedTuple):
    """What a rate limiter allowed."""

    granted: int  # tokens taken, at most the number asked for
    retry_after_ms: int  # when fewer were granted: until the next token is due; else 0


class RateLimiter(Protocol):
    """Token buckets per application and kind that hold for the whole service."""

    def acquire(
        self, application: str, kind: str, rate_per_s: float, burst: int, wanted: int, now_ms: int
    ) -> Grant:
        """Take up to `wanted` tokens from the bucket of `burst` refilled at `rate_per_s`."""
        ...


class PurgeBatch(NamedTuple):
    """What one batch of the retention purge read and deleted."""

    read: int  # finished alarms read, at most the batch
    deleted: int  # of those, deleted: past their application's cutoff
    last: tuple[int, int] | None  # (finish time, id) of the last one read; None if none


class FinishedAlarmPurger(Protocol):
    """Deleting finished alarms (rung, cancelled, expired, dead) once past their retention."""

    def retention_overrides(self) -> dict[str, float]:
        """The applications with a retention of their own: name -> days."""
        ...

    def purge_batch(
        self,
        status: str,
        after: tuple[int, int],
        before_ms: int,
        limit: int,
        cutoffs: Mapping[str, int],
        default_cutoff_ms: int,
    ) -> PurgeBatch:
        """Read up to `limit` alarms of `status` that finished before `before_ms`, in
        (finish time, id) order from just after `after`, locking nothing; then delete, in a
        short transaction of its own, those that finished before their application's cutoff
        (`cutoffs`, else `default_cutoff_ms`) and still do, with everything kept with them."""
        ...


class JobLease(Protocol):
    """A periodic job that several servers schedule, run by one at a time."""

    def take(self, name: str, owner: str, now_ms: int, until_ms: int) -> bool:
        """Hold job `name` for `owner` until `until_ms`, if nobody else holds it at `now_ms`
        (renewing the lease `owner` holds); True when held."""
        ...


class DeadLetterOutbox(Protocol):
    """Dead letters written with the deaths they tell of, waiting to be published."""

    def next_letters(self, limit: int) -> list[DeadLetter]:
        """Up to `limit` letters, oldest first."""
        ...

    def remove(self, letter_ids: Sequence[int]) -> None:
        """Forget letters the broker has confirmed."""
        ...


class MinuteStatsSink(Protocol):
    """Where a process adds the per-minute statistics it counted (`clock_minute_stats`)."""

    def add(self, counts: Mapping[Key, MinuteCounts]) -> None:
        """Add `counts` to the shared rows, all or nothing; raises Unavailable when the
        database is out."""
        ...

    def purge_before(self, minute_ms: int, batch: int) -> int:
        """Delete a short transaction's worth (about `batch` rows) of the minutes before
        `minute_ms`; how many rows went (0: none are left)."""
        ...


class Planned(NamedTuple):
    """What one planner pass made: how many occurrences, the earliest of them, how many
    schedules it read (as many as it may read: there may be more), and the occurrences by
    application."""

    made: int
    earliest: int | None
    schedules: int
    by_application: Mapping[str, int]


class OccurrencePlanner(Protocol):
    """Makes the schedules' occurrences alarms, a while before they are due."""

    def plan(self, now_ms: int, ahead_ms: int, limit: int = ...) -> Planned:
        """Make the occurrences due within `ahead_ms` of `now_ms`, of at most `limit`
        schedules."""
        ...
