"""What the schedule routes answer: a schedule, a page of them, and a preview of the next
occurrences."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field
from typing_extensions import TypedDict

from clock_server.api.answers.common import EpochMs


class Schedule(TypedDict):
    """A stored schedule; its occurrences are alarms with business_id
    `~schedule/<schedule_id>/<time in UTC>`."""

    application: str
    schedule_id: str
    cron: str | None
    every_s: int | None
    timezone: str
    payload: str
    start_at: EpochMs
    end_at: Annotated[int | None, Field(description="epoch ms: no occurrence after it")]
    cutoff_ms: Annotated[int | None, Field(description="an occurrence's cutoff after its time")]
    catch_up: Literal["skip", "latest", "all"]
    catch_up_max: int
    paused: bool
    next_at: Annotated[
        int | None,
        Field(description="epoch ms of the first occurrence not made an alarm yet; null while "
              "paused or once ended"),
    ]  # fmt: skip
    created_at: EpochMs
    updated_at: EpochMs


class SchedulePage(TypedDict):
    schedules: list[Schedule]
    next_cursor: Annotated[str | None, Field(description="null on the last page")]


class Occurrence(TypedDict):
    at: EpochMs
    utc: Annotated[str, Field(description="ISO 8601, UTC")]
    local: Annotated[str, Field(description="ISO 8601 in the schedule's time zone, its offset")]


class Occurrences(TypedDict):
    schedule_id: str
    timezone: str
    paused: bool
    occurrences: list[Occurrence]
