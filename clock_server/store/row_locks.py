"""Cancel versus ring: the two sides take the same row lock, so one always sees the other.

A cancel or PATCH locks its alarm's row by key (`select_for_change`), checks the status and
commits. A ring lane locks the rows of its batch by id (`lock_ring_rows_sql`) and keeps those
locks until it has published and recorded each outcome. Whichever comes second waits for the
first to commit and then sees its result: the ring skips a row that is no longer pending or
whose version moved (cancelled, moved or re-claimed), and a cancel after a ring answers 409.
So a cancel that answered 200 is never followed by a ring.

SQLite has no row locks; its writers take the whole file at BEGIN IMMEDIATE (store.db), which
serializes the two sides just the same.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Select, and_, select

from clock_server.model import PENDING
from clock_server.store.db import Capabilities
from clock_server.store.schema import ALARM_COLUMNS, alarm_table
from clock_server.store.sql import id_list

# Read under the ring lock, in this order (RingRow's fields, then the version to check).
RING_COLUMNS = (
    "id, application, business_id, payload, target_ring_at, latest_ring_at, retry_times,"
    " ring_after_count, counted, redrives, version"
)


def select_by_key(application: str, business_id: str) -> Select:  # type: ignore[type-arg]
    return select(*ALARM_COLUMNS).where(
        and_(alarm_table.c.application == application, alarm_table.c.business_id == business_id)
    )


def select_for_change(caps: Capabilities, application: str, business_id: str) -> Select:  # type: ignore[type-arg]
    """The row a cancel or PATCH is about to change, locked until its transaction ends."""
    query = select_by_key(application, business_id)
    return query.with_for_update() if caps.row_locks else query


def lock_ring_rows_sql(
    caps: Capabilities, ids: Sequence[int], status: str = PENDING, skip_locked: bool = False
) -> str:
    """The rows among `ids` in `status` (pending for a ring batch; delivering for the outcome
    of a webhook call), locked; with `skip_locked`, passing over those another transaction
    holds, where the database can.

    Written out, with the ids inlined, rather than built with select(): expanding a bound IN
    list of 1,000 ids and wrapping each row cost more than the database's own work. By the
    primary key: on a small table MariaDB reads `status = 'pending'` from its index instead,
    and a locking read then locks every pending row, so ring lanes, cancels and claims of
    other alarms waited for this batch to end.
    """
    by_id = " FORCE INDEX (PRIMARY)" if caps.index_hints else ""
    lock = " FOR UPDATE" if caps.row_locks else ""
    if skip_locked and caps.skip_locked:
        lock += " SKIP LOCKED"
    return (
        f"SELECT {RING_COLUMNS} FROM {alarm_table.name}{by_id} WHERE id IN ({id_list(ids)})"
        f" AND status = '{status}'{lock}"
    )
