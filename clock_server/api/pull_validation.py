"""The bodies of the pull channel's routes (api/pull_routes) validated, or a 400 that names
the field."""

from __future__ import annotations

from typing import Annotated, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticError

from clock_server.api.answers.messages import AlarmId
from clock_server.errors import ValidationError

MAX_MESSAGES = 100  # the most messages one pull leases
MAX_WAIT_S = 20.0  # the longest a pull waits for a message
MAX_ACK_IDS = 1_000


class PullBody(BaseModel):
    """POST .../pull: how many messages at most, and how long to wait for the first."""

    model_config = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)
    max: Annotated[int, Field(ge=1, le=MAX_MESSAGES)] = 10
    wait_s: Annotated[
        float,
        Field(ge=0, le=MAX_WAIT_S, description="how long to wait for a message when none is ready"),
    ] = 0.0


class AckBody(BaseModel):
    """POST .../ack: the ids of the messages handled."""

    model_config = ConfigDict(strict=True, extra="forbid")
    ids: Annotated[list[AlarmId], Field(min_length=1, max_length=MAX_ACK_IDS)]


Body = TypeVar("Body", bound=BaseModel)


def validated(model: type[Body], data: dict[str, Any]) -> Body:
    """`data` as `model`, or a 400 naming the first field at fault."""
    try:
        return model.model_validate(data)
    except PydanticError as error:
        first = error.errors(include_url=False)[0]
        field = ".".join(str(part) for part in first["loc"]) or None
        message = f"{field}: {first['msg']}" if field else first["msg"]
        raise ValidationError(message, field=field) from None
