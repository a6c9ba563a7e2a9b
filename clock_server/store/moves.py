"""Telling engines that alarms of their slots became due earlier than they may have read.

An engine reads its slots' due alarms in order once and does not read them again
(engine.preloader). A change by anyone else that makes a pending alarm due sooner (a PATCH
of its target, a count reached, a re-drive, a requeue, a takeover) therefore marks the
engine owning its slot in `clock_engine`, in the same transaction; that engine reads its row
at its next preload pass and reads its slots again from the earliest such time.
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Connection

from clock_server.slot_space import SLOTS
from clock_server.store.schema import engine_table


def mark_all_moved(conn: Connection, due_ms: int) -> None:
    """`mark_moved` for alarms of any slot, due from `due_ms`: every engine reads again."""
    mark_moved(conn, [(0, due_ms), (SLOTS - 1, due_ms)])


def mark_moved(conn: Connection, moved: Iterable[tuple[int, int]]) -> None:
    """Within a transaction that made pending alarms due earlier than their engine may have
    read them (a change, a re-drive, a takeover), tell the engines owning their slots: each
    (slot, due_ms). Its engine reads its row at its next preload pass and reads its slots
    again from that due time. One UPDATE for all of them, over the slots they span."""
    marks = list(moved)
    if not marks:
        return
    low, high = min(slot for slot, _ in marks), max(slot for slot, _ in marks)
    earliest = int(min(due for _, due in marks))
    conn.exec_driver_sql(
        f"UPDATE {engine_table.name} SET moves = moves + 1, moved_from ="
        f" CASE WHEN moved_from IS NULL OR moved_from > {earliest} THEN {earliest}"
        " ELSE moved_from END"
        f" WHERE dead_at IS NULL AND slot_from <= {int(high)} AND slot_to > {int(low)}"
    )
