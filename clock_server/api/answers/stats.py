"""What GET /v1/stats answers (api/stats_routes)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field
from typing_extensions import TypedDict

from clock_server.api.answers.common import Count, EpochMs

LatenessMs = Annotated[
    float | None,
    Field(description="the engine's lateness, from the merged buckets; null: nothing rang"),
]


class Minute(TypedDict):
    """One minute of one series; zeros and null percentiles when nothing happened."""

    minute: EpochMs
    created: Count
    rung: Count
    failed: Annotated[int, Field(ge=0, description="dead, expired and failed delivery attempts")]
    creates_per_s: float
    rings_per_s: float
    lateness_p50_ms: LatenessMs
    lateness_p99_ms: LatenessMs


# "from" is a keyword: the functional form of TypedDict.
Stats = TypedDict(
    "Stats",
    {
        "minute_ms": int,
        "from": Annotated[EpochMs, Field(description="start of the first minute")],
        "to": Annotated[EpochMs, Field(description="end of the last (current, partial) minute")],
        "applications": Annotated[
            list[str],
            Field(description="those with a series of their own: at most 20, the busiest"),
        ],
        "left_out": Annotated[
            int,
            Field(
                ge=0,
                description="applications with statistics in the window but no series of "
                "their own (counted in the total); ask for one by `application`",
            ),
        ],
        "series": Annotated[
            dict[str, list[Minute]],
            Field(description='by application, and "*": the total over every application'),
        ],
    },
)
