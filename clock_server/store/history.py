"""Reading an alarm's story: the events written (store.events) with those its row tells.

Two events are read from the alarm row rather than written: "created" (`create_time`, and
`created_by` for who) and "rung" (`rung_at`, and `retry_times` + 1 for the attempt). An
alarm rings at most once and is created once, so its row always holds them.
"""

from __future__ import annotations

from typing import Any

import orjson
from sqlalchemy import Row, and_, select

from clock_server.errors import NotFound
from clock_server.model import CREATED, ENGINE, RUNG, AlarmEvent
from clock_server.store.alarms import AlarmStore
from clock_server.store.schema import alarm_table, event_table
from clock_server.store.sql import translate_errors

# The most events one story reads from clock_event, the latest ones: only an alarm moved
# thousands of times has more.
MAX_EVENTS = 1_000
UNKNOWN = "unknown"  # who created an alarm before clock kept its history

_ALARM = alarm_table.c
_EVENT = event_table.c


class AlarmHistory:
    """Each alarm's events, oldest first."""

    def __init__(self, store: AlarmStore) -> None:
        self.store = store

    def events(self, application: str, business_id: str) -> list[AlarmEvent]:
        """The story of the alarm (application, business_id); NotFound if there is none."""
        alarm_query = select(
            _ALARM.id,
            _ALARM.status,
            _ALARM.target_ring_at,
            _ALARM.latest_ring_at,
            _ALARM.retry_times,
            _ALARM.rung_at,
            _ALARM.create_time,
            _ALARM.created_by,
        ).where(and_(_ALARM.application == application, _ALARM.business_id == business_id))
        with translate_errors(), self.store.db.connect() as conn:
            alarm = conn.execute(alarm_query).first()
            if alarm is None:
                raise NotFound(f"no alarm {application}/{business_id}")
            written = conn.execute(
                select(_EVENT.at_ms, _EVENT.kind, _EVENT.actor, _EVENT.detail)
                .where(_EVENT.alarm_id == alarm.id)
                .order_by(_EVENT.id.desc())
                .limit(MAX_EVENTS)
            ).all()
        events = [AlarmEvent(r.at_ms, r.kind, r.actor, orjson.loads(r.detail)) for r in written]
        events.reverse()
        return story(alarm, events, complete=len(events) < MAX_EVENTS)


def story(alarm: Row, written: list[AlarmEvent], complete: bool) -> list[AlarmEvent]:
    """`written` (oldest first) between the events `alarm`'s row tells: its creation, with
    the times it was created for when the whole history is at hand, and its ring."""
    created: dict[str, Any] = {}
    if complete:
        created = {"target_ring_at": alarm.target_ring_at, "latest_ring_at": alarm.latest_ring_at}
        for change in reversed(written):  # the oldest change tells what was there first
            if "from" in change.detail:
                created["target_ring_at"] = change.detail["from"]
            if "latest_ring_at_from" in change.detail:
                created["latest_ring_at"] = change.detail["latest_ring_at_from"]
    actor = alarm.created_by or UNKNOWN
    events = [AlarmEvent(alarm.create_time, CREATED, actor, created), *written]
    if alarm.status == RUNG and alarm.rung_at:
        events.append(AlarmEvent(alarm.rung_at, RUNG, ENGINE, {"attempt": alarm.retry_times + 1}))
    return events
