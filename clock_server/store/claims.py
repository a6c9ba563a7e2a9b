"""The engine's side of the store on SQL: reading due alarms, deferring them, ringing in
batches (the interfaces are in store.ports)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from sqlalchemy import Connection, case, text, update

from clock_server.model import (
    DEAD,
    DELIVERING,
    EXPIRED,
    NOT_CONFIRMED,
    PENDING,
    RUNG,
    Claim,
    RingRow,
)
from clock_server.slot_space import ALL_SLOTS, SlotRange
from clock_server.store.alarms import AlarmStore
from clock_server.store.db import Capabilities, open_ahead
from clock_server.store.dead_letters import DeadLetterRows
from clock_server.store.events import RingEvents
from clock_server.store.moves import mark_all_moved
from clock_server.store.ports import Position
from clock_server.store.row_locks import lock_ring_rows_sql
from clock_server.store.schema import alarm_table
from clock_server.store.sql import chunks, id_list, slot_filter, translate_errors

_ID_CHUNK = 1_000
_TABLE = alarm_table.name


class SqlClaimStore:
    """Due alarms read into an engine's heap, valid while the version holds, and the ring
    transactions that lock and record them.

    With `dead_letters`, a ring batch also writes a dead letter for each alarm it marks dead
    (store.dead_letters), for the relay to publish.
    """

    def __init__(self, store: AlarmStore, dead_letters: bool = False) -> None:
        self.store = store
        self.dead_letters = dead_letters

    @property
    def reads_in_parallel(self) -> bool:
        """Whether reads on several connections at once run side by side: on a server, not on
        SQLite's one file."""
        return self.store.caps.row_locks

    def load_due(
        self,
        horizon_ms: int,
        limit: int,
        *,
        after: Position | None = None,
        application: str | None = None,
        slots: SlotRange = ALL_SLOTS,
    ) -> list[Claim]:
        """Up to `limit` pending alarms of `slots` with next_try_time <= horizon_ms, in
        (next_try_time, id) order from just after `after` (from the start without it); with
        `application`, only that application's. Read without a lock and without a write: the
        slots are this engine's alone, and the ring transaction locks the rows and checks
        each version (store.row_locks).

        A row an engine of a release before slots claimed (`claimed_by`) is read at its
        next_try_time, which is that lease's end: rung then unless that engine rang it or
        gave it back first (its version moved; the ring batch reads it again).
        """
        caps = self.store.caps
        # Without the hint MariaDB reads a wide range by `status` alone, which cannot start
        # at the position.
        index = "ix_clock_application_due" if application else "ix_clock_status_next_try_time"
        hint = f" FORCE INDEX ({index})" if caps.index_hints else ""
        only = " AND application = :application" if application else ""
        since = ""
        if after is not None:
            due, alarm_id = int(after[0]), int(after[1])
            since = f" AND next_try_time >= {due} AND (next_try_time > {due} OR id > {alarm_id})"
        query = text(
            f"SELECT next_try_time, id, version, application, slot FROM {_TABLE}{hint}"
            f" WHERE status = '{PENDING}'{only}{since}{slot_filter(slots)}"
            f" AND next_try_time <= {int(horizon_ms)}"
            f" ORDER BY next_try_time, id LIMIT {int(limit)}"
        )
        params = {"application": application} if application else {}
        with translate_errors(), self.store.db.connect() as conn:
            return [Claim._make(row) for row in conn.execute(query, params)]

    def load_new(
        self, after_id: int, gaps: Sequence[int], limit: int
    ) -> tuple[list[int], list[Claim]]:
        """The alarms inserted after `after_id` (up to `limit`, by id) and those of `gaps`:
        every id found, and, as claims, those found pending."""
        maybe = f" OR id IN ({id_list(gaps)})" if gaps else ""
        query = text(
            f"SELECT id, next_try_time, version, application, slot, status"
            f" FROM {_TABLE} WHERE id > {int(after_id)}{maybe} ORDER BY id LIMIT {int(limit)}"
        )
        with translate_errors(), self.store.db.connect() as conn:
            rows = conn.execute(query).all()
        claims = [
            Claim(due_ms, alarm_id, version, application, slot)
            for alarm_id, due_ms, version, application, slot, status in rows
            if status == PENDING
        ]
        return [row[0] for row in rows], claims

    def newest_id(self) -> int:
        """The highest alarm id so far, 0 for none."""
        with translate_errors(), self.store.db.connect() as conn:
            return int(conn.execute(text(f"SELECT MAX(id) FROM {_TABLE}")).scalar() or 0)

    def due_applications(self, horizon_ms: int, slots: SlotRange = ALL_SLOTS) -> dict[str, int]:
        """Each application with pending alarms of `slots` due by `horizon_ms` (claimed ones
        count at their lease's end), and its earliest such next_try_time: one index dive each
        for all the slots."""
        query = text(
            f"SELECT application, MIN(next_try_time) FROM {_TABLE}"
            f" WHERE status = '{PENDING}'{slot_filter(slots)} GROUP BY application"
            f" HAVING MIN(next_try_time) <= {int(horizon_ms)}"
        )
        with translate_errors(), self.store.db.connect() as conn:
            return {application: int(due_ms) for application, due_ms in conn.execute(query)}

    def defer(self, claims: Sequence[Claim], now_ms: int) -> int:
        """Make each alarm due again at its claim's due time, later than it was (a delivery
        limit holds it back), its version moved. Stale claims are ignored; returns how many
        were still live."""
        return self._make_due_again(claims, now_ms, PENDING)

    @property
    def locks_rows(self) -> bool:
        return self.store.caps.row_locks

    @contextlib.contextmanager
    def ring_transaction(self, owner: int = 0) -> Iterator[SqlRingTransaction]:
        """One transaction for a ring batch of the engine `owner`; the locks it takes are
        held until it ends.
        The events of its outcomes are written last, in one statement, and its dead letters
        in another when any alarm died."""
        with translate_errors(), self.store.db.begin() as conn:
            tx = SqlRingTransaction(conn, self.store.caps, self.dead_letters, owner=owner)
            yield tx
            tx.events.write(conn)
            if tx.dead_letters is not None:
                tx.dead_letters.write(conn)

    @contextlib.contextmanager
    def delivery_transaction(self) -> Iterator[SqlRingTransaction]:
        """A ring transaction over alarms handed to a webhook: `lock_live` finds them in
        `delivering` with the version the hand-off gave them, and their outcomes are recorded
        as a ring batch records its own (a retry makes the alarm pending again)."""
        with translate_errors(), self.store.db.begin() as conn:
            tx = SqlRingTransaction(conn, self.store.caps, self.dead_letters, DELIVERING)
            yield tx
            tx.events.write(conn)
            if tx.dead_letters is not None:
                tx.dead_letters.write(conn)

    def give_back_deliveries(self, claims: Sequence[Claim], now_ms: int) -> int:
        """Alarms handed to a webhook and never sent (a shutdown): pending again, due now, for
        any engine to ring. Those whose version moved are left alone."""
        return self._make_due_again(
            [c._replace(due_ms=now_ms) for c in claims], now_ms, DELIVERING, moved=True
        )

    def _make_due_again(
        self, claims: Sequence[Claim], now_ms: int, status: str, moved: bool = False
    ) -> int:
        """Make the alarms of `claims` that are still in `status` with the claimed version
        pending and nobody's, each due again at its claim's due time; returns how many.
        With `moved`, the engines are told they are due again (`mark_moved`)."""
        released = 0
        by_id = alarm_table.c.id
        with translate_errors(), self.store.db.begin() as conn:
            for chunk in chunks(list(claims), _ID_CHUNK):
                result = conn.execute(
                    update(alarm_table)
                    .where(
                        by_id.in_([c.id for c in chunk]),
                        alarm_table.c.version
                        == case({c.id: c.version for c in chunk}, value=by_id),
                        alarm_table.c.status == status,
                    )
                    .values(
                        status=PENDING,
                        next_try_time=case({c.id: c.due_ms for c in chunk}, value=by_id),
                        claimed_by=0,
                        version=alarm_table.c.version + 1,
                        update_time=now_ms,
                    )
                )
                released += result.rowcount
            if moved and released:
                mark_all_moved(conn, now_ms)
        return released

    def connect_ahead(self, connections: int) -> None:
        open_ahead(self.store.db, connections)


class _LockedRows:
    """The rows a ring batch locked, looked up by id when an outcome needs one."""

    def __init__(self) -> None:
        self._rows: list[RingRow] = []
        self._by_id: dict[int, RingRow] | None = None  # built at the first lookup

    def add(self, rows: list[RingRow]) -> None:
        self._rows += rows
        self._by_id = None

    def row_of(self, alarm_id: int) -> RingRow | None:
        if self._by_id is None:
            self._by_id = {row.id: row for row in self._rows}
        return self._by_id.get(alarm_id)


class SqlRingTransaction:
    """Row-locked view of a ring batch: which claims are still live, and their outcomes.

    Outcomes other than a ring are events of the alarms' history too: they are gathered in
    `events` and written when the transaction ends (a ring is read from the row itself).
    """

    def __init__(
        self,
        conn: Connection,
        caps: Capabilities,
        dead_letters: bool = False,
        status: str = PENDING,
        owner: int = 0,
    ) -> None:
        self.conn = conn
        self.owner = owner  # the engine whose batch it is: it rang, or calls a webhook
        self.caps = caps
        self.status = status  # what lock_live finds live
        # Not a method of this object: the events would hold the transaction, and the cycle
        # would keep the batch's rows alive until the garbage collector's pass, whose length
        # grows with them (finding 47).
        self._locked = _LockedRows()
        self.retried: list[tuple[int, int]] = []  # (id, due again at) of schedule_retries
        self.events = RingEvents(self._locked.row_of)
        self.dead_letters = DeadLetterRows(self._locked.row_of) if dead_letters else None

    def lock_live(self, claims: Sequence[Claim]) -> list[RingRow]:
        """Lock the claimed rows and return those still in `status` with the claimed version.

        A concurrent cancel or PATCH either committed before (the row no longer matches and is
        skipped) or waits on the lock until this transaction has decided the alarm's fate.
        """
        wanted = {claim.id: claim.version for claim in claims}
        live: list[RingRow] = []
        make = RingRow._make
        skip = self.status == PENDING
        for chunk in chunks(sorted(wanted), _ID_CHUNK):
            locking = lock_ring_rows_sql(self.caps, chunk, self.status, skip)
            for row in self.conn.exec_driver_sql(locking):
                if row[10] == wanted[row[0]]:
                    live.append(make(row[:10]))
        self._locked.add(live)
        return live

    def still_pending(self, claims: Sequence[Claim]) -> list[Claim]:
        """Of `claims` that `lock_live` did not find live, those still pending and held by
        no engine, as they stand now (a plain read): with the same version, another
        transaction held the row locked (a cancel deciding, another engine's ring batch, a
        stalled server's); with another, the alarm moved since it was read."""
        found: list[Claim] = []
        for chunk in chunks(sorted(claim.id for claim in claims), _ID_CHUNK):
            found += [
                Claim(due_ms, alarm_id, version, application, slot)
                for alarm_id, due_ms, version, application, slot in self.conn.exec_driver_sql(
                    f"SELECT id, next_try_time, version, application, slot FROM {_TABLE}"
                    f" WHERE id IN ({id_list(chunk)}) AND status = '{PENDING}'"
                    " AND claimed_by = 0"
                )
            ]
        return found

    def mark_rung(self, rung_at: Sequence[tuple[int, int]], now_ms: int) -> None:
        """Each (id, rung_at_ms): published then and confirmed. One statement per 1,000."""
        for chunk in chunks(list(rung_at), _ID_CHUNK):
            ids_at: dict[int, list[int]] = {}
            for alarm_id, at_ms in chunk:
                ids_at.setdefault(int(at_ms), []).append(alarm_id)
            if len(ids_at) == 1:
                value = str(next(iter(ids_at)))
            else:  # one publish group per time: a WHEN per group, not per alarm
                whens = (f"WHEN id IN ({id_list(ids)}) THEN {at}" for at, ids in ids_at.items())
                value = f"CASE {' '.join(whens)} END"
            also = f"rung_at = {value}, claimed_by = {int(self.owner)}"
            self._set_final([alarm_id for alarm_id, _ in chunk], RUNG, now_ms, also)

    def hand_off(self, next_try: Sequence[tuple[int, int]], now_ms: int, keep_claim: bool) -> None:
        """Each (id, next_try_time): handed to its webhook or pull channel now, so
        `delivering` until answered. With `keep_claim` the row names the transaction's engine
        (a webhook call it makes; a takeover gives it back if the engine dies), else it is
        nobody's (a pull message, leased to pullers by store.pulls)."""
        owner = f", claimed_by = {int(self.owner) if keep_claim else 0}"
        for chunk in chunks(list(next_try), _ID_CHUNK):
            by_time: dict[int, list[int]] = {}
            for alarm_id, at_ms in chunk:
                by_time.setdefault(int(at_ms), []).append(alarm_id)
            for at_ms, ids in by_time.items():
                self.conn.exec_driver_sql(
                    f"UPDATE {_TABLE} SET status = '{DELIVERING}', next_try_time = {at_ms},"
                    f" version = version + 1, update_time = {int(now_ms)}{owner}"
                    f" WHERE id IN ({id_list(ids)})"
                )

    def mark_expired(self, ids: Sequence[int], now_ms: int) -> None:
        self._set_final(ids, EXPIRED, now_ms)
        self.events.expired(ids, now_ms)

    def mark_dead(self, ids: Sequence[int], now_ms: int, error: str = NOT_CONFIRMED) -> None:
        self._set_final(ids, DEAD, now_ms)
        self.events.dead(ids, now_ms, error)
        if self.dead_letters is not None:
            self.dead_letters.dead(ids, now_ms, error)

    def schedule_retries(
        self, retries: Sequence[tuple[int, int]], now_ms: int, error: str = NOT_CONFIRMED
    ) -> None:
        """Each (id, next_try_time): count the failed try and make the alarm due again then."""
        self.retried += retries
        self.events.failed(retries, now_ms, error)
        for chunk in chunks(list(retries), _ID_CHUNK):
            self.conn.execute(
                update(alarm_table)
                .where(alarm_table.c.id.in_([alarm_id for alarm_id, _ in chunk]))
                .values(
                    status=PENDING,
                    next_try_time=case(dict(chunk), value=alarm_table.c.id),
                    claimed_by=0,
                    retry_times=alarm_table.c.retry_times + 1,
                    version=alarm_table.c.version + 1,
                    update_time=now_ms,
                )
            )

    def _set_final(self, ids: Sequence[int], status: str, now_ms: int, also: str = "") -> None:
        """Written out like lock_live's statement: no statement object built per batch."""
        assignments = (
            f"status = '{status}', version = version + 1,"
            f" next_try_time = {int(now_ms)}, update_time = {int(now_ms)}"
            + (f", {also}" if also else "")
        )
        for chunk in chunks(list(ids), _ID_CHUNK):
            self.conn.exec_driver_sql(
                f"UPDATE {_TABLE} SET {assignments} WHERE id IN ({id_list(chunk)})"
            )
