"""Error answers: `{"error": {...}}`, as api/http_errors writes them."""

from __future__ import annotations

from typing import Annotated, Literal, NotRequired

from pydantic import Field
from typing_extensions import TypedDict

from clock_server.api.answers.common import Channel, Status


class ErrorDetail(TypedDict):
    """What went wrong: a stable `code`, a message for people, and the field at fault."""

    code: str
    message: str
    field: str | None
    status: NotRequired[Annotated[Status, Field(description="409: the alarm's status")]]
    retry_after_s: NotRequired[
        Annotated[int, Field(ge=1, description="429 rate_limited: whole seconds, as Retry-After")]
    ]


class Error(TypedDict):
    error: ErrorDetail


class ChannelConflictDetail(TypedDict):
    code: Literal["conflict"]
    message: str
    field: str | None
    status: Annotated[Channel, Field(description="the channel the application takes")]


class ChannelConflict(TypedDict):
    """409 of the pull channel's routes: the application takes another channel."""

    error: ChannelConflictDetail
