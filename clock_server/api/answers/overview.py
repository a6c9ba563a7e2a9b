"""What GET /v1/overview answers (api/console/overview_routes)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field
from typing_extensions import TypedDict

from clock_server.api.answers.common import Count, EpochMs
from clock_server.api.answers.health import Broker, UpDown


class CappedCount(TypedDict):
    count: Count
    capped: Annotated[bool, Field(description="true: at least `count`; counting stopped")]


class ByStatus(TypedDict):
    pending: CappedCount
    delivering: CappedCount
    rung: CappedCount
    cancelled: CappedCount
    expired: CappedCount
    dead: CappedCount


class DueCount(TypedDict):
    """Pending, due from now to now + within_ms."""

    within_ms: int
    count: Count
    capped: Annotated[bool, Field(description="true: at least `count`; counting stopped")]


class ApplicationOverview(TypedDict):
    application: str
    pending: CappedCount
    dead: CappedCount


class Lateness(TypedDict):
    """The engine's lateness (due time to published, start of the webhook call answered 2xx,
    or pull hand-off) over the last window_ms, from the per-minute statistics: percentiles
    from the merged buckets, max_ms the upper bound of the highest bucket counted; over_max:
    some rings were later than max_ms, the last bucket's bound, which the percentiles then
    stop at."""

    window_ms: int
    sample: Count
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    over_max: bool


class PullAck(TypedDict):
    """rung_at - target_ring_at of the latest rings of pull applications within window_ms:
    from due to the pull consumer's ack."""

    window_ms: int
    sample: Count
    p50_ms: int | None
    p99_ms: int | None
    max_ms: int | None


class EngineState(TypedDict):
    instance_id: str
    started_at: int
    heartbeat_at: int
    beating: bool
    slot_from: Annotated[int, Field(description="the first of the slots it owned at its last beat")]
    slot_to: Annotated[int, Field(description="the end of those slots, not included")]
    share: Annotated[
        float, Field(description="those slots' fraction of all 1,024: its share of the work")
    ]


class OverviewHealth(TypedDict):
    database: UpDown
    broker: Broker
    live_engines: int | None
    engines: list[EngineState]


class Overview(TypedDict):
    """What the console's overview shows."""

    now: EpochMs
    count_cap: Annotated[int, Field(description="where a count by status stops")]
    application_count_cap: Annotated[
        int, Field(description="where a count of one application stops")
    ]
    by_status: ByStatus
    overdue: Annotated[CappedCount, Field(description="pending, due before now")]
    due: list[DueCount]
    by_application: list[ApplicationOverview]
    lateness: Lateness
    pull_ack: PullAck
    health: OverviewHealth
