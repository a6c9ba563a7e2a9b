"""An alarm's message, the same on every channel (model.ring_message), and what the pull
channel's routes answer (api/pull_routes)."""

from __future__ import annotations

from typing import Annotated, Literal, NotRequired

from pydantic import Field
from typing_extensions import TypedDict

from clock_server.api.answers.common import EpochMs

AlarmId = Annotated[str, Field(pattern=r"^[0-9]{1,19}$", description="an alarm id")]


class Message(TypedDict):
    """An alarm's message, the same on every channel: the AMQP body, the webhook's body, a
    pulled message."""

    id: Annotated[int, Field(description="the alarm's id, the same on every attempt")]
    application: str
    business_id: str
    payload: str
    target_ring_at: EpochMs
    attempt: Annotated[
        int, Field(ge=1, description="this attempt's number: a publish, a call, a lease")
    ]
    published_at: Annotated[
        int, Field(description="epoch ms: when this attempt was published, sent or leased")
    ]
    trigger: NotRequired[
        Annotated[
            Literal["count", "time"],
            Field(description="a count-triggered alarm only: what made it ring"),
        ]
    ]
    count: NotRequired[Annotated[int, Field(description="a count-triggered alarm only: its count")]]


class PulledMessage(TypedDict):
    id: AlarmId
    attempt: Annotated[int, Field(ge=1)]
    leased_until: Annotated[int, Field(description="epoch ms: unacked by then, it is leased again")]
    message: Message


class Pulled(TypedDict):
    messages: list[PulledMessage]


class Acked(TypedDict):
    acked: Annotated[list[AlarmId], Field(description="now rung")]
    not_acked: Annotated[
        list[AlarmId],
        Field(
            description="not this application's pull messages still delivering: unknown, "
            "or already rung, expired or dead; nothing changed"
        ),
    ]
