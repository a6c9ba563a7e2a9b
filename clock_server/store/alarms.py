"""The alarms in the database: what the HTTP API does to them."""

from __future__ import annotations

import builtins
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Connection, Engine, Row, and_, exc, func, insert, select, tuple_, update

from clock_server.errors import Conflict, NotFound, ValidationError
from clock_server.model import (
    CANCELLED,
    DELIVERING,
    PENDING,
    Alarm,
    AlarmChanges,
    AlarmFilter,
    NewAlarm,
)
from clock_server.store.alarm_rows import (
    alarm_from_row,
    alarm_from_values,
    insert_values,
    matches,
    pages,
)
from clock_server.store.alarm_search import alarms_query
from clock_server.store.db import Capabilities, capabilities
from clock_server.store.events import cancelled, changed, keep_room_for_a_change, write_events
from clock_server.store.moves import mark_moved
from clock_server.store.row_locks import select_by_key, select_for_change
from clock_server.store.schema import ALARM_COLUMNS, alarm_table
from clock_server.store.sql import chunks, param_marker, translate_errors


class AlarmStore:
    """Create, read, change and cancel alarms. Every method is one short transaction."""

    def __init__(self, db: Engine) -> None:
        self.db = db
        self._caps: Capabilities | None = None
        self._insert_one = insert(alarm_table)

    @property
    def caps(self) -> Capabilities:
        if self._caps is None:
            with translate_errors():
                self._caps = capabilities(self.db)
        return self._caps

    def close(self) -> None:
        """Close the pooled connections."""
        self.db.dispose()

    def ping(self) -> None:
        """Raise Unavailable unless a trivial query succeeds."""
        with translate_errors(), self.db.connect() as conn:
            conn.exec_driver_sql("SELECT 1")

    def create(self, new: NewAlarm, now_ms: int) -> tuple[Alarm, bool]:
        """Insert the alarm, or return the stored one for the same key. True when inserted."""
        values = insert_values(new, now_ms)
        with translate_errors():
            try:
                with self.db.begin() as conn:
                    result = conn.execute(self._insert_one, values)
            except exc.IntegrityError:
                return self.get(new.application, new.business_id), False
        inserted = result.inserted_primary_key
        assert inserted is not None
        return alarm_from_values(inserted[0], values), True

    def create_many(self, items: Sequence[NewAlarm], now_ms: int) -> list[tuple[Alarm, bool]]:
        """Insert many alarms in one transaction; keys that already exist are left unchanged.

        Returns, per item and in order, the stored alarm and whether this call inserted it
        (a key repeated within `items` is inserted once, by its first occurrence).
        """
        return self.create_each([(item, now_ms) for item in items])

    def create_each(self, requests: Sequence[tuple[NewAlarm, int]]) -> list[tuple[Alarm, bool]]:
        """`create_many` for alarms asked for at different times: (alarm, now_ms) each."""
        keys = [(item.application, item.business_id) for item, _ in requests]
        values: dict[tuple[str, str], dict[str, Any]] = {}
        for key, (item, now_ms) in zip(keys, requests, strict=True):
            if key not in values:
                values[key] = insert_values(item, now_ms)
        with translate_errors():
            if self.caps.insert_returning:
                inserted = self._insert_returning(list(values.values()))
            else:
                inserted = self._insert_then_find(values)
            stored = {key: alarm_from_values(inserted[key], values[key]) for key in inserted}
            stored.update(self._alarms_by_key(set(values) - set(inserted)))
        results: list[tuple[Alarm, bool]] = []
        for key in keys:
            results.append((stored[key], inserted.pop(key, None) is not None))
        return results

    def _insert_returning(self, rows: list[dict[str, Any]]) -> dict[tuple[str, str], int]:
        """INSERT IGNORE ... RETURNING (MariaDB 10.5+, SQLite 3.35+): the rows that went in.

        One statement written out here rather than an executemany of insert(alarm_table): turning
        1,000 parameter dicts into a statement through SQLAlchemy took about a third of the
        batch endpoint's CPU.
        """
        inserted: dict[tuple[str, str], int] = {}
        with self.db.begin() as conn:
            for page in pages(rows):
                statement = self._returning_insert_sql(tuple(page[0]), len(page))
                params = tuple(value for row in page for value in row.values())
                for r in conn.exec_driver_sql(statement, params):
                    inserted[(r.application, r.business_id)] = r.id
        return inserted

    def _returning_insert_sql(self, columns: tuple[str, ...], count: int) -> str:
        """For `count` rows of `columns`, in the order of `_insert_values`."""
        dialect = self.db.dialect
        quote = dialect.identifier_preparer.quote
        marker = param_marker(dialect)
        row = "(" + ", ".join([marker] * len(columns)) + ")"
        return (
            f"INSERT {self._ignore_prefix()} INTO {quote(alarm_table.name)} "
            f"({', '.join(quote(column) for column in columns)}) "
            f"VALUES {', '.join([row] * count)} "
            f"RETURNING {quote('id')}, {quote('application')}, {quote('business_id')}"
        )

    def _insert_then_find(
        self, values: dict[tuple[str, str], dict[str, Any]]
    ) -> dict[tuple[str, str], int]:
        """Without RETURNING (MySQL): look the keys up before and after an INSERT IGNORE."""
        with self.db.begin() as conn:
            existing = self._ids_by_key(conn, set(values))
            fresh = {key: row for key, row in values.items() if key not in existing}
            if not fresh:
                return {}
            result = conn.execute(
                insert(alarm_table).prefix_with(self._ignore_prefix()), list(fresh.values())
            )
            every_row_went_in = result.rowcount == len(fresh)
            ids = self._ids_by_key(conn, set(fresh))
        if every_row_went_in:
            return ids
        # A concurrent request inserted some of these keys between the two steps: ours are
        # the rows that hold exactly what this call wrote.
        found = self._alarms_by_key(set(fresh))
        return {key: alarm.id for key, alarm in found.items() if matches(alarm, fresh[key])}

    def get(self, application: str, business_id: str) -> Alarm:
        with translate_errors(), self.db.connect() as conn:
            row = conn.execute(select_by_key(application, business_id)).first()
        if row is None:
            raise NotFound(f"no alarm {application}/{business_id}")
        return alarm_from_row(row)

    def find(self, keys: set[tuple[str, str]]) -> dict[tuple[str, str], Alarm]:
        """The stored alarms among (application, business_id) `keys`, by key."""
        with translate_errors():
            return self._alarms_by_key(keys)

    def update(
        self, application: str, business_id: str, changes: AlarmChanges, now_ms: int, *, actor: str
    ) -> Alarm:
        """Apply a PATCH to a pending alarm; Conflict otherwise. A new target drops any claim.
        What changed goes to the alarm's history as done by `actor`."""
        with translate_errors(), self.db.begin() as conn:
            row = self._lock_key(conn, application, business_id)
            if row.status != PENDING:
                raise Conflict(
                    f"alarm is {row.status}, only pending alarms can change", status=row.status
                )
            target = (
                row.target_ring_at if changes.target_ring_at is None else changes.target_ring_at
            )
            latest = changes.latest_ring_at if changes.set_latest_ring_at else row.latest_ring_at
            if latest is not None and latest < target:
                raise ValidationError(
                    "latest_ring_at must not be before target_ring_at", field="latest_ring_at"
                )
            values: dict[str, object] = {"update_time": now_ms}
            if changes.payload is not None:
                values["payload"] = changes.payload
            if changes.set_latest_ring_at:
                values["latest_ring_at"] = changes.latest_ring_at
            if changes.target_ring_at is not None:
                values.update(
                    target_ring_at=changes.target_ring_at,
                    next_try_time=changes.target_ring_at,
                    claimed_by=0,
                    version=alarm_table.c.version + 1,
                )
            conn.execute(update(alarm_table).where(alarm_table.c.id == row.id).values(values))
            if changes.target_ring_at is not None:
                mark_moved(conn, [(row.slot, changes.target_ring_at)])
            event = changed(row, changes, now_ms, actor)
            if event is not None:
                keep_room_for_a_change(conn, row.id)
                write_events(conn, [event])
            return alarm_from_row(conn.execute(select_by_key(application, business_id)).one())

    def cancel(self, application: str, business_id: str, now_ms: int, *, actor: str) -> Alarm:
        """Cancel a pending alarm (a repeat is fine); Conflict once it rang, expired or died.
        The cancel goes to the alarm's history as done by `actor` (a repeat does not)."""
        return self.cancel_telling(application, business_id, now_ms, actor=actor)[0]

    def cancel_telling(
        self, application: str, business_id: str, now_ms: int, *, actor: str
    ) -> tuple[Alarm, bool]:
        """`cancel`, and whether this call cancelled it (False for a repeat)."""
        with translate_errors(), self.db.begin() as conn:
            row = self._lock_key(conn, application, business_id)
            if row.status == DELIVERING:
                raise Conflict(
                    "alarm is delivering: it was handed to its application's webhook or "
                    "pullers and can no longer be cancelled",
                    status=row.status,
                )
            if row.status not in (PENDING, CANCELLED):
                raise Conflict(f"alarm is already {row.status}", status=row.status)
            if row.status == PENDING:
                conn.execute(
                    update(alarm_table)
                    .where(alarm_table.c.id == row.id)
                    .values(
                        status=CANCELLED,
                        # Finished now: the (status, next_try_time) index orders finished
                        # alarms by when they finished, which the retention purge reads.
                        next_try_time=now_ms,
                        update_time=now_ms,
                        version=alarm_table.c.version + 1,
                    )
                )
                write_events(conn, [cancelled(row.id, now_ms, actor)])
            alarm = alarm_from_row(conn.execute(select_by_key(application, business_id)).one())
            return alarm, row.status == PENDING

    def list(
        self, application: str | None, status: str | None, limit: int, after_id: int | None
    ) -> list[Alarm]:
        """Alarms in id order after `after_id`, optionally of one application and status."""
        after = None if after_id is None else (after_id,)
        return self.search(AlarmFilter(application, status), limit, after)

    def search(
        self, where: AlarmFilter, limit: int, after: tuple[Any, ...] | None
    ) -> builtins.list[Alarm]:
        """Up to `limit` alarms matching `where`, after the position `after` of the page
        before (store.alarm_search says the order)."""
        with translate_errors(), self.db.connect() as conn:
            return [alarm_from_row(row) for row in conn.execute(alarms_query(where, limit, after))]

    def count_overdue(self, before_ms: int) -> int:
        """Pending alarms whose next try was due before `before_ms` (claimed ones are not)."""
        query = select(func.count()).where(
            and_(alarm_table.c.status == PENDING, alarm_table.c.next_try_time < before_ms)
        )
        with translate_errors(), self.db.connect() as conn:
            return int(conn.execute(query).scalar_one())

    def _lock_key(self, conn: Connection, application: str, business_id: str) -> Row:
        row = conn.execute(select_for_change(self.caps, application, business_id)).first()
        if row is None:
            raise NotFound(f"no alarm {application}/{business_id}")
        return row

    def _ignore_prefix(self) -> str:
        return "OR IGNORE" if self.db.dialect.name == "sqlite" else "IGNORE"

    def _ids_by_key(
        self, conn: Connection, keys: set[tuple[str, str]]
    ) -> dict[tuple[str, str], int]:
        found: dict[tuple[str, str], int] = {}
        for chunk in chunks(sorted(keys), 500):
            query = select(
                alarm_table.c.application, alarm_table.c.business_id, alarm_table.c.id
            ).where(tuple_(alarm_table.c.application, alarm_table.c.business_id).in_(chunk))
            found.update({(r.application, r.business_id): r.id for r in conn.execute(query)})
        return found

    def _alarms_by_key(self, keys: set[tuple[str, str]]) -> dict[tuple[str, str], Alarm]:
        found: dict[tuple[str, str], Alarm] = {}
        if not keys:
            return found
        with self.db.connect() as conn:
            for chunk in chunks(sorted(keys), 500):
                query = select(*ALARM_COLUMNS).where(
                    tuple_(alarm_table.c.application, alarm_table.c.business_id).in_(chunk)
                )
                for row in conn.execute(query):
                    found[(row.application, row.business_id)] = alarm_from_row(row)
        return found
