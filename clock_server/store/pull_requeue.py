"""Pull messages left behind when their application moves to another channel.

A ring batch hands a pull application's due alarms to its pullers (`delivering`, nobody's:
store.pulls). Once the application takes the AMQP or webhook channel instead, its pullers get
409 and the engine claims only pending alarms, so those messages would wait forever. They go
back to the ring path here: pending again, due now, or at the end of a lease still running
(its puller may still be working on it; an ack after this finds nothing to ack, and the
message rings again on the new channel under the same id, as at-least-once allows).
"""

from __future__ import annotations

from sqlalchemy import Connection, select, text

from clock_server.model import DELIVERING, ENGINE, PENDING, PULL, REQUEUED
from clock_server.store.alarms import AlarmStore
from clock_server.store.events import event, write_events
from clock_server.store.moves import mark_all_moved
from clock_server.store.schema import alarm_table, application_table
from clock_server.store.sql import id_list, translate_errors

_TABLE = alarm_table.name


class SqlPullRequeue:
    """Puts the pull messages of applications no longer on the pull channel back to pending."""

    def __init__(self, store: AlarmStore, batch: int = 1_000) -> None:
        self.store = store
        self.batch = batch

    def requeue_left_pull(self, now_ms: int) -> dict[str, int]:
        """Requeue, up to `batch` per application and transaction, the messages still
        waiting for pullers of every application on another channel; returns how many, by
        application. Each application is one index lookup, so the many with none cost little."""
        with translate_errors(), self.store.db.connect() as conn:
            names = conn.execute(
                select(application_table.c.name).where(application_table.c.channel != PULL)
            ).scalars()
            applications = list(names)
        requeued: dict[str, int] = {}
        for application in applications:
            while True:
                with translate_errors(), self.store.db.begin() as conn:
                    count = self._requeue(conn, application, now_ms)
                if count:
                    requeued[application] = requeued.get(application, 0) + count
                if count < self.batch:
                    break
        return requeued

    def _requeue(self, conn: Connection, application: str, now_ms: int) -> int:
        caps = self.store.caps
        lock = caps.skip_locked_suffix
        hint = " FORCE INDEX (ix_clock_application_due)" if caps.index_hints else ""
        rows = conn.execute(
            text(
                f"SELECT id, next_try_time FROM {_TABLE}{hint}"
                f" WHERE application = :application AND status = '{DELIVERING}'"
                f" AND claimed_by = 0 LIMIT {int(self.batch)}{lock}"
            ),
            {"application": application},
        ).all()
        if not rows:
            return 0
        ids = [row[0] for row in rows]
        now = int(now_ms)
        conn.exec_driver_sql(
            f"UPDATE {_TABLE} SET status = '{PENDING}', version = version + 1,"
            f" next_try_time = CASE WHEN next_try_time < {now} THEN {now} ELSE next_try_time END,"
            f" update_time = {now} WHERE id IN ({id_list(ids)})"
        )
        mark_all_moved(conn, now)
        write_events(
            conn,
            [
                event(alarm_id, now, REQUEUED, ENGINE, from_channel=PULL, due_at=max(at, now))
                for alarm_id, at in rows
            ],
        )
        return len(ids)
