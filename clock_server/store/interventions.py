"""What an operator does to alarms besides the application's own calls: re-drive a dead or
expired alarm, and re-drive or cancel every alarm matching a filter.

A re-driven alarm is pending again with a fresh retry budget, due at the given moment (its
target moves there, and a cutoff keeps its distance from the target), as if created anew
with the same key, payload and id; its history keeps what came before.

A bulk action reads the matching ids with plain reads (store.alarm_search, in index order),
then changes each page of them in a short transaction that locks the rows by primary key
and re-checks their status, as a single cancel does. So it never holds many locks, a row
changed since the read is left alone, and a call cut short (by its time budget, or a lost
connection) is finished by the same call again: what it changed no longer matches.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import Connection, case, select, update

from clock_server.errors import Conflict, NotFound, ValidationError
from clock_server.model import (
    CANCELLED,
    DEAD,
    EXPIRED,
    PENDING,
    Alarm,
    AlarmFilter,
    BulkOutcome,
)
from clock_server.store.alarm_rows import alarm_from_row
from clock_server.store.alarm_search import BY_DUE, BY_KEY, order_of, search_query
from clock_server.store.alarms import AlarmStore
from clock_server.store.events import EventRow, cancelled, redriven, write_events
from clock_server.store.moves import mark_all_moved
from clock_server.store.row_locks import select_by_key, select_for_change
from clock_server.store.schema import alarm_table
from clock_server.store.sql import translate_errors

REDRIVABLE = (DEAD, EXPIRED)
PAGE_ROWS = 500  # per read and per transaction
_C = alarm_table.c
_CANDIDATE_COLUMNS = (_C.id, _C.business_id, _C.next_try_time)


class AlarmInterventions:
    """Re-drive one alarm; re-drive or cancel by filter, in pages."""

    def __init__(self, store: AlarmStore) -> None:
        self.store = store

    def redrive(
        self, application: str, business_id: str, due_ms: int, now_ms: int, *, actor: str
    ) -> Alarm:
        """Make a dead or expired alarm pending again, due at `due_ms`; Conflict naming its
        status otherwise (a re-drive already done answers Conflict "pending")."""
        with translate_errors(), self.store.db.begin() as conn:
            query = select_for_change(self.store.caps, application, business_id)
            found = conn.execute(query).first()
            if found is None:
                raise NotFound(f"no alarm {application}/{business_id}")
            if found.status not in REDRIVABLE:
                raise Conflict(
                    f"alarm is {found.status}: only dead or expired alarms can be re-driven",
                    status=found.status,
                )
            _redrive_rows(conn, [(found.id, found.status)], due_ms, now_ms, actor)
            return alarm_from_row(conn.execute(select_by_key(application, business_id)).one())

    def bulk_redrive(
        self, where: AlarmFilter, due_ms: int, now_ms: int, actor: str, budget_s: float
    ) -> BulkOutcome:
        """Re-drive every dead or expired alarm matching `where` (its status, when it names
        one, must be dead or expired), due at `due_ms`, for at most about `budget_s`."""
        if where.status is not None and where.status not in REDRIVABLE:
            raise ValidationError(
                f"status must be dead or expired to re-drive, not {where.status}", field="status"
            )
        statuses = (where.status,) if where.status else REDRIVABLE

        def change(conn: Connection, rows: list[tuple[int, str]]) -> None:
            _redrive_rows(conn, rows, due_ms, now_ms, actor)

        return self._in_pages(where, statuses, change, budget_s)

    def bulk_cancel(
        self, where: AlarmFilter, now_ms: int, actor: str, budget_s: float
    ) -> BulkOutcome:
        """Cancel every pending alarm matching `where` (a status, if named, must be pending)."""
        if where.status not in (None, PENDING):
            raise ValidationError(
                f"status must be pending to cancel, not {where.status}", field="status"
            )

        def change(conn: Connection, rows: list[tuple[int, str]]) -> None:
            ids = [alarm_id for alarm_id, _status in rows]
            conn.execute(
                update(alarm_table)
                .where(_C.id.in_(ids))
                .values(
                    status=CANCELLED,
                    next_try_time=now_ms,  # finished now, as a single cancel
                    update_time=now_ms,
                    version=_C.version + 1,
                )
            )
            write_events(conn, [cancelled(alarm_id, now_ms, actor) for alarm_id in ids])

        return self._in_pages(where, (PENDING,), change, budget_s)

    def _in_pages(
        self,
        where: AlarmFilter,
        statuses: Sequence[str],
        change: Any,
        budget_s: float,
    ) -> BulkOutcome:
        stop_at = time.monotonic() + budget_s
        changed: Counter[str] = Counter()
        for status in statuses:
            one = replace(where, status=status)
            # By due time unless a prefix asks for keys: (application, status, next_try_time)
            # serves it, and rows this action changes leave the status it reads.
            order = BY_KEY if order_of(one) == BY_KEY else BY_DUE
            after: tuple[Any, ...] | None = None
            while True:
                if time.monotonic() >= stop_at:
                    return BulkOutcome(changed.total(), False, dict(changed))
                with translate_errors(), self.store.db.connect() as conn:
                    page = conn.execute(
                        search_query(one, PAGE_ROWS, after, _CANDIDATE_COLUMNS, order)
                    ).all()
                if not page:
                    break
                last = page[-1]
                after = (last.business_id,) if order == BY_KEY else (last.next_try_time, last.id)
                changed.update(self._change_page([row.id for row in page], status, change))
                if len(page) < PAGE_ROWS:
                    break
        return BulkOutcome(changed.total(), True, dict(changed))

    def _change_page(self, ids: list[int], status: str, change: Any) -> list[str]:
        """Lock `ids` by primary key, keep those still of `status` and change them; the
        application of each one changed."""
        query = select(_C.id, _C.status, _C.application).where(_C.id.in_(ids), _C.status == status)
        if self.store.caps.row_locks:
            query = query.with_for_update()
        with translate_errors(), self.store.db.begin() as conn:
            found = conn.execute(query).all()
            if found:
                change(conn, [(row.id, row.status) for row in found])
        return [row.application for row in found]


def _redrive_rows(
    conn: Connection, rows: list[tuple[int, str]], due_ms: int, now_ms: int, actor: str
) -> None:
    """Pending again, due at `due_ms`, retries reset; a cutoff keeps its distance from the
    target. `rows` are (id, status) and locked by the caller."""
    ids = [alarm_id for alarm_id, _status in rows]
    window = _C.latest_ring_at - _C.target_ring_at
    conn.execute(
        update(alarm_table)
        .where(_C.id.in_(ids))
        .ordered_values(
            # First: MySQL assigns left to right, so later ones would see the new target.
            (_C.latest_ring_at, case((_C.latest_ring_at.is_(None), None), else_=window + due_ms)),
            (_C.target_ring_at, due_ms),
            (_C.next_try_time, due_ms),
            (_C.status, PENDING),
            (_C.retry_times, 0),
            (_C.redrives, _C.redrives + 1),
            (_C.rung_at, 0),
            (_C.claimed_by, 0),
            (_C.version, _C.version + 1),
            (_C.update_time, now_ms),
        )
    )
    mark_all_moved(conn, due_ms)
    events: list[EventRow] = [
        redriven(alarm_id, now_ms, actor, status, due_ms) for alarm_id, status in rows
    ]
    write_events(conn, events)
