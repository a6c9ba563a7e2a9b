"""What the probes answer: GET /livez, /readyz and /healthz (api/health_routes)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import ConfigDict, Field
from typing_extensions import TypedDict

LoopState = Literal["ok", "stalled"]
UpDown = Literal["ok", "down"]
Broker = Literal["ok", "down", "disabled"]
HealthStatus = Literal["ok", "degraded", "unavailable"]


class Live(TypedDict):
    status: LoopState
    loops: Annotated[
        dict[str, LoopState],
        Field(
            description="each engine loop by thread name (clock-preload, clock-ring, "
            "clock-liveness, ...; engine-status: the engine process's status file, in a web "
            "process); empty in a process with no engine"
        ),
    ]
    stalled: list[str]


class Ready(TypedDict):
    status: Literal["ok", "unavailable"]
    database: UpDown


class ChannelStates(TypedDict, total=False):
    """The channels of the registered applications: amqp as the broker is, webhook and pull
    ok (empty while the database is down)."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]

    amqp: Broker
    webhook: Broker
    pull: Broker


class Health(TypedDict):
    status: HealthStatus
    database: UpDown
    broker: Broker
    channels: ChannelStates
