"""The pull channel on SQL: an application's pullers lease its ready messages and ack them.

A ring batch hands a pull application's due alarm off (store.claims `hand_off`): the row
becomes `delivering`, nobody's (`claimed_by` = 0), ready from its `next_try_time`. A lease
moves `next_try_time` to the end of the lease, so the message is hidden from other pullers
until then and comes back if it is not acked by then; `retry_times` counts the leases handed
out. Webhook calls are `delivering` too, but keep their engine in `claimed_by`: they are never
read here.

A lease finds each row's fate under its row lock, as a ring batch does (`pull_fate`): past
its cutoff it expires, with its leases spent it is dead, otherwise it is leased (again), its
last lease's failure recorded first if nobody recorded it yet. The sweep (store.pull_sweep)
finds them the same way when no puller comes: it finishes the expired and the dead
(`finish_lapsed`) and records the failed leases (`failed_lease_events`), leaving those
messages ready for the next pull. An ack makes the row rung, whether or not its lease has
ended.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import orjson
from sqlalchemy import Connection, text

from clock_server.model import (
    ATTEMPT_FAILED,
    DEAD,
    DELIVERING,
    ENGINE,
    EXPIRED,
    RUNG,
    RingRow,
    ring_message,
)
from clock_server.store.alarms import AlarmStore
from clock_server.store.dead_letters import DeadLetterRows
from clock_server.store.events import EventRow, event, write_events
from clock_server.store.row_locks import RING_COLUMNS
from clock_server.store.schema import alarm_table
from clock_server.store.sql import chunks, id_list, translate_errors

NOT_ACKED = "not acknowledged within the visibility timeout"

_TABLE = alarm_table.name
# What a message's entry in a pull's answer adds to its body: its id, attempt, lease end.
MESSAGE_OVERHEAD_BYTES = 100
_ID_CHUNK = 1_000
_MAX_ID = 2**63 - 1


@dataclass(frozen=True, slots=True)
class RetryLimits:
    """How many leases may end unacked: a message left unacked after `max_retries` + 1
    leases is dead, as an alarm whose publish failed `max_retries` + 1 times is."""

    max_retries: int


class LeasedMessage(NamedTuple):
    """A message leased to a puller until `leased_until` (epoch ms); `attempt` counts the
    leases of its alarm, this one included; `body` is the message, as every channel sends it."""

    alarm_id: int
    attempt: int
    leased_until: int
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Leased:
    """What one lease did: the messages leased, earliest ready first, and how many alarms
    it found past their cutoff (expired), with their leases spent (dead) or with a lease
    ended unacked and leased again (retried), by application."""

    messages: list[LeasedMessage] = field(default_factory=list)
    expired: dict[str, int] = field(default_factory=dict)
    dead: dict[str, int] = field(default_factory=dict)
    retried: dict[str, int] = field(default_factory=dict)


LEASE = "lease"
RETRY = "retry"
# What a pull or the sweep reads of a ready row besides RING_COLUMNS, to tell whether the
# failure of its last lease was recorded (`failure_unrecorded`).
LEASE_COLUMNS = "next_try_time, update_time"


def failure_unrecorded(retry_times: int, next_try_time: int, update_time: int) -> bool:
    """Whether a ready row's last lease ended unacked with its failure not recorded yet. A
    lease writes update_time at its start and next_try_time at its end, at least a second
    later; recording the failure (the sweep) writes update_time at or after that end."""
    return retry_times >= 1 and update_time < next_try_time


def pull_fate(row: RingRow, now_ms: int, retry: RetryLimits, unrecorded: bool) -> str:
    """What a ready pull message (delivering, nobody's, its lease if any ended) found at
    `now_ms` becomes: EXPIRED past its cutoff, DEAD once `retry.max_retries` + 1 leases
    ended unacked, RETRY when its last lease ended unacked and that failure is `unrecorded`
    (recorded, then leased by a pull or left ready by the sweep), else LEASE."""
    if row.latest_ring_at is not None and row.latest_ring_at < now_ms:
        return EXPIRED
    if row.retry_times > retry.max_retries:
        return DEAD
    return RETRY if unrecorded else LEASE


def failed_lease_events(rows: list[RingRow], now_ms: int) -> list[EventRow]:
    """The `attempt_failed` event of each row whose last lease ended unacked, ready again
    at `now_ms`."""
    return [
        event(row.id, now_ms, ATTEMPT_FAILED, ENGINE,
              attempt=row.retry_times, error=NOT_ACKED, retry_at=now_ms)
        for row in rows
    ]  # fmt: skip


def finish_lapsed(
    conn: Connection,
    expired: list[RingRow],
    dead: list[RingRow],
    now_ms: int,
    dead_letters: bool,
) -> None:
    """Mark the locked `expired` and `dead` rows so, with their history events, and with
    `dead_letters` a dead letter for each dead one, in the caller's transaction."""
    events: list[EventRow] = []
    for row in expired:
        events.append(
            event(row.id, now_ms, EXPIRED, ENGINE,
                  latest_ring_at=row.latest_ring_at, attempts=row.retry_times)
        )  # fmt: skip
    for row in dead:
        events.append(
            event(row.id, now_ms, ATTEMPT_FAILED, ENGINE,
                  attempt=row.retry_times, error=NOT_ACKED)
        )  # fmt: skip
        events.append(
            event(row.id, now_ms, DEAD, ENGINE, attempts=row.retry_times, error=NOT_ACKED)
        )
    _finish(conn, [row.id for row in expired], EXPIRED, now_ms)
    _finish(conn, [row.id for row in dead], DEAD, now_ms)
    write_events(conn, events)
    if dead and dead_letters:
        _write_dead_letters(conn, dead, now_ms)


def by_application(rows: list[RingRow]) -> dict[str, int]:
    """How many of `rows` each application has."""
    counts: dict[str, int] = {}
    for row in rows:
        counts[row.application] = counts.get(row.application, 0) + 1
    return counts


class SqlPullQueue:
    """Each pull application's ready messages, leased with SKIP LOCKED and acked by id.

    With `dead_letters`, a message that dies also gets a dead letter (store.dead_letters),
    written in the lease's transaction, for the relay to publish.
    """

    def __init__(self, store: AlarmStore, dead_letters: bool) -> None:
        self.store = store
        self.dead_letters = dead_letters

    def lease(
        self,
        application: str,
        limit: int,
        now_ms: int,
        visibility_ms: int,
        retry: RetryLimits,
        max_bytes: int | None = None,
    ) -> Leased:
        """Lease up to `limit` of `application`'s ready messages (delivering, nobody's, with
        next_try_time <= now_ms), earliest first, until now_ms + visibility_ms, in one
        transaction; with `max_bytes`, only as many as fit it as JSON (at least one): the
        rest stay ready, untouched, for the next pull. Rows past their latest_ring_at
        expire instead, and rows whose retry_times (leases already handed out, all ended
        unacked) exceed `retry.max_retries` die; each writes its events. Rows another
        puller holds locked are skipped."""
        caps = self.store.caps
        lock = caps.skip_locked_suffix
        hint = " FORCE INDEX (ix_clock_application_due)" if caps.index_hints else ""
        query = text(
            f"SELECT {RING_COLUMNS}, {LEASE_COLUMNS} FROM {_TABLE}{hint}"
            f" WHERE application = :application AND status = '{DELIVERING}'"
            f" AND next_try_time <= {int(now_ms)} AND claimed_by = 0"
            f" ORDER BY next_try_time LIMIT {int(limit)}{lock}"
        )
        with translate_errors(), self.store.db.begin() as conn:
            found = conn.execute(query, {"application": application}).all()
            # the version (row[10]) is not needed
            rows = [(RingRow._make(row[:10]), failure_unrecorded(row[6], *row[11:13]))
                    for row in found]  # fmt: skip
            if not rows:
                return Leased()
            return self._settle(conn, rows, now_ms, now_ms + visibility_ms, retry, max_bytes)

    def ack(self, application: str, ids: Sequence[int], now_ms: int) -> tuple[list[int], list[int]]:
        """Mark rung, at now_ms, those of `ids` that are `application`'s pull messages still
        delivering, leased or not; returns (acked, not acked), each in the order given, each
        id once. Any other id (unknown, another application's, already rung, expired, dead)
        is not acked and changes nothing."""
        wanted = list(dict.fromkeys(int(alarm_id) for alarm_id in ids))
        in_range = [alarm_id for alarm_id in wanted if 0 < alarm_id <= _MAX_ID]
        caps = self.store.caps
        by_id = " FORCE INDEX (PRIMARY)" if caps.index_hints else ""
        lock = " FOR UPDATE" if caps.row_locks else ""
        found: set[int] = set()
        with translate_errors(), self.store.db.begin() as conn:
            for chunk in chunks(sorted(in_range), _ID_CHUNK):
                locked = conn.execute(
                    text(
                        f"SELECT id FROM {_TABLE}{by_id} WHERE id IN ({id_list(chunk)})"
                        f" AND application = :application AND status = '{DELIVERING}'"
                        f" AND claimed_by = 0{lock}"
                    ),
                    {"application": application},
                ).all()
                ids_locked = [row[0] for row in locked]
                if ids_locked:
                    # retry_times back to the failed leases before the one acked, as a ring
                    # leaves it: the history reads the rung attempt as retry_times + 1.
                    conn.exec_driver_sql(
                        f"UPDATE {_TABLE} SET status = '{RUNG}', rung_at = {int(now_ms)},"
                        f" next_try_time = {int(now_ms)}, update_time = {int(now_ms)},"
                        f" version = version + 1,"
                        f" retry_times = CASE WHEN retry_times > 0 THEN retry_times - 1 ELSE 0 END"
                        f" WHERE id IN ({id_list(ids_locked)})"
                    )
                found.update(ids_locked)
        acked = [alarm_id for alarm_id in wanted if alarm_id in found]
        return acked, [alarm_id for alarm_id in wanted if alarm_id not in found]

    def _settle(
        self,
        conn: Connection,
        rows: list[tuple[RingRow, bool]],
        now_ms: int,
        leased_until: int,
        retry: RetryLimits,
        max_bytes: int | None = None,
    ) -> Leased:
        """Expire, kill or lease each of the locked `rows` (with whether their last lease's
        failure is unrecorded), with their events, until the messages leased would pass
        `max_bytes`."""
        retried: list[RingRow] = []
        leased: list[RingRow] = []
        expired: list[RingRow] = []
        dead: list[RingRow] = []
        messages: list[LeasedMessage] = []
        size = 0
        for row, unrecorded in rows:
            fate = pull_fate(row, now_ms, retry, unrecorded)
            if fate == EXPIRED:
                expired.append(row)
            elif fate == DEAD:
                dead.append(row)
            else:
                message = LeasedMessage(
                    row.id, row.retry_times + 1, leased_until, ring_message(row, now_ms)
                )
                if max_bytes is not None:
                    size += len(orjson.dumps(message.body)) + MESSAGE_OVERHEAD_BYTES
                    if messages and size > max_bytes:
                        break  # this row and the rest stay ready for the next pull
                messages.append(message)
                leased.append(row)
                if fate == RETRY:
                    retried.append(row)
        finish_lapsed(conn, expired, dead, now_ms, self.dead_letters)
        for chunk in chunks([row.id for row in leased], _ID_CHUNK):
            conn.exec_driver_sql(
                f"UPDATE {_TABLE} SET next_try_time = {int(leased_until)},"
                f" retry_times = retry_times + 1, version = version + 1,"
                f" update_time = {int(now_ms)} WHERE id IN ({id_list(chunk)})"
            )
        write_events(conn, failed_lease_events(retried, now_ms))
        return Leased(
            messages=messages,
            expired=by_application(expired),
            dead=by_application(dead),
            retried=by_application(retried),
        )


def _finish(conn: Connection, ids: list[int], status: str, now_ms: int) -> None:
    """A final status; next_try_time = now_ms, the order finished alarms are read in."""
    for chunk in chunks(ids, _ID_CHUNK):
        conn.exec_driver_sql(
            f"UPDATE {_TABLE} SET status = '{status}', version = version + 1,"
            f" next_try_time = {int(now_ms)}, update_time = {int(now_ms)}"
            f" WHERE id IN ({id_list(chunk)})"
        )


def _write_dead_letters(conn: Connection, dead: list[RingRow], now_ms: int) -> None:
    # DeadLetterRows counts a ring batch's row's failed tries plus the last one; here
    # the last lease is among retry_times already.
    before_last = {row.id: row._replace(retry_times=row.retry_times - 1) for row in dead}
    letters = DeadLetterRows(before_last.get)
    letters.dead(list(before_last), now_ms, NOT_ACKED)
    letters.write(conn)
