"""Retention on SQL: reading and deleting finished alarms, and the lease that lets one server
at a time run a periodic job (the interfaces are store.ports.FinishedAlarmPurger and
store.ports.JobLease; engine/maintenance.py decides what to delete and when).

A finished alarm (rung, cancelled, expired, dead) keeps the moment it finished in
next_try_time, so the (status, next_try_time) index lists each status's finished alarms in
the order they finished. The purge reads that index with plain reads, which lock nothing, and
deletes by primary key in short transactions of at most 1,000 rows, re-checking status and
finish time so that a row changed since the read is kept, and the deleted alarms' events
and counted increment ids with them. Finished rows are never locked by
the ring path (it locks claimed, pending rows), so a delete waits on nobody and nobody waits
on it, except an API call on that very finished alarm for the few milliseconds of the
transaction.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from sqlalchemy import insert, or_, select, update

from clock_server.model import CANCELLED, DEAD, EXPIRED, RUNG
from clock_server.store.alarms import AlarmStore
from clock_server.store.ports import PurgeBatch
from clock_server.store.schema import (
    alarm_table,
    application_table,
    count_increment_table,
    event_table,
    job_lease_table,
)
from clock_server.store.sql import param_marker, translate_errors

FINISHED = (RUNG, CANCELLED, EXPIRED, DEAD)
MAX_ROWS = 1_000  # per read and per delete: each is one short statement
_TABLE = alarm_table.name
_EVENTS = event_table.name
_INCREMENTS = count_increment_table.name
_ID_LIST = re.compile(r"[0-9]+(,[0-9]+)*|")
_ID_LIST_BYTES = 1 << 20  # room for 1,000 ids of 20 digits, and then some


class SqlFinishedAlarmPurger:
    """Finished alarms read in finish order and deleted by id."""

    def __init__(self, store: AlarmStore) -> None:
        self.store = store

    def retention_overrides(self) -> dict[str, float]:
        """The registered applications with a `retention_days` of their own (read alone:
        not their sealed webhook secrets)."""
        c = application_table.c
        query = select(c.name, c.retention_days).where(c.retention_days.is_not(None))
        with translate_errors(), self.store.db.connect() as conn:
            return {name: float(days) for name, days in conn.execute(query)}

    def purge_batch(
        self,
        status: str,
        after: tuple[int, int],
        before_ms: int,
        limit: int,
        cutoffs: Mapping[str, int],
        default_cutoff_ms: int,
    ) -> PurgeBatch:
        """Read up to `limit` alarms of `status` finished before `before_ms`, in
        (next_try_time, id) order strictly after the position `after`, then delete those
        past their application's cutoff.

        The read is a range of the (status, next_try_time) index, whose entries end in the
        id, so the order is the index's own and each read starts where the last one stopped
        instead of walking again the rows it kept. It is a plain read, which locks nothing,
        and it answers one row: how many it read, the ids of those past their cutoff as one
        string, and the last position. Turning a thousand rows into Python objects took
        about 4 ms of the engine process's interpreter per batch, long enough to hold up a
        ring lane; one row takes a few microseconds.
        """
        _check(status, limit)
        dialect = self.store.db.dialect
        due, params = _due(cutoffs, default_cutoff_ms, param_marker(dialect))
        from_ms, after_id = int(after[0]), int(after[1])
        # Without the hint MariaDB may read a small table by `status` alone and sort.
        hint = " FORCE INDEX (ix_clock_status_next_try_time)" if self.store.caps.index_hints else ""
        batch = (
            f"SELECT id, application, next_try_time FROM {_TABLE}{hint}"
            f" WHERE status = '{status}' AND next_try_time >= {from_ms}"
            f" AND next_try_time < {int(before_ms)}"
            f" AND (next_try_time > {from_ms} OR id > {after_id})"
            f" ORDER BY next_try_time, id LIMIT {int(limit)}"
        )
        ids_due = f"GROUP_CONCAT(CASE WHEN {due} THEN id END)"
        if dialect.name == "sqlite":  # its GROUP_CONCAT has no ORDER BY before 3.44
            read = (
                f"WITH batch AS ({batch}), last_read AS (SELECT next_try_time AS at_ms,"
                " id AS last_id FROM batch ORDER BY next_try_time DESC, id DESC LIMIT 1)"
                f" SELECT COUNT(*), {ids_due}, (SELECT at_ms FROM last_read),"
                " (SELECT last_id FROM last_read) FROM batch"
            )
        else:  # one pass over the batch: MariaDB reads a CTE again for each reference
            read = (
                f"SELECT COUNT(*), {ids_due}, MAX(next_try_time), SUBSTRING_INDEX("
                "GROUP_CONCAT(id ORDER BY next_try_time DESC, id DESC), ',', 1)"
                f" FROM ({batch}) AS batch"
            )
        with translate_errors(), self.store.db.connect() as conn:
            if dialect.name != "sqlite" and not conn.info.get("group_concat_max_len"):
                # MySQL 8 cuts GROUP_CONCAT at 1,024 bytes; once per pooled connection.
                conn.exec_driver_sql(f"SET SESSION group_concat_max_len = {_ID_LIST_BYTES}")
                conn.info["group_concat_max_len"] = _ID_LIST_BYTES
            count, ids, last_ms, last_id = conn.exec_driver_sql(read, params).one()
        if not count:
            return PurgeBatch(read=0, deleted=0, last=None)
        ids = str(ids or "")
        if not _ID_LIST.fullmatch(ids):
            raise ValueError(f"not a list of ids: {ids[:80]!r}")
        deleted = self._delete(status, ids, due, params) if ids else 0
        return PurgeBatch(read=int(count), deleted=deleted, last=(int(last_ms), int(last_id)))

    def _delete(self, status: str, ids: str, due: str, params: tuple[object, ...]) -> int:
        """Delete those of `ids` still of `status` and past their cutoff, then their events and
        counted increment ids, in one transaction: no history outlives its alarm, and none is
        lost while its alarm stays. The alarm first, as every writer of events locks it first.

        An id is never given out twice, as consumers deduplicate by it (the message_id).
        MariaDB and MySQL 8 keep their auto-increment counter, but SQLite numbers a new row
        after the largest id in the table: there the alarm with the largest id stays until
        a newer one is created.
        """
        newest = (
            f" AND id < (SELECT MAX(id) FROM {_TABLE})"
            if self.store.db.dialect.name == "sqlite"
            else ""
        )
        with translate_errors(), self.store.db.begin() as conn:
            result = conn.exec_driver_sql(
                f"DELETE FROM {_TABLE} WHERE id IN ({ids}) AND status = '{status}'"
                f" AND {due}{newest}",
                params,
            )
            if result.rowcount:
                for kept_with_alarm in (_EVENTS, _INCREMENTS):
                    conn.exec_driver_sql(
                        f"DELETE FROM {kept_with_alarm} WHERE alarm_id IN ({ids}) AND NOT EXISTS"
                        f" (SELECT 1 FROM {_TABLE} WHERE {_TABLE}.id = {kept_with_alarm}.alarm_id)"
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
        db = self.store.db
        with translate_errors(), db.begin() as conn:
            renewed = conn.execute(
                update(job_lease_table)
                .where(lease.name == name, or_(lease.until_ms < now_ms, lease.owner == owner))
                .values(owner=owner, until_ms=until_ms)
            )
            if renewed.rowcount == 1:
                return True
            added = conn.execute(
                insert(job_lease_table)
                .prefix_with("OR IGNORE" if db.dialect.name == "sqlite" else "IGNORE")
                .values(name=name, owner=owner, until_ms=until_ms)
            )
            return bool(added.rowcount == 1)

    def holder(self, name: str) -> tuple[str, int] | None:
        """(owner, until_ms) of job `name`'s lease, None if it never ran."""
        query = job_lease_table.select().where(job_lease_table.c.name == name)
        with translate_errors(), self.store.db.connect() as conn:
            row = conn.execute(query).first()
        return None if row is None else (row.owner, int(row.until_ms))


def _due(
    cutoffs: Mapping[str, int], default_ms: int, marker: str
) -> tuple[str, tuple[object, ...]]:
    """The condition that a row finished before its application's cutoff, and its parameters
    (the application names; the times are integers written into the statement)."""
    others = {name: int(at) for name, at in cutoffs.items() if int(at) != int(default_ms)}
    if not others:
        return f"next_try_time < {int(default_ms)}", ()
    whens = " ".join(f"WHEN {marker} THEN {at}" for at in others.values())
    return (
        f"next_try_time < CASE application {whens} ELSE {int(default_ms)} END",
        tuple(others),
    )


def _check(status: str, count: int) -> None:
    """The status is written into the statement, so only a finished status gets there."""
    if status not in FINISHED:
        raise ValueError(f"{status!r} is not a finished status")
    if count > MAX_ROWS:
        raise ValueError(f"at most {MAX_ROWS} rows per statement, not {count}")
