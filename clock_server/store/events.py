"""Each alarm's history: the events written in the transaction of the change they record.

What the alarm row already tells is never written here: its creation (`create_time`,
`created_by`) and its ring (`rung_at`, and `retry_times` for the attempt); store.history
derives those when the story is read. So a ring on the first attempt, the common case,
writes nothing, and a ring batch writes its failed attempts, expiries and deaths together,
as one multi-row INSERT at the end of its transaction (`RingEvents`).

Every writer holds the alarm's row lock before it writes the alarm's events, and the purge
deletes the alarm before its events: one lock order for all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import orjson
from sqlalchemy import Connection, Row, delete, select

from clock_server.model import (
    ATTEMPT_FAILED,
    CANCELLED,
    CHANGED,
    DEAD,
    ENGINE,
    EXPIRED,
    MOVED,
    NOT_CONFIRMED,
    REDRIVEN,
    AlarmChanges,
    RingRow,
)
from clock_server.store.schema import event_table
from clock_server.store.sql import param_marker

_ERROR_CHARS = 500
# The most change events (moved, changed) one alarm keeps: each PATCH past it deletes the
# oldest, so a pending alarm moved without end holds a bounded history. As many as a story
# reads (store.history.MAX_EVENTS), so a trimmed story reads as incomplete, as it is.
MAX_CHANGE_EVENTS = 1_000


class EventRow(NamedTuple):
    """One row of clock_event to insert, in the order of its columns."""

    alarm_id: int
    at_ms: int
    kind: str
    actor: str
    detail: str  # a JSON object


def event(alarm_id: int, at_ms: int, kind: str, actor: str, **detail: Any) -> EventRow:
    """An event to write; details that are None are left out."""
    known = {key: value for key, value in detail.items() if value is not None}
    return EventRow(int(alarm_id), int(at_ms), kind, actor, orjson.dumps(known).decode())


def write_events(conn: Connection, events: Sequence[EventRow]) -> None:
    """Insert `events`, in order, in one executemany whose VALUES holds placeholders only:
    PyMySQL sends that as one multi-row INSERT (a single literal there would make it one
    statement per row)."""
    if not events:
        return
    marker = param_marker(conn.dialect)
    statement = (
        f"INSERT INTO {event_table.name} (alarm_id, at_ms, kind, actor, detail)"
        f" VALUES ({', '.join([marker] * len(EventRow._fields))})"
    )
    conn.exec_driver_sql(statement, list(events))


def cancelled(alarm_id: int, at_ms: int, actor: str) -> EventRow:
    return event(alarm_id, at_ms, CANCELLED, actor)


def changed(before: Row, changes: AlarmChanges, at_ms: int, actor: str) -> EventRow | None:
    """The event of a PATCH of the alarm `before` it: MOVED when its target changes (from,
    to), else CHANGED when its cutoff or payload does; None when nothing changes."""
    detail: dict[str, Any] = {}
    target = changes.target_ring_at
    if target is not None and target != before.target_ring_at:
        detail.update({"from": before.target_ring_at, "to": target})
    if changes.set_latest_ring_at and changes.latest_ring_at != before.latest_ring_at:
        # Kept when None: a cutoff removed, or one set where there was none.
        detail["latest_ring_at_from"] = before.latest_ring_at
        detail["latest_ring_at_to"] = changes.latest_ring_at
    if changes.payload is not None and changes.payload != before.payload:
        detail["payload_changed"] = True
    if not detail:
        return None
    kind = MOVED if "to" in detail else CHANGED
    return EventRow(before.id, at_ms, kind, actor, orjson.dumps(detail).decode())


def keep_room_for_a_change(conn: Connection, alarm_id: int) -> None:
    """Delete the alarm's oldest change events beyond MAX_CHANGE_EVENTS - 1, before a new one
    is written: it then keeps the latest MAX_CHANGE_EVENTS. The caller holds its row lock."""
    c = event_table.c
    changes = (c.alarm_id == alarm_id, c.kind.in_((MOVED, CHANGED)))
    oldest_kept = conn.execute(
        select(c.id).where(*changes).order_by(c.id.desc()).offset(MAX_CHANGE_EVENTS - 2).limit(1)
    ).scalar()
    if oldest_kept is not None:
        conn.execute(delete(event_table).where(*changes, c.id < oldest_kept))


def redriven(alarm_id: int, at_ms: int, actor: str, from_status: str, due_at_ms: int) -> EventRow:
    """A dead or expired alarm made pending again, due at `due_at_ms` with a fresh retry
    budget: for the re-drive to write with `write_events` in its own transaction."""
    return event(alarm_id, at_ms, REDRIVEN, actor, from_status=from_status, due_at=due_at_ms)


class RingEvents:
    """A ring batch's events, gathered while its outcomes are recorded and written at the
    end of its transaction in one statement (none when every alarm rang).

    The attempt numbers come from the rows the batch locked, which `row_of` looks up by id;
    only an outcome that needs one looks.
    """

    def __init__(self, row_of: Callable[[int], RingRow | None]) -> None:
        self._row = row_of
        self._events: list[EventRow] = []

    def expired(self, ids: Sequence[int], now_ms: int) -> None:
        for alarm_id in ids:
            row = self._row(alarm_id)
            self._events.append(
                event(
                    alarm_id,
                    now_ms,
                    EXPIRED,
                    ENGINE,
                    latest_ring_at=row.latest_ring_at if row else None,
                    attempts=row.retry_times if row else None,
                )
            )

    def failed(
        self, retries: Sequence[tuple[int, int]], now_ms: int, error: str = NOT_CONFIRMED
    ) -> None:
        """Each (id, next_try_time): a failed attempt, tried again then."""
        for alarm_id, retry_at in retries:
            self._events.append(self._failure(alarm_id, now_ms, error, retry_at))

    def dead(self, ids: Sequence[int], now_ms: int, error: str = NOT_CONFIRMED) -> None:
        """The last attempt failed: that attempt, then the death."""
        for alarm_id in ids:
            row = self._row(alarm_id)
            attempts = row.retry_times + 1 if row else None
            self._events.append(self._failure(alarm_id, now_ms, error, None))
            self._events.append(
                event(alarm_id, now_ms, DEAD, ENGINE, attempts=attempts, error=error[:_ERROR_CHARS])
            )

    def write(self, conn: Connection) -> None:
        write_events(conn, self._events)
        self._events = []

    def _failure(self, alarm_id: int, now_ms: int, error: str, retry_at: int | None) -> EventRow:
        row = self._row(alarm_id)
        return event(
            alarm_id,
            now_ms,
            ATTEMPT_FAILED,
            ENGINE,
            attempt=row.retry_times + 1 if row else None,
            error=error[:_ERROR_CHARS],
            retry_at=retry_at,
        )
