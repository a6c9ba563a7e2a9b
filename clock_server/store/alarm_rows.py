"""Alarms as rows: the values an insert writes, and the Alarm read back from a row."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from sqlalchemy import Row

from clock_server.model import PENDING, Alarm, NewAlarm
from clock_server.slot_space import slot_of


def alarm_from_row(row: Row) -> Alarm:
    return Alarm(
        id=row.id,
        application=row.application,
        business_id=row.business_id,
        payload=row.payload,
        target_ring_at=row.target_ring_at,
        latest_ring_at=row.latest_ring_at,
        next_try_time=row.next_try_time,
        retry_times=row.retry_times,
        status=row.status,
        rung_at=row.rung_at or None,  # 0 until it rings (store.schema)
        created_at=row.create_time,
        updated_at=row.update_time,
        ring_after_count=row.ring_after_count,
        count=row.counted,
    )


# Keeps one INSERT well under MariaDB's max_allowed_packet (16 MiB by default) and SQLite's
# 32,766 parameters, whatever the payloads and CLOCK_BATCH_MAX_ITEMS.
_PAGE_BYTES = 1_000_000
_PAGE_ROWS = 1_000
_ROW_OVERHEAD_BYTES = 256


def pages(rows: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    page: list[dict[str, Any]] = []
    size = 0
    for row in rows:
        row_size = _ROW_OVERHEAD_BYTES + 4 * (len(row["payload"]) + len(row["business_id"]))
        if page and (size + row_size > _PAGE_BYTES or len(page) == _PAGE_ROWS):
            yield page
            page, size = [], 0
        page.append(row)
        size += row_size
    if page:
        yield page


def insert_values(new: NewAlarm, now_ms: int) -> dict[str, Any]:
    return {
        "application": new.application,
        "business_id": new.business_id,
        "payload": new.payload,
        "target_ring_at": new.target_ring_at,
        "latest_ring_at": new.latest_ring_at,
        "next_try_time": new.target_ring_at,
        "retry_times": 0,
        "status": PENDING,
        "version": 0,
        "create_time": now_ms,
        "update_time": now_ms,
        "created_by": new.created_by,
        "ring_after_count": new.ring_after_count,
        "slot": slot_of(new.application, new.business_id),
    }


def alarm_from_values(alarm_id: int, values: dict[str, Any]) -> Alarm:
    return Alarm(
        id=alarm_id,
        application=values["application"],
        business_id=values["business_id"],
        payload=values["payload"],
        target_ring_at=values["target_ring_at"],
        latest_ring_at=values["latest_ring_at"],
        next_try_time=values["next_try_time"],
        retry_times=0,
        status=PENDING,
        rung_at=None,
        created_at=values["create_time"],
        updated_at=values["update_time"],
        ring_after_count=values["ring_after_count"],
    )


def matches(alarm: Alarm, values: dict[str, Any]) -> bool:
    return (
        alarm.created_at == values["create_time"]
        and alarm.payload == values["payload"]
        and alarm.target_ring_at == values["target_ring_at"]
    )
