"""The registry of live engines on SQL: each engine's heartbeat, and giving a silent
engine's claims back (the interface is store.ports.EngineRegistry).

A claim names its engine (`clock.claimed_by`) and keeps its lease end in next_try_time. The
claims of an engine found dead are therefore the pending rows with its id whose
next_try_time lies between now and now plus its lease: found by the (status,
next_try_time) index with no index of their own, so claiming writes nothing more than an
integer in place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Row, delete, insert, select, update

from clock_server.model import DELIVERING, PENDING, EngineRecord
from clock_server.slot_space import ALL_SLOTS, SlotRange
from clock_server.store.alarms import AlarmStore
from clock_server.store.moves import mark_all_moved
from clock_server.store.ports import Takeover
from clock_server.store.schema import alarm_table, engine_table
from clock_server.store.sql import chunks, id_list, translate_errors

_TABLE = alarm_table.name
_ID_CHUNK = 1_000
# A dead engine's clock may have run ahead of ours: look this far past its lease for claims.
CLOCK_SKEW_MARGIN_MS = 5_000


class SqlEngineRegistry:
    """Engines beat in `clock_engine`; the claims of one found silent are given back."""

    def __init__(self, store: AlarmStore) -> None:
        self.store = store

    def register(
        self, instance_id: str, lease_ms: int, now_ms: int, slots: SlotRange = ALL_SLOTS
    ) -> int:
        """Add a live engine that reads from `slots` until its first look at the others;
        returns its id, which its rings and webhook calls carry."""
        with translate_errors(), self.store.db.begin() as conn:
            result = conn.execute(
                insert(engine_table).values(
                    instance_id=instance_id[:128],
                    started_at=now_ms,
                    heartbeat_at=now_ms,
                    lease_ms=lease_ms,
                    slot_from=slots.start,
                    slot_to=slots.stop,
                )
            )
            key = result.inserted_primary_key
            assert key is not None
            return int(key[0])

    def heartbeat(self, engine_id: int, now_ms: int, slots: SlotRange = ALL_SLOTS) -> bool:
        """Say the engine is alive and owns `slots`; False once another engine has declared
        it dead."""
        table = engine_table.c
        with translate_errors(), self.store.db.begin() as conn:
            result = conn.execute(
                update(engine_table)
                .where(table.id == engine_id, table.dead_at.is_(None))
                .values(heartbeat_at=now_ms, slot_from=slots.start, slot_to=slots.stop)
            )
            return result.rowcount == 1

    def declare_dead(self, silent_since_ms: int, now_ms: int) -> list[EngineRecord]:
        """Mark dead every engine whose last beat was before `silent_since_ms`; returns the
        registry as it then stands: the live engines, and those marked dead whose claims may
        not all have been given back yet (`dead_at` set)."""
        table = engine_table.c
        with translate_errors(), self.store.db.begin() as conn:
            conn.execute(
                update(engine_table)
                .where(table.dead_at.is_(None), table.heartbeat_at < silent_since_ms)
                .values(dead_at=now_ms)
            )
            rows = conn.execute(select(engine_table).order_by(table.id)).all()
        return [_record(row) for row in rows]

    def live_engines(self) -> list[EngineRecord]:
        """The engines not declared dead, oldest first."""
        query = select(engine_table).where(engine_table.c.dead_at.is_(None))
        with translate_errors(), self.store.db.connect() as conn:
            rows = conn.execute(query.order_by(engine_table.c.id)).all()
        return [_record(row) for row in rows]

    def take_over(self, dead: EngineRecord, now_ms: int) -> Takeover:
        """Give back the claims `dead` holds: each alarm is due again at its target (a retry:
        now) and its version moves, so the dead engine can no longer ring it if it was only
        stalled. Rows another transaction has locked (its ring batch in flight) are left to
        it and counted as held.

        The alarms it had handed to a webhook and not yet recorded an answer for are pending
        again, due now: their call may or may not have reached the application, so they are
        sent again, with the same webhook-id."""
        upper_ms = now_ms + dead.lease_ms + CLOCK_SKEW_MARGIN_MS
        with translate_errors(), self.store.db.begin() as conn:
            candidates = self._claims_of(conn, dead.id, now_ms, upper_ms)
            first_try_at_target = (
                f"CASE WHEN retry_times = 0 THEN target_ring_at ELSE {int(now_ms)} END"
            )
            released = self._give_back(
                conn, dead.id, candidates, PENDING, first_try_at_target, now_ms
            )
            calls = self._webhook_calls_of(conn, dead.id)
            resent = self._give_back(conn, dead.id, calls, DELIVERING, str(int(now_ms)), now_ms)
            if resent:
                mark_all_moved(conn, now_ms)
            released += resent
        held = len(candidates) + len(calls) - released
        return Takeover(released=released, held=held)

    def moves_of(self, engine_id: int) -> tuple[int, int | None]:
        """The engine's count of moves into its slots, and the earliest due time since it
        last cleared them (`mark_moved`)."""
        # Written out: every preload pass asks, and building the statement cost more than
        # the database's own work.
        query = f"SELECT moves, moved_from FROM {engine_table.name} WHERE id = {int(engine_id)}"
        with translate_errors(), self.store.db.connect() as conn:
            row = conn.exec_driver_sql(query).first()
        return (0, None) if row is None else (int(row[0]), row[1])

    def clear_moves(self, engine_id: int, moves: int) -> bool:
        """Forget the moves counted `moves`; False when another came since."""
        table = engine_table.c
        with translate_errors(), self.store.db.begin() as conn:
            result = conn.execute(
                update(engine_table)
                .where(table.id == engine_id, table.moves == moves)
                .values(moved_from=None)
            )
            return result.rowcount == 1

    def remove(self, engine_id: int) -> None:
        """Forget an engine: it stopped, or its claims have all been given back."""
        with translate_errors(), self.store.db.begin() as conn:
            conn.execute(delete(engine_table).where(engine_table.c.id == engine_id))

    def _claims_of(self, conn: Connection, engine_id: int, now_ms: int, upper_ms: int) -> list[int]:
        """A plain read, which locks nothing: a locking read would lock every row it passes,
        the other engines' claims too."""
        hint = " FORCE INDEX (ix_clock_status_next_try_time)" if self.store.caps.index_hints else ""
        rows = conn.exec_driver_sql(
            f"SELECT id FROM {_TABLE}{hint} WHERE status = '{PENDING}'"
            f" AND next_try_time > {int(now_ms)} AND next_try_time <= {int(upper_ms)}"
            f" AND claimed_by = {int(engine_id)}"
        ).all()
        return [row[0] for row in rows]

    def _give_back(
        self,
        conn: Connection,
        engine_id: int,
        ids: Sequence[int],
        status: str,
        next_try_sql: str,
        now_ms: int,
    ) -> int:
        """Make those of `ids` still the engine's, in `status` and locked by nobody else
        pending and nobody's, due at `next_try_sql`; returns how many."""
        released = 0
        for chunk in chunks(list(ids), _ID_CHUNK):
            locked = self._lock_unheld(conn, engine_id, chunk, status)
            if locked:
                conn.exec_driver_sql(
                    f"UPDATE {_TABLE} SET status = '{PENDING}', next_try_time = {next_try_sql},"
                    f" claimed_by = 0, version = version + 1, update_time = {int(now_ms)}"
                    f" WHERE id IN ({id_list(locked)})"
                )
            released += len(locked)
        return released

    def _webhook_calls_of(self, conn: Connection, engine_id: int) -> list[int]:
        """The alarms the engine handed to a webhook (delivering, and still naming it): a
        plain read of the delivering part of the (status, next_try_time) index."""
        hint = " FORCE INDEX (ix_clock_status_next_try_time)" if self.store.caps.index_hints else ""
        rows = conn.exec_driver_sql(
            f"SELECT id FROM {_TABLE}{hint} WHERE status = '{DELIVERING}'"
            f" AND claimed_by = {int(engine_id)}"
        ).all()
        return [row[0] for row in rows]

    def _lock_unheld(
        self, conn: Connection, engine_id: int, ids: Sequence[int], status: str
    ) -> list[int]:
        """Lock those of `ids` that are still the engine's, in `status`, and that nobody else
        holds."""
        caps = self.store.caps
        if not caps.row_locks:  # SQLite: this transaction holds the whole file
            return list(ids)
        by_id = " FORCE INDEX (PRIMARY)" if caps.index_hints else ""
        skip = " SKIP LOCKED" if caps.skip_locked else ""
        rows = conn.exec_driver_sql(
            f"SELECT id FROM {_TABLE}{by_id} WHERE id IN ({id_list(ids)})"
            f" AND status = '{status}' AND claimed_by = {int(engine_id)} FOR UPDATE{skip}"
        ).all()
        return [row[0] for row in rows]


def _record(row: Row[Any]) -> EngineRecord:
    return EngineRecord(**row._mapping)
