"""The dead-letter outbox on SQL (the interface is store.ports.DeadLetterOutbox).

A ring batch that marks alarms dead adds a row to `clock_dead_letter` for each, in its own
transaction (`DeadLetterRows`), holding the alarm as it was when it died and the error of its
last attempt: the dead letter exists exactly when the death does. The relay
(engine/dead_letter_relay.py) reads the rows in id order and deletes each one once the broker
has confirmed it.

Why rows that are deleted, rather than a cursor over the dead alarms by death time: ring
lanes and engines commit in their own order, so a death stamped at t can become visible after
one stamped at t + 1 has been read, and a cursor past t + 1 would skip it. Reading whatever
rows exist skips nothing, whatever the commit order; and re-driving an alarm that dies again
simply adds another row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlalchemy import Connection, delete, func, select

from clock_server.model import DeadLetter, RingRow
from clock_server.store.alarms import AlarmStore
from clock_server.store.schema import dead_letter_table
from clock_server.store.sql import chunks, param_marker, translate_errors

_COLUMNS = (
    "alarm_id",
    "application",
    "business_id",
    "payload",
    "target_ring_at",
    "latest_ring_at",
    "died_at",
    "attempts",
    "error",
)
_ID_CHUNK = 1_000


class DeadLetterRows:
    """The dead letters of one ring batch, gathered while its outcomes are recorded and
    written at the end of its transaction in one statement (none when nothing died)."""

    def __init__(self, row_of: Callable[[int], RingRow | None]) -> None:
        self._row_of = row_of  # the batch's locked rows, by id
        self._rows: list[tuple[object, ...]] = []

    def dead(self, ids: Sequence[int], now_ms: int, error: str) -> None:
        """The alarms `ids`, locked by this batch, died now of `error` on their last try."""
        for alarm_id in ids:
            row = self._row_of(alarm_id)
            assert row is not None, f"alarm {alarm_id} died outside its ring batch"
            self._rows.append(
                (
                    row.id,
                    row.application,
                    row.business_id,
                    row.payload,
                    row.target_ring_at,
                    row.latest_ring_at,
                    int(now_ms),
                    row.retry_times + 1,
                    error,
                )
            )

    def write(self, conn: Connection) -> None:
        """One executemany with placeholders only, which PyMySQL sends as one INSERT."""
        if not self._rows:
            return
        marker = param_marker(conn.dialect)
        conn.exec_driver_sql(
            f"INSERT INTO {dead_letter_table.name} ({', '.join(_COLUMNS)})"
            f" VALUES ({', '.join([marker] * len(_COLUMNS))})",
            self._rows,
        )
        self._rows = []


class SqlDeadLetterOutbox:
    """The dead letters still to publish, oldest first."""

    def __init__(self, store: AlarmStore) -> None:
        self.store = store

    def next_letters(self, limit: int) -> list[DeadLetter]:
        """Up to `limit` letters in the order they were written (by id)."""
        t = dead_letter_table.c
        query = select(t.id, *(t[name] for name in _COLUMNS)).order_by(t.id).limit(limit)
        with translate_errors(), self.store.db.connect() as conn:
            return [DeadLetter._make(row) for row in conn.execute(query)]

    def remove(self, letter_ids: Sequence[int]) -> None:
        """Forget letters the broker has confirmed."""
        if not letter_ids:
            return
        with translate_errors(), self.store.db.begin() as conn:
            for chunk in chunks(list(letter_ids), _ID_CHUNK):
                conn.execute(delete(dead_letter_table).where(dead_letter_table.c.id.in_(chunk)))

    def count(self) -> int:
        """Letters waiting to be published."""
        query = select(func.count()).select_from(dead_letter_table)
        with translate_errors(), self.store.db.connect() as conn:
            return int(conn.execute(query).scalar_one())
