"""Recurring schedules in the database, and the planner's transaction that makes their
occurrences alarms.

An occurrence is an ordinary alarm of the `clock` table, under the key
`occurrences.occurrence_key(schedule_id, at)`: it rings through the application's channel
with its retries, cutoff and history. Making it is an INSERT IGNORE of that key, in the
transaction that moves the schedule's `next_at` past it, so an occurrence is made once
however often, and by however many servers, the planner runs.

A change of the schedule (a replace, a PATCH, pausing it, deleting it) deletes, in its own
transaction, the occurrences made ahead and not yet due (pending, target after now): the
planner makes them again from the schedule as it now is. An occurrence due already, or
being rung, is not touched: the ring holds its row's lock, and a row no longer pending is
not deleted, so the new calendar's INSERT IGNORE of the same key leaves it as it was. That
is why an occurrence never rings twice, across a schedule's own update too.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from sqlalchemy import (
    Connection,
    Row,
    Select,
    and_,
    bindparam,
    delete,
    exc,
    false,
    insert,
    select,
    text,
    tuple_,
    update,
)

from clock_server.errors import NotFound
from clock_server.model import PENDING, NewAlarm
from clock_server.occurrences import (
    Schedule,
    occurrence_key,
    occurrences_prefix,
    plan,
)
from clock_server.store.alarm_rows import insert_values
from clock_server.store.alarms import AlarmStore
from clock_server.store.ports import Planned
from clock_server.store.schema import alarm_table, event_table, schedule_table
from clock_server.store.sql import translate_errors

log = logging.getLogger(__name__)

CREATED_BY = "schedule"  # the actor of an occurrence's "created" event
UNPLANNABLE_RETRY_MS = 60_000  # a schedule whose calendar raised is looked at again then
_S = schedule_table.c


def _schedule(row: Row[Any]) -> Schedule:
    return Schedule(
        application=row.application,
        schedule_id=row.schedule_id,
        cron=row.cron,
        every_s=row.every_s,
        timezone=row.timezone,
        payload=row.payload,
        start_at=row.start_at,
        end_at=row.end_at,
        cutoff_ms=row.cutoff_ms,
        catch_up=row.catch_up,
        catch_up_max=row.catch_up_max,
        paused=bool(row.paused),
        next_at=row.next_at,
        version=row.version,
        created_at=row.create_time,
        updated_at=row.update_time,
    )


def _values(schedule: Schedule) -> dict[str, Any]:
    return {
        "cron": schedule.cron,
        "every_s": schedule.every_s,
        "timezone": schedule.timezone,
        "payload": schedule.payload,
        "start_at": schedule.start_at,
        "end_at": schedule.end_at,
        "cutoff_ms": schedule.cutoff_ms,
        "catch_up": schedule.catch_up,
        "catch_up_max": schedule.catch_up_max,
        "paused": schedule.paused,
        "next_at": schedule.next_at,
    }


def _occurrence_rows(schedule: Schedule, times: Sequence[int], now_ms: int) -> list[dict[str, Any]]:
    """The rows of the alarms of `schedule`'s occurrences at `times`."""
    return [
        insert_values(
            NewAlarm(
                schedule.application,
                occurrence_key(schedule.schedule_id, at_ms),
                schedule.payload,
                at_ms,
                None if schedule.cutoff_ms is None else at_ms + schedule.cutoff_ms,
                created_by=CREATED_BY,
            ),
            now_ms,
        )
        for at_ms in times
    ]


def _by_application(
    moved: list[tuple[str, str, int | None]],
) -> dict[str, dict[str, int | None]]:
    """Each schedule's new next_at, by application: one UPDATE of each application's."""
    found: dict[str, dict[str, int | None]] = {}
    for application, schedule_id, next_at in moved:
        found.setdefault(application, {})[schedule_id] = next_at
    return found


def _move_next_at(application: str, next_at: dict[str, int | None]) -> tuple[Any, dict[str, Any]]:
    """One UPDATE setting each schedule's next_at, `CASE schedule_id WHEN ... END`, written as
    text: SQLAlchemy's case() of 200 schedules took an eighth of a planner pass to build."""
    params: dict[str, Any] = {"application": application}
    whens, names = [], []
    for i, (schedule_id, at_ms) in enumerate(next_at.items()):
        params[f"s{i}"], params[f"n{i}"] = schedule_id, at_ms
        whens.append(f"WHEN :s{i} THEN :n{i}")
        names.append(f":s{i}")
    sql = (
        f"UPDATE {schedule_table.name} SET next_at = CASE schedule_id {' '.join(whens)} END "
        f"WHERE application = :application AND schedule_id IN ({', '.join(names)})"
    )
    return text(sql), params


def _calendar_and_carriage(schedule: Schedule) -> dict[str, Any]:
    """What a change may change: every stored field but `next_at`."""
    values = _values(schedule)
    del values["next_at"]
    return values


def first_due_after(schedule: Schedule, now_ms: int) -> int | None:
    """The schedule's first occurrence not yet due at `now_ms`."""
    found = schedule.calendar.after(now_ms, 1)
    return found[0] if found else None


class SqlSchedules:
    """Create, read, change and delete schedules; `plan` makes their occurrences alarms."""

    def __init__(self, alarms: AlarmStore) -> None:
        self.alarms = alarms
        self.db = alarms.db
        self._due_queries: dict[int, Select[Any]] = {}

    def _due_query(self, limit: int) -> Select[Any]:
        """The planner's read, built once: it runs five times a second, mostly finding
        nothing, and building it cost more than the database's answer."""
        query = self._due_queries.get(limit)
        if query is None:
            caps = self.alarms.caps
            query = (
                select(schedule_table)
                .where(
                    _S.paused == false(),
                    _S.next_at.is_not(None),
                    _S.next_at <= bindparam("horizon_ms"),
                )
                .order_by(_S.next_at)
                .limit(limit)
            )
            if caps.row_locks:
                query = query.with_for_update(skip_locked=caps.skip_locked)
            self._due_queries[limit] = query
        return query

    def get(self, application: str, schedule_id: str) -> Schedule:
        with translate_errors(), self.db.connect() as conn:
            row = conn.execute(self._by_key(application, schedule_id)).first()
        if row is None:
            raise NotFound(f"no schedule {application}/{schedule_id}")
        return _schedule(row)

    def list(
        self, application: str | None, after: tuple[str, str] | None, limit: int
    ) -> list[Schedule]:
        """Schedules in (application, schedule_id) order after `after`."""
        query = select(schedule_table)
        if application is not None:
            query = query.where(_S.application == application)
        if after is not None:
            query = query.where(tuple_(_S.application, _S.schedule_id) > tuple_(*after))
        query = query.order_by(_S.application, _S.schedule_id).limit(limit)
        with translate_errors(), self.db.connect() as conn:
            return [_schedule(row) for row in conn.execute(query)]

    def change(
        self,
        application: str,
        schedule_id: str,
        now_ms: int,
        make: Callable[[Schedule | None], Schedule],
    ) -> tuple[Schedule, bool]:
        """Create or change the schedule under its row's lock: `make` is given the stored one
        (None if there is none) and returns the schedule as it is to be. Its occurrences from
        now on are made again; True when it was created. Two creates of one new schedule at
        once: the second is a change of the first's."""
        try:
            return self._change(application, schedule_id, now_ms, make)
        except exc.IntegrityError:  # created meanwhile: its row exists now, and is locked
            return self._change(application, schedule_id, now_ms, make)

    def _change(
        self,
        application: str,
        schedule_id: str,
        now_ms: int,
        make: Callable[[Schedule | None], Schedule],
    ) -> tuple[Schedule, bool]:
        with translate_errors(), self.db.begin() as conn:
            row = conn.execute(self._by_key(application, schedule_id).with_for_update()).first()
            stored = None if row is None else _schedule(row)
            wanted = make(stored)
            if stored is not None and _calendar_and_carriage(wanted) == _calendar_and_carriage(
                stored
            ):
                return stored, False  # the same schedule sent again: nothing to make again
            wanted = replace(
                wanted,
                next_at=None if wanted.paused else first_due_after(wanted, now_ms),
                created_at=now_ms if stored is None else stored.created_at,
                updated_at=now_ms,
                version=0 if stored is None else stored.version + 1,
            )
            if stored is None:
                conn.execute(
                    insert(schedule_table).values(
                        application=application,
                        schedule_id=schedule_id,
                        version=0,
                        create_time=now_ms,
                        update_time=now_ms,
                        **_values(wanted),
                    )
                )
            else:
                self._forget_ahead(conn, application, schedule_id, now_ms)
                conn.execute(
                    update(schedule_table)
                    .where(_S.application == application, _S.schedule_id == schedule_id)
                    .values(version=wanted.version, update_time=now_ms, **_values(wanted))
                )
            return wanted, stored is None

    def update(
        self,
        application: str,
        schedule_id: str,
        now_ms: int,
        change: Callable[[Schedule], Schedule],
    ) -> Schedule:
        """`change` as the stored schedule is, under its row's lock; NotFound if there is
        none (before `change` is asked)."""

        def existing(stored: Schedule | None) -> Schedule:
            if stored is None:
                raise NotFound(f"no schedule {application}/{schedule_id}")
            return change(stored)

        return self.change(application, schedule_id, now_ms, existing)[0]

    def delete(self, application: str, schedule_id: str, now_ms: int) -> Schedule:
        """Delete the schedule and its occurrences not yet due; NotFound if there is none."""
        with translate_errors(), self.db.begin() as conn:
            row = conn.execute(self._by_key(application, schedule_id).with_for_update()).first()
            if row is None:
                raise NotFound(f"no schedule {application}/{schedule_id}")
            self._forget_ahead(conn, application, schedule_id, now_ms)
            conn.execute(
                delete(schedule_table).where(
                    _S.application == application, _S.schedule_id == schedule_id
                )
            )
            return _schedule(row)

    def plan(self, now_ms: int, ahead_ms: int, limit: int = 200) -> Planned:
        """Make alarms of the occurrences due within `ahead_ms` of the (at most `limit`)
        schedules whose next one is, each schedule's rows locked while it is planned (passed
        over while another server plans it)."""
        query = self._due_query(limit)
        made: list[dict[str, Any]] = []
        moved: list[tuple[str, str, int | None]] = []
        earliest = None
        with translate_errors(), self.db.begin() as conn:
            rows = conn.execute(query, {"horizon_ms": now_ms + ahead_ms}).all()
            for row in rows:
                schedule = _schedule(row)
                try:
                    step = plan(
                        schedule.calendar,
                        schedule.next_at,
                        now_ms,
                        ahead_ms,
                        schedule.catch_up,
                        schedule.catch_up_max,
                    )
                except Exception:  # one schedule's calendar never stops the others'
                    log.exception(
                        "could not plan schedule %s/%s; tried again in a minute",
                        schedule.application,
                        schedule.schedule_id,
                        extra={"action": "schedule_unplannable",
                               "application": schedule.application},
                    )  # fmt: skip
                    retry_at = now_ms + ahead_ms + UNPLANNABLE_RETRY_MS
                    moved.append((row.application, row.schedule_id, retry_at))
                    continue
                if step.skipped_missed:
                    log.warning(
                        "schedule %s/%s missed occurrences before %d (catch_up %s)",
                        schedule.application,
                        schedule.schedule_id,
                        step.make[0] if step.make else now_ms,
                        schedule.catch_up,
                        extra={"action": "schedule_missed", "application": schedule.application},
                    )
                made += _occurrence_rows(schedule, step.make, now_ms)
                moved.append((row.application, row.schedule_id, step.next_at))
                if step.make:
                    earliest = step.make[0] if earliest is None else min(earliest, step.make[0])
            if made:  # one multi-row INSERT IGNORE for the whole pass
                ignore = "OR IGNORE" if self.db.dialect.name == "sqlite" else "IGNORE"
                conn.execute(insert(alarm_table).prefix_with(ignore), made)
            for application, next_at in _by_application(moved).items():
                conn.execute(*_move_next_at(application, next_at))
        return Planned(len(made), earliest, len(rows), Counter(r["application"] for r in made))

    def _forget_ahead(
        self, conn: Connection, application: str, schedule_id: str, now_ms: int
    ) -> int:
        """Delete the occurrences made ahead and not yet due, with their events."""
        ahead = and_(
            alarm_table.c.application == application,
            alarm_table.c.business_id.startswith(occurrences_prefix(schedule_id), autoescape=True),
            alarm_table.c.status == PENDING,
            alarm_table.c.target_ring_at > now_ms,
        )
        ids = [row.id for row in conn.execute(select(alarm_table.c.id).where(ahead))]
        if not ids:
            return 0
        conn.execute(delete(event_table).where(event_table.c.alarm_id.in_(ids)))
        conn.execute(delete(alarm_table).where(alarm_table.c.id.in_(ids), ahead))
        return len(ids)

    @staticmethod
    def _by_key(application: str, schedule_id: str) -> Any:
        return select(schedule_table).where(
            _S.application == application, _S.schedule_id == schedule_id
        )
