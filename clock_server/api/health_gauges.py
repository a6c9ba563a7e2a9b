"""The gauges of /metrics measured when Prometheus scrapes: the broker as /healthz sees it,
the database, how many engines beat in clock_engine, and each application's pending alarms."""

from __future__ import annotations

import math

from clock_server.api.services import Services
from clock_server.errors import Unavailable
from clock_server.model import EngineRecord


def record_health(svc: Services) -> None:
    """Set clock_broker_up, clock_database_up, clock_live_engines, clock_pending_alarms,
    clock_pull_messages_waiting and its oldest's age from `svc`, and this process's CPU and
    memory."""
    metrics = svc.metrics
    metrics.record_process(svc.process_kind)
    if svc.publisher is None:
        metrics.broker_up.set(math.nan)
    else:
        metrics.broker_up.set(1 if svc.publisher.is_healthy() else 0)
    now_ms = svc.clock.now_ms()
    try:
        engines = svc.engines.live_engines()
        pending = svc.pending_counts.get(now_ms, svc.applications.pending_counts)
        waiting = svc.pull_waiting.get(now_ms, lambda: svc.pull_backlog.waiting(now_ms))
    except Unavailable:
        metrics.database_up.set(0)
        metrics.live_engines.set(math.nan)
        return
    metrics.database_up.set(1)
    silent_before_ms = now_ms - int(svc.settings.engine_dead_after_s * 1000)
    metrics.live_engines.set(count_beating(engines, silent_before_ms))
    metrics.set_pending(pending)
    metrics.set_pull_waiting(waiting)


def count_beating(engines: list[EngineRecord], silent_before_ms: int) -> int:
    """Engines not declared dead whose last heartbeat is at or after `silent_before_ms`: a
    row left by a server that died while no other was running to declare it dead is not one."""
    return sum(1 for e in engines if e.dead_at is None and e.heartbeat_at >= silent_before_ms)
