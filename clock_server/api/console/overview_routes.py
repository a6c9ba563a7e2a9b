"""GET /v1/overview: what the console's overview page shows, for a token of every
application (an admin token, or a read-only one)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify

from clock_server.api.access import current_grant
from clock_server.api.health_gauges import count_beating
from clock_server.api.routes import services
from clock_server.api.services import Services
from clock_server.errors import Forbidden, Unavailable
from clock_server.minute_stats import (
    BUCKETS,
    LATENESS_BOUNDS_MS,
    MINUTE_MS,
    MinuteCounts,
    minute_of,
    quantile,
)
from clock_server.slot_space import SLOTS
from clock_server.store.minute_stats import SqlMinuteStats
from clock_server.store.overview import Overview, OverviewReader

overview = Blueprint("overview", __name__)

DUE_WINDOWS_MS = (60_000, 300_000, 900_000)
LATENESS_WINDOW_MS = 300_000
# Each count reads at most this many index entries: about 100 ms of MariaDB for the page at
# any table size (bench.console).
COUNT_CAP = 10_000
APPLICATION_COUNT_CAP = 1_000


@overview.get("/v1/overview")
def get_overview() -> Response:
    grant = current_grant()
    if grant is not None and not grant.is_admin:
        raise Forbidden("only a token of every application ('*') may read the overview")
    svc = services()
    now_ms = svc.clock.now_ms()
    reader = OverviewReader(svc.store, cap=COUNT_CAP, application_cap=APPLICATION_COUNT_CAP)
    found = reader.read(now_ms, DUE_WINDOWS_MS, LATENESS_WINDOW_MS)
    return jsonify(
        {
            "now": now_ms,
            "count_cap": reader.cap,
            "application_count_cap": reader.application_cap,
            **_counts_json(found),
            "lateness": _engine_lateness(svc, now_ms),
            "health": _health(svc, now_ms),
        }
    )


def _counts_json(found: Overview) -> dict[str, Any]:
    late = found.pull_ack
    return {
        "by_status": {status: count.to_json() for status, count in found.by_status.items()},
        "overdue": found.overdue.to_json(),
        "due": [
            {"within_ms": window, **count.to_json()} for window, count in found.due_within.items()
        ],
        "by_application": [
            {"application": name, **{status: c.to_json() for status, c in counts.items()}}
            for name, counts in found.by_application.items()
        ],
        "pull_ack": {
            "window_ms": late.window_ms,
            "sample": late.sample,
            "p50_ms": late.p50_ms,
            "p99_ms": late.p99_ms,
            "max_ms": late.max_ms,
        },
    }


def _engine_lateness(svc: Services, now_ms: int) -> dict[str, Any]:
    """The engine's lateness over the last LATENESS_WINDOW_MS, the current minute included,
    from every process's per-minute statistics."""
    to_ms = minute_of(now_ms) + MINUTE_MS
    rows = SqlMinuteStats(svc.store).read(to_ms - LATENESS_WINDOW_MS, to_ms)
    merged = MinuteCounts()
    for row in rows:
        merged.add(row.counts)
    counts = merged.lateness
    highest = max((i for i, count in enumerate(counts) if count), default=None)
    top = None if highest is None else LATENESS_BOUNDS_MS[min(highest, BUCKETS - 2)]
    return {
        "window_ms": LATENESS_WINDOW_MS,
        "sample": sum(counts),
        "p50_ms": _rounded(quantile(0.5, counts)),
        "p99_ms": _rounded(quantile(0.99, counts)),
        "max_ms": None if top is None else float(top),
        "over_max": highest == BUCKETS - 1,
    }


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def _health(svc: Services, now_ms: int) -> dict[str, Any]:
    broker = "disabled"
    if svc.publisher is not None:
        broker = "ok" if svc.publisher.is_healthy() else "down"
    try:
        engines = svc.engines.live_engines()
    except Unavailable:
        return {"database": "down", "broker": broker, "live_engines": None, "engines": []}
    silent_before_ms = now_ms - int(svc.settings.engine_dead_after_s * 1000)
    return {
        "database": "ok",
        "broker": broker,
        "live_engines": count_beating(engines, silent_before_ms),
        "engines": [
            {
                "instance_id": engine.instance_id,
                "started_at": engine.started_at,
                "heartbeat_at": engine.heartbeat_at,
                "beating": engine.heartbeat_at >= silent_before_ms,
                "slot_from": engine.slot_from,
                "slot_to": engine.slot_to,
                "share": round(max(engine.slot_to - engine.slot_from, 0) / SLOTS, 4),
            }
            for engine in engines
        ],
    }
