"""Retention on SQL: reading and deleting finished alarms, and the lease that lets one server
at a time run a periodic job (the interfaces are store.ports.FinishedAlarmPurger and
store.ports.JobLease; engine/maintenance.py decides what to delete and when).

A finished alarm (rung, cancelled, expired, dead) keeps the moment it finished in
next_try_time, so the (status, next_try_time) index lists each status's finished alarms in
the order they finished. The purge reads that index with plain reads, which lock nothing, and
deletes by primary key in short transactions of at most 1,000 rows, re-checking status and
finish time so that a row changed since the read is kept. Finished rows are never locked by
the ring path (it locks claimed, pending rows), so a delete waits on nobody and nobody waits
on it, except an API call on that very finished alarm for the few milliseconds of the
transaction.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import insert, or_, update

from clock_server.model import CANCELLED, DEAD, EXPIRED, RUNG
from clock_server.store.alarms import AlarmStore
from clock_server.store.applications import SqlApplicationRegistry
from clock_server.store.ports import FinishedRow
from clock_server.store.schema import alarm_table, job_lease_table
from clock_server.store.sql import id_list, translate_errors

FINISHED = (RUNG, CANCELLED, EXPIRED, DEAD)
MAX_ROWS = 1_000  # per read and per delete: each is one short statement
_TABLE = alarm_table.name


class SqlFinishedAlarmPurger:
    """Finished alarms read in finish order and deleted by id."""

    def __init__(self, store: AlarmStore) -> None:
        self.store = store

    def retention_overrides(self) -> dict[str, float]:
        """The registered applications with a `retention_days` of their own."""
        return {
            policy.name: float(policy.retention_days)
            for policy in SqlApplicationRegistry(self.store).all()
            if policy.retention_days is not None
        }

    def finished_after(
        self, status: str, after: tuple[int, int], before_ms: int, limit: int
    ) -> list[FinishedRow]:
        """Up to `limit` alarms of `status` finished before `before_ms`, in (next_try_time, id)
        order, strictly after the position `after`.

        A range of the (status, next_try_time) index, whose entries end in the id, so the
        order is the index's own and each read starts where the last one stopped instead of
        walking again the rows it kept. A plain read: no row is locked.
        """
        _check(status, limit)
        from_ms, after_id = int(after[0]), int(after[1])
        # Without the hint MariaDB may read a small table by `status` alone and sort.
        hint = " FORCE INDEX (ix_clock_status_next_try_time)" if self.store.caps.index_hints else ""
        query = (
            f"SELECT id, application, next_try_time FROM {_TABLE}{hint}"
            f" WHERE status = '{status}' AND next_try_time >= {from_ms}"
            f" AND next_try_time < {int(before_ms)}"
            f" AND (next_try_time > {from_ms} OR id > {after_id})"
            f" ORDER BY next_try_time, id LIMIT {int(limit)}"
        )
        with translate_errors(), self.store.engine.connect() as conn:
            rows = conn.exec_driver_sql(query).all()
        return [FinishedRow(int(row[0]), row[1], int(row[2])) for row in rows]

    def delete_finished(self, status: str, ids: Sequence[int], before_ms: int) -> int:
        """Delete those of `ids` still of `status` and finished before `before_ms`, in one
        transaction of one statement.

        Whatever is kept with an alarm goes in this same transaction: the alarm is its one
        row today; a history table added later must have its rows for these ids deleted
        here too, before the alarms, so that no history outlives its alarm.

        An id is never given out twice, as consumers deduplicate by it (the message_id).
        MariaDB and MySQL 8 keep their auto-increment counter, but SQLite numbers a new row
        after the largest id in the table: there the alarm with the largest id stays until
        a newer one is created.
        """
        _check(status, len(ids))
        if not ids:
            return 0
        newest = (
            f" AND id < (SELECT MAX(id) FROM {_TABLE})"
            if self.store.engine.dialect.name == "sqlite"
            else ""
        )
        with translate_errors(), self.store.engine.begin() as conn:
            result = conn.exec_driver_sql(
                f"DELETE FROM {_TABLE} WHERE id IN ({id_list(ids)})"
                f" AND status = '{status}' AND next_try_time < {int(before_ms)}{newest}"
            )
            return int(result.rowcount)


class SqlJobLease:
    """A job's row in `clock_job_lease`, taken with a conditional UPDATE (or, for a job never
    run, an INSERT that ignores a row another server has just added): on SQLite and MariaDB
    alike, two servers cannot both hold it."""

    def __init__(self, store: AlarmStore) -> None:
        self.store = store

    def take(self, name: str, owner: str, now_ms: int, until_ms: int) -> bool:
        owner = owner[:128]
        lease = job_lease_table.c
        engine = self.store.engine
        with translate_errors(), engine.begin() as conn:
            renewed = conn.execute(
                update(job_lease_table)
                .where(lease.name == name, or_(lease.until_ms < now_ms, lease.owner == owner))
                .values(owner=owner, until_ms=until_ms)
            )
            if renewed.rowcount == 1:
                return True
            added = conn.execute(
                insert(job_lease_table)
                .prefix_with("OR IGNORE" if engine.dialect.name == "sqlite" else "IGNORE")
                .values(name=name, owner=owner, until_ms=until_ms)
            )
            return bool(added.rowcount == 1)

    def holder(self, name: str) -> tuple[str, int] | None:
        """(owner, until_ms) of job `name`'s lease, None if it never ran."""
        query = job_lease_table.select().where(job_lease_table.c.name == name)
        with translate_errors(), self.store.engine.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else (row.owner, int(row.until_ms))


def _check(status: str, count: int) -> None:
    """The status is written into the statement, so only a finished status gets there."""
    if status not in FINISHED:
        raise ValueError(f"{status!r} is not a finished status")
    if count > MAX_ROWS:
        raise ValueError(f"at most {MAX_ROWS} rows per statement, not {count}")
