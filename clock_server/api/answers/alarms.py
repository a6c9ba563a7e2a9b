"""What the alarm routes answer: the alarm (model.Alarm.to_json), its history, a page, a
batch's results, a count, a bulk action's outcome, and what a token may do."""

from __future__ import annotations

from typing import Annotated, Literal, NotRequired

from pydantic import Field
from typing_extensions import TypedDict

from clock_server.api.answers.common import Channel, Count, EpochMs, Status
from clock_server.api.answers.errors import ErrorDetail
from clock_server.model import EVENT_KINDS

EpochMsOrNull = Annotated[int | None, Field(description="epoch ms; null: no cutoff")]


class Alarm(TypedDict):
    """A stored alarm."""

    id: int
    application: str
    business_id: str
    payload: str
    target_ring_at: EpochMs
    latest_ring_at: Annotated[int | None, Field(description="epoch ms cutoff")]
    next_try_time: Annotated[
        int,
        Field(
            description="epoch ms of the next try; while an engine holds the alarm, the end "
            "of its claim"
        ),
    ]
    retry_times: int
    status: Status
    rung_at: Annotated[int | None, Field(description="epoch ms of the publish")]
    created_at: int
    updated_at: int
    ring_after_count: Annotated[
        int | None,
        Field(
            description="a count-triggered alarm rings once this many were counted, or at "
            "target_ring_at (its deadline), whichever comes first; null: by time only"
        ),
    ]
    count: Annotated[int, Field(description="counted so far (POST .../count)")]


# "from" is a keyword: the functional form.
EventDetail = TypedDict(
    "EventDetail",
    {
        "target_ring_at": EpochMs,
        "latest_ring_at": EpochMsOrNull,
        "from": EpochMs,
        "to": EpochMs,
        "latest_ring_at_from": EpochMsOrNull,
        "latest_ring_at_to": EpochMsOrNull,
        "payload_changed": bool,
        "attempt": Annotated[int, Field(ge=1)],
        "attempts": Count,
        "error": str,
        "retry_at": EpochMs,
        "from_status": Status,
        "count": int,
        "ring_after_count": int,
        "due_at": EpochMs,
        "from_channel": Channel,
    },
    total=False,
)


class AlarmEvent(TypedDict):
    """One step of an alarm's history."""

    at: EpochMs
    kind: Annotated[str, Field(json_schema_extra={"enum": list(EVENT_KINDS)})]
    actor: Annotated[
        str,
        Field(
            description="who: the application whose token was used, 'admin' (an admin "
            "token), 'anonymous' (a server without tokens), 'clock' (the engine), or "
            "'unknown' (created before the server kept histories); never a token"
        ),
    ]
    detail: Annotated[
        EventDetail,
        Field(
            description="by kind: created (target_ring_at, latest_ring_at); moved (from, "
            "to, and those of changed that the same PATCH changed); changed, a PATCH that "
            "kept the target (latest_ring_at_from, latest_ring_at_to, payload_changed); "
            "attempt_failed (attempt, error, retry_at unless it was the last); rung "
            "(attempt); expired (latest_ring_at, attempts); dead (attempts, error); "
            "redriven (from_status, due_at); count_reached (count, ring_after_count); "
            "requeued, its application left the pull channel (from_channel, due_at)"
        ),
    ]


class AlarmEvents(TypedDict):
    events: list[AlarmEvent]


class AlarmPage(TypedDict):
    alarms: list[Alarm]
    next_cursor: Annotated[
        str | None, Field(description="pass it as cursor for the next page; null: the last")
    ]


class BatchResult(TypedDict):
    """One item's result: the alarm (201, 200) or the error (any other status)."""

    status: Annotated[int, Field(json_schema_extra={"enum": [200, 201, 400, 403, 413, 429]})]
    alarm: NotRequired[Alarm]
    error: NotRequired[ErrorDetail]


class BatchResults(TypedDict):
    results: Annotated[list[BatchResult], Field(description="one per item, in order")]


class Counted(TypedDict):
    alarm: Alarm
    counted: Annotated[bool, Field(description="false: a repeated increment_id")]
    reached: Annotated[
        bool, Field(description="this count reached ring_after_count: the alarm rings now")
    ]


class BulkOutcome(TypedDict):
    changed: Annotated[int, Field(ge=0, description="alarms this call changed")]
    done: Annotated[
        bool,
        Field(description="false: the call stopped at its time budget; send it again to go on"),
    ]


class Whoami(TypedDict):
    """What the caller's token may do (never the token)."""

    authenticated: bool
    applications: Annotated[Literal["*"] | list[str], Field(description="'*': every application")]
    read_only: bool
