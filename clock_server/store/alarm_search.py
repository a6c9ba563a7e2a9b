"""Finding alarms by an AlarmFilter, in keyset pages: the search of GET /v1/alarms and the
selection of the bulk actions.

Each filter reads in the order of the index that serves it, so that a page costs about its
own rows however many alarms the table holds:
- a business_id prefix (with its application) in business_id order, on the
  (application, business_id) unique key;
- a due-time range in (next_try_time, id) order, on (application, status, next_try_time) or
  (status, next_try_time), one range per status when the filter names none;
- anything else in id order, on the primary key or (application, id).
A page's position is the last alarm's sort key (`position`), handed back as `after`.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, Select, and_, func, or_, select, union_all

from clock_server.model import STATUSES, Alarm, AlarmFilter
from clock_server.store.schema import ALARM_COLUMNS, alarm_table

BY_ID = "id"
BY_DUE = "due"
BY_KEY = "key"

_C = alarm_table.c


def order_of(where: AlarmFilter) -> str:
    """The order a search by `where` reads in (see the module doc)."""
    if where.business_id_prefix is not None:
        return BY_KEY
    if where.due_from is not None or where.due_to is not None:
        return BY_DUE
    return BY_ID


def position(order: str, alarm: Alarm) -> tuple[Any, ...]:
    """Where a page that ended with `alarm` stops, in `order`."""
    if order == BY_KEY:
        return (alarm.business_id,)
    if order == BY_DUE:
        return (alarm.next_try_time, alarm.id)
    return (alarm.id,)


def matching(where: AlarmFilter) -> list[ColumnElement[bool]]:
    """The SQL conditions of `where`."""
    conditions: list[ColumnElement[bool]] = []
    if where.application is not None:
        conditions.append(_C.application == where.application)
    if where.status is not None:
        conditions.append(_C.status == where.status)
    if where.business_id_prefix is not None:
        prefix = where.business_id_prefix
        conditions.append(_C.business_id.startswith(prefix, autoescape=True))
        # LIKE ignores case in SQLite; keys are case-sensitive everywhere.
        conditions.append(func.substr(_C.business_id, 1, len(prefix)) == prefix)
    if where.due_from is not None:
        conditions.append(_C.next_try_time >= where.due_from)
    if where.due_to is not None:
        conditions.append(_C.next_try_time < where.due_to)
    return conditions


def search_query(
    where: AlarmFilter,
    limit: int,
    after: tuple[Any, ...] | None,
    columns: tuple[Any, ...],
    order: str | None = None,
) -> Select[Any]:
    """Up to `limit` alarms matching `where` after the position `after`, as `columns`, in
    `order` (by default `order_of(where)`)."""
    order = order or order_of(where)
    conditions = matching(where)
    if order == BY_KEY:
        sort: tuple[Any, ...] = (_C.business_id,)
        if after is not None:
            conditions.append(_C.business_id > after[0])
    elif order == BY_DUE:
        sort = (_C.next_try_time, _C.id)
        if after is not None:
            due, last_id = after
            conditions.append(
                or_(_C.next_try_time > due, and_(_C.next_try_time == due, _C.id > last_id))
            )
    else:
        sort = (_C.id,)
        if after is not None:
            conditions.append(_C.id > after[0])
    if order == BY_DUE and where.status is None:
        return _each_status(conditions, limit, columns)
    return select(*columns).where(*conditions).order_by(*sort).limit(limit)


def _each_status(
    conditions: list[ColumnElement[bool]], limit: int, columns: tuple[Any, ...]
) -> Select[Any]:
    """A due-time search of every status: the first `limit` of each status, merged. Its
    indexes lead with the status, so one range per status reads `limit` entries at most,
    where a single range over every status would read the whole due range."""
    parts = [
        select(*columns)
        .where(*conditions, _C.status == status)
        .order_by(_C.next_try_time, _C.id)
        .limit(limit)
        .subquery()
        for status in STATUSES
    ]
    merged = union_all(*(select(*part.c) for part in parts)).subquery()
    return select(*merged.c).order_by(merged.c.next_try_time, merged.c.id).limit(limit)


def alarms_query(where: AlarmFilter, limit: int, after: tuple[Any, ...] | None) -> Select[Any]:
    return search_query(where, limit, after, ALARM_COLUMNS)
