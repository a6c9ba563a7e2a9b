"""Counting on a count-triggered alarm: POST /v1/alarms/{application}/{business_id}/count.

Each count locks the alarm's row, as a cancel does, so counts on one alarm take turns and the
ring path sees either the count before it or after it. The count that reaches
`ring_after_count` makes the alarm due now (it gives up any claim, as a PATCH that moves the
target does), and the ring path then publishes it before its target, its deadline
(RingRow.count_reached). After that, counting answers Conflict: exactly `ring_after_count`
counts lead to exactly one ring.

An `increment_id` is remembered in clock_count_increment with its alarm (and deleted with
it): a repeat counts nothing and answers the alarm as it is, whatever its status by then.
"""

from __future__ import annotations

from typing import NamedTuple

from sqlalchemy import Connection, insert, select, update

from clock_server.errors import Conflict, NotFound
from clock_server.model import COUNT_REACHED, PENDING, Alarm
from clock_server.store.alarm_rows import alarm_from_row
from clock_server.store.alarms import AlarmStore
from clock_server.store.events import event, write_events
from clock_server.store.moves import mark_moved
from clock_server.store.row_locks import select_by_key, select_for_change
from clock_server.store.schema import alarm_table, count_increment_table
from clock_server.store.sql import translate_errors

_C = alarm_table.c


class Counted(NamedTuple):
    """The alarm after a count; `counted` is False for a repeated increment_id; `reached`
    is True when this count reached ring_after_count (the alarm rings now)."""

    alarm: Alarm
    counted: bool
    reached: bool


class AlarmCounts:
    """Counts on count-triggered alarms."""

    def __init__(self, store: AlarmStore) -> None:
        self.store = store

    def count(
        self,
        application: str,
        business_id: str,
        increment_id: str | None,
        by: int,
        now_ms: int,
        *,
        actor: str,
    ) -> Counted:
        with translate_errors(), self.store.db.begin() as conn:
            query = select_for_change(self.store.caps, application, business_id)
            row = conn.execute(query).first()
            if row is None:
                raise NotFound(f"no alarm {application}/{business_id}")
            if row.ring_after_count is None:
                raise Conflict(
                    "this alarm was not created with ring_after_count", status=row.status
                )
            if increment_id is not None and self._seen(conn, row.id, increment_id):
                return Counted(alarm_from_row(row), counted=False, reached=False)
            if row.status != PENDING:
                raise Conflict(f"alarm is already {row.status}", status=row.status)
            if row.counted >= row.ring_after_count:
                raise Conflict(
                    f"its count already reached {row.ring_after_count}: it is ringing",
                    status=row.status,
                )
            if increment_id is not None:
                conn.execute(
                    insert(count_increment_table).values(
                        alarm_id=row.id, increment_id=increment_id, at_ms=now_ms
                    )
                )
            counted = row.counted + by
            values: dict[str, object] = {"counted": counted, "update_time": now_ms}
            reached = counted >= row.ring_after_count
            if reached:  # due now; a claim held for the target is given up
                values.update(next_try_time=now_ms, claimed_by=0, version=_C.version + 1)
                detail = {"count": counted, "ring_after_count": row.ring_after_count}
                write_events(conn, [event(row.id, now_ms, COUNT_REACHED, actor, **detail)])
            conn.execute(update(alarm_table).where(_C.id == row.id).values(values))
            if reached:
                mark_moved(conn, [(row.slot, now_ms)])
            alarm = alarm_from_row(conn.execute(select_by_key(application, business_id)).one())
            return Counted(alarm, counted=True, reached=reached)

    def _seen(self, conn: Connection, alarm_id: int, increment_id: str) -> bool:
        t = count_increment_table.c
        query = select(t.alarm_id).where(t.alarm_id == alarm_id, t.increment_id == increment_id)
        return conn.execute(query).first() is not None
