"""What the registry routes answer: an application (its settings, whether it is registered,
its live counts), the list of them, and its webhook secret."""

from __future__ import annotations

from types import NoneType
from typing import Annotated, Any, get_args, get_origin

from pydantic import BaseModel, Field, create_model
from typing_extensions import TypedDict

from clock_server.api.answers.common import Channel, Count
from clock_server.api.application_validation import ApplicationSettings
from clock_server.model import APPLICATION_PATTERN

Name = Annotated[str, Field(pattern=APPLICATION_PATTERN)]


class ApplicationCounts(TypedDict):
    pending: Count
    due_next_minute: Annotated[
        int, Field(ge=0, description="pending, due from now to a minute ahead")
    ]
    overdue: Annotated[int, Field(ge=0, description="pending, due before now")]
    dead: Count


def _as_stored(setting: Any) -> Any:
    """A setting's type as an answer holds it: its bounds left out, since a value stored in
    single precision (MariaDB's float) reads back a little beside the one validated."""
    [kind] = [arg for arg in get_args(setting) if arg is not NoneType]
    return get_args(kind)[0] if get_origin(kind) is Annotated else kind


def _settings() -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for name, field in ApplicationSettings.model_fields.items():
        if name == "channel":  # null in a request means amqp; never null in an answer
            fields[name] = (Channel, Field(description="how its alarms reach it"))
        else:
            fields[name] = (
                _as_stored(field.annotation) | None,
                Field(description=field.description),
            )
    return fields


# A model that only describes: application_routes builds the answer from
# ApplicationPolicy.to_json, with the same keys.
Application: type[BaseModel] = create_model(
    "Application",
    __doc__="An application's settings (null: no limit, or the server's default), whether it "
    "is registered, and its live counts.",
    name=(Name, ...),
    **_settings(),
    webhook_secret_set=(
        bool,
        Field(description="whether a secret signs its webhooks (read it at .../webhook-secret)"),
    ),
    created_at=(int | None, Field(description="epoch ms; null when not registered")),
    updated_at=(int | None, ...),
    registered=(
        bool,
        Field(description="false: the application has alarms but no row in the registry"),
    ),
    counts=(ApplicationCounts | None, Field(description="null when asked with counts=false")),
)


class ApplicationList(TypedDict):
    applications: list[Application]  # type: ignore[valid-type]


class WebhookSecret(TypedDict):
    application: Name
    webhook_secret: Annotated[
        Annotated[str, Field(pattern="^whsec_")] | None,
        Field(
            description="signs the application's webhooks per the Standard Webhooks "
            "specification (base64 after whsec_); null before the application first took "
            "the webhook channel"
        ),
    ]
    previous_secret_signs_until: Annotated[
        int | None,
        Field(
            description="epoch ms until which the secret the last rotation replaced still "
            "signs beside this one; null when it no longer does"
        ),
    ]
