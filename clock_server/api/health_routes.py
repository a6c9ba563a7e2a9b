"""The probes: /livez (restart the process if not), /readyz (send it alarms), /healthz (each
part, for people and alerts). A broker outage is never a reason to restart a server: it
makes /healthz say "degraded", and nothing else."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, cast

from flask import Blueprint, Response, jsonify

from clock_server.api.answers.health import (
    Broker,
    ChannelStates,
    Health,
    HealthStatus,
    Live,
    LoopState,
    Ready,
    UpDown,
)
from clock_server.api.routes import services
from clock_server.api.services import Services
from clock_server.errors import Unavailable
from clock_server.model import AMQP, CHANNELS

OK: Final = "ok"
DOWN: Final = "down"
DISABLED: Final = "disabled"  # this process runs no engine, and so publishes nothing
STALLED: Final = "stalled"
DEGRADED: Final = "degraded"
UNAVAILABLE: Final = "unavailable"

health = Blueprint("health", __name__)


@health.get("/livez")
def livez() -> tuple[Response, int]:
    """The process answers, and each of the engine's loops has stepped or been waiting within
    Settings.loop_stall_ms; asks neither the database nor the broker. A process with no engine
    in it or beside it has no loops, and is alive when it answers."""
    svc = services()
    beats = svc.loops.loop_beats() if svc.loops is not None else {}
    loops = loop_states(beats, svc.clock.now_ms(), svc.settings.loop_stall_ms)
    stalled = [name for name, state in loops.items() if state == STALLED]
    body = Live(status=STALLED if stalled else OK, loops=loops, stalled=stalled)
    return jsonify(body), 503 if stalled else 200


@health.get("/readyz")
def readyz() -> tuple[Response, int]:
    """The process can accept and store alarms: the database answers a trivial query."""
    database = database_state(services())
    body = Ready(status=OK if database == OK else UNAVAILABLE, database=database)
    return jsonify(body), 200 if database == OK else 503


@health.get("/healthz")
def healthz() -> tuple[Response, int]:
    """Each part: 503 "unavailable" only when the database is down (nothing can be stored);
    200 "degraded" when the broker or a channel in use is, since alarms are still taken and
    kept, and wait for it."""
    svc = services()
    database = database_state(svc)
    broker: Broker = (
        DISABLED if svc.publisher is None else OK if svc.publisher.is_healthy() else DOWN
    )
    channels = channel_states(channels_in_use(svc) if database == OK else [], broker)
    if database == DOWN:
        status: HealthStatus = UNAVAILABLE
    elif broker == DOWN or DOWN in channels.values():
        status = DEGRADED
    else:
        status = OK
    body = Health(status=status, database=database, broker=broker, channels=channels)
    return jsonify(body), 503 if status == UNAVAILABLE else 200


def loop_states(
    beats: Mapping[str, int | None], now_ms: int, stall_ms: int
) -> dict[str, LoopState]:
    """Each loop "ok", or "stalled" once `now_ms` is more than `stall_ms` past the moment
    until which it was known to be well (or it never was)."""
    return {
        name: OK if beat is not None and now_ms - beat <= stall_ms else STALLED
        for name, beat in beats.items()
    }


def database_state(svc: Services) -> UpDown:
    try:
        svc.store.ping()
    except Unavailable:
        return DOWN
    return OK


def channels_in_use(svc: Services) -> list[str]:
    """The channels of the registered applications (the registry as cached), in CHANNELS
    order."""
    try:
        used = {policy.channel for policy in svc.policies.all()}
    except Unavailable:
        return []
    return [channel for channel in CHANNELS if channel in used]


def channel_states(channels: list[str], broker: Broker) -> ChannelStates:
    """AMQP is as the broker is; webhook and pull need nothing of clock's but the database
    (reported on its own): a receiver that fails spends its alarm's attempts, and clock is
    not the worse for it."""
    return cast(ChannelStates, {channel: broker if channel == AMQP else OK for channel in channels})
