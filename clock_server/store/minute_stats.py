"""The per-minute statistics in `clock_minute_stats`: every process adds its counts to the
rows with one additive upsert per (minute, application), so that the rows hold the service's
totals; read back by minute, and deleted past their retention in short transactions."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Executable, delete, select
from sqlalchemy.dialects.mysql import insert as mysql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from clock_server.minute_stats import Key, MinuteCounts
from clock_server.store.alarms import AlarmStore
from clock_server.store.schema import COUNTER_COLUMNS, LATENESS_COLUMNS, minute_stats_table
from clock_server.store.sql import chunks, translate_errors

_T = minute_stats_table
# Rows per INSERT: each has 22 values.
_ROWS_PER_STATEMENT = 200


@dataclass(frozen=True)
class MinuteRow:
    """One (minute, application) row as read."""

    minute: int
    application: str
    counts: MinuteCounts


class SqlMinuteStats:
    """Adds to, reads and purges `clock_minute_stats`."""

    def __init__(self, store: AlarmStore) -> None:
        self.store = store

    def add(self, counts: Mapping[Key, MinuteCounts]) -> None:
        """Add `counts` to their rows, creating those missing, in one transaction: on MariaDB
        INSERT ... ON DUPLICATE KEY UPDATE c = c + VALUES(c), on SQLite ON CONFLICT DO UPDATE.
        Concurrent writers' additions all count."""
        if not counts:
            return
        rows = [_values(key, one) for key, one in sorted(counts.items())]
        with translate_errors(), self.store.db.begin() as conn:
            for part in chunks(rows, _ROWS_PER_STATEMENT):
                conn.execute(self._upsert(part))

    def _upsert(self, rows: list[dict[str, object]]) -> Executable:
        if self.store.db.dialect.name == "sqlite":
            lite = sqlite_insert(_T).values(rows)
            return lite.on_conflict_do_update(
                index_elements=[_T.c.minute, _T.c.application],
                set_={name: _T.c[name] + lite.excluded[name] for name in COUNTER_COLUMNS},
            )
        my = mysql_insert(_T).values(rows)
        return my.on_duplicate_key_update(
            {name: _T.c[name] + my.inserted[name] for name in COUNTER_COLUMNS}
        )

    def read(
        self, from_ms: int, to_ms: int, applications: Collection[str] | None = None
    ) -> list[MinuteRow]:
        """The rows of the minutes from `from_ms` (included) to `to_ms` (excluded), of
        `applications` (None: all), by minute then application."""
        query = select(_T).where(_T.c.minute >= from_ms, _T.c.minute < to_ms)
        if applications is not None:
            if not applications:
                return []
            query = query.where(_T.c.application.in_(sorted(applications)))
        query = query.order_by(_T.c.minute, _T.c.application)
        with translate_errors(), self.store.db.connect() as conn:
            return [_row(row._mapping) for row in conn.execute(query)]

    def purge_before(self, minute_ms: int, batch: int) -> int:
        """Delete up to `batch` rows of minutes before `minute_ms`, oldest first, in one short
        transaction; how many went."""
        oldest = (
            select(_T.c.minute).where(_T.c.minute < minute_ms).order_by(_T.c.minute).limit(batch)
        )
        with translate_errors(), self.store.db.begin() as conn:
            minutes = sorted({int(row[0]) for row in conn.execute(oldest)})
            if not minutes:
                return 0
            # The rows read, and the rest of the last minute read: a minute goes whole.
            gone = conn.execute(delete(_T).where(_T.c.minute <= minutes[-1]))
            return int(gone.rowcount)


def _values(key: Key, one: MinuteCounts) -> dict[str, object]:
    values: dict[str, object] = {
        "minute": key[0],
        "application": key[1],
        "created": one.created,
        "rung": one.rung,
        "failed": one.failed,
        "lateness_sum_ms": one.lateness_sum_ms,
    }
    values.update(zip(LATENESS_COLUMNS, one.lateness, strict=True))
    return values


def _row(mapping: Mapping[Any, Any]) -> MinuteRow:
    counts = MinuteCounts(
        created=int(mapping["created"]),
        rung=int(mapping["rung"]),
        failed=int(mapping["failed"]),
        lateness=[int(mapping[name]) for name in LATENESS_COLUMNS],
        lateness_sum_ms=int(mapping["lateness_sum_ms"]),
    )
    return MinuteRow(int(mapping["minute"]), str(mapping["application"]), counts)
