"""The settings of an application (PUT and PATCH /v1/applications/{application}) validated,
or a 400 that names the field."""

from __future__ import annotations

from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticError

from clock_server.api import schema_rules
from clock_server.delivery.targets import check_target
from clock_server.errors import ValidationError
from clock_server.model import AMQP, MAX_EPOCH_MS, POLICY_FIELDS, WEBHOOK, ApplicationPolicy
from clock_server.setting_ranges import (
    DAYS,
    IN_FLIGHT,
    RETRY_SECONDS,
    VISIBILITY_S,
    WEBHOOK_TIMEOUT_S,
)

# The columns' ranges: INT for the bursts and retry_max, BIGINT for max_pending and the
# cutoff, a float (single precision on MariaDB) for the rest.
INT_MAX = 2**31 - 1
BIGINT_MAX = 2**63 - 1
RATE_MIN, RATE_MAX = 0.000_001, 1_000_000.0  # alarms per second
# The ranges a server-wide default of the same setting takes too (setting_ranges).
RETRY_MIN_S, RETRY_MAX_S = RETRY_SECONDS.low, RETRY_SECONDS.high
RETENTION_MIN_DAYS, RETENTION_MAX_DAYS = DAYS.low, DAYS.high

Model = TypeVar("Model", bound=BaseModel)
Rate = Annotated[float, Field(ge=RATE_MIN, le=RATE_MAX)]
Burst = Annotated[int, Field(ge=1, le=INT_MAX)]
RetrySeconds = Annotated[float, Field(ge=RETRY_MIN_S, le=RETRY_MAX_S)]
Days = Annotated[float, Field(ge=RETENTION_MIN_DAYS, le=RETENTION_MAX_DAYS)]
WEBHOOK_TIMEOUT_MIN_S, WEBHOOK_TIMEOUT_MAX_S = WEBHOOK_TIMEOUT_S.low, WEBHOOK_TIMEOUT_S.high
IN_FLIGHT_MAX = IN_FLIGHT.high
VISIBILITY_MIN_S, VISIBILITY_MAX_S = VISIBILITY_S.low, VISIBILITY_S.high

# Each burst's rate: a burst needs it.
_RATE_OF_BURST = {"create_burst": "create_rate_per_s", "ring_burst": "ring_rate_per_s"}


class ApplicationSettings(BaseModel):
    """The body of PUT /v1/applications/{application}: every setting, one left out null (the
    settings a PATCH may give: ApplicationChanges). null is no limit, or the server's
    default."""

    model_config = ConfigDict(
        strict=True,
        extra="forbid",
        allow_inf_nan=False,
        json_schema_extra=schema_rules.APPLICATION_SETTINGS,
    )

    create_rate_per_s: Rate | None = Field(
        None, description="alarms created per second; null: no limit"
    )
    create_burst: Burst | None = Field(
        None, description="creations taken at once; null: one second's worth (at least 1)"
    )
    max_pending: Annotated[int, Field(ge=1, le=BIGINT_MAX)] | None = Field(
        None, description="the most pending alarms it may have; null: no limit"
    )
    ring_rate_per_s: Rate | None = Field(None, description="alarms rung per second; null: no limit")
    ring_burst: Burst | None = Field(
        None, description="rings taken at once; null: one second's worth (at least 1)"
    )
    retry_base_s: RetrySeconds | None = Field(
        None, description="backoff after the first failed publish; null: CLOCK_RETRY_BASE_S"
    )
    retry_cap_s: RetrySeconds | None = Field(
        None, description="longest backoff, at least retry_base_s; null: CLOCK_RETRY_CAP_S"
    )
    retry_max: Annotated[int, Field(ge=0, le=INT_MAX)] | None = Field(
        None, description="retries before an alarm is dead; null: CLOCK_RETRY_MAX"
    )
    default_cutoff_ms: Annotated[int, Field(ge=0, le=MAX_EPOCH_MS)] | None = Field(
        None,
        description="a create without latest_ring_at gets target_ring_at + this; null: none",
    )
    retention_days: Days | None = Field(
        None,
        description="finished alarms are deleted after this long; null: CLOCK_RETENTION_DAYS",
    )
    channel: Literal["amqp", "webhook", "pull"] | None = Field(
        None, description="how its alarms reach it: amqp, webhook or pull; null: amqp"
    )
    webhook_url: Annotated[str, Field(max_length=2048)] | None = Field(
        None, description="where webhooks are POSTed (http or https); needed by channel webhook"
    )
    webhook_timeout_s: (
        Annotated[float, Field(ge=WEBHOOK_TIMEOUT_MIN_S, le=WEBHOOK_TIMEOUT_MAX_S)] | None
    ) = Field(None, description="a webhook call's timeout; null: CLOCK_WEBHOOK_TIMEOUT_S")
    webhook_max_in_flight: Annotated[int, Field(ge=1, le=IN_FLIGHT_MAX)] | None = Field(
        None, description="webhook calls in flight at once; null: CLOCK_WEBHOOK_MAX_IN_FLIGHT"
    )
    pull_visibility_s: Annotated[float, Field(ge=VISIBILITY_MIN_S, le=VISIBILITY_MAX_S)] | None = (
        Field(
            None,
            description="how long a pulled message stays leased; null: CLOCK_PULL_VISIBILITY_S",
        )
    )


class ApplicationChanges(ApplicationSettings):
    """The body of PATCH /v1/applications/{application}: only the settings given change; null
    clears one."""

    model_config = ConfigDict(json_schema_extra=schema_rules.application_changes)


def replacement(name: str, data: dict[str, Any], allow_private: bool) -> ApplicationPolicy:
    """Validate a PUT: every setting, those left out null. A webhook URL must pass the
    target rules (`delivery.targets`): `allow_private` is CLOCK_WEBHOOK_ALLOW_PRIVATE."""
    body = _validate(ApplicationSettings, data, allow_private)
    values = {f: getattr(body, f) for f in POLICY_FIELDS}
    values["channel"] = values["channel"] or AMQP
    policy = ApplicationPolicy(name=name, **values)
    check_policy(policy, set(POLICY_FIELDS))
    return policy


def changes(data: dict[str, Any], allow_private: bool) -> dict[str, Any]:
    """Validate a PATCH: the settings given, each with its new value (None clears it). The
    rules between settings are checked against the stored ones, with `check_policy`."""
    body = _validate(ApplicationChanges, data, allow_private)
    if not body.model_fields_set:
        raise ValidationError(f"nothing to change: give any of {', '.join(POLICY_FIELDS)}")
    given = {name: getattr(body, name) for name in POLICY_FIELDS if name in body.model_fields_set}
    if "channel" in given:
        given["channel"] = given["channel"] or AMQP
    return given


def check_policy(policy: ApplicationPolicy, given: set[str]) -> None:
    """The rules between settings: a burst needs its rate, retry_cap_s is at least
    retry_base_s, and the webhook channel needs a webhook_url. The error names the setting
    of the pair that was `given`, the burst, the cap or the URL when both were."""
    if policy.channel == WEBHOOK and policy.webhook_url is None:
        field = "webhook_url" if "webhook_url" in given or "channel" not in given else "channel"
        raise ValidationError("channel webhook needs a webhook_url", field=field)
    for burst, rate in _RATE_OF_BURST.items():
        if getattr(policy, burst) is not None and getattr(policy, rate) is None:
            field = burst if burst in given or rate not in given else rate
            raise ValidationError(f"{burst} needs {rate}: a burst without a rate", field=field)
    base, cap = policy.retry_base_s, policy.retry_cap_s
    if base is not None and cap is not None and cap < base:
        field = "retry_cap_s" if "retry_cap_s" in given else "retry_base_s"
        raise ValidationError(
            f"retry_cap_s ({cap:g}) must be at least retry_base_s ({base:g})", field=field
        )


# How long, after a rotation, the secret it replaced goes on signing beside the new one.
OVERLAP_DEFAULT_S = 86_400
OVERLAP_MAX_S = 7 * 86_400


class SecretRotation(BaseModel):
    """POST /v1/applications/{application}/webhook-secret."""

    model_config = ConfigDict(strict=True, extra="forbid")

    overlap_s: Annotated[
        float,
        Field(
            ge=0,
            le=OVERLAP_MAX_S,
            description="how long the secret being replaced goes on signing beside the new one "
            "(each webhook then carries both signatures), so that receivers can move to the "
            "new secret without rejecting a call; 0 stops it at once",
        ),
    ] = OVERLAP_DEFAULT_S


def rotation_overlap_ms(data: dict[str, Any]) -> int:
    """How long the replaced secret still signs, in ms; 0: it stops at once."""
    return int(_model(SecretRotation, data).overlap_s * 1000)


def _model(model: type[Model], data: dict[str, Any]) -> Model:
    try:
        return model.model_validate(data)
    except PydanticError as error:
        first = error.errors(include_url=False)[0]
        field = ".".join(str(part) for part in first["loc"]) or None
        message = f"{field}: {first['msg']}" if field else first["msg"]
        raise ValidationError(message, field=field) from None


def _validate(
    model: type[ApplicationSettings], data: dict[str, Any], allow_private: bool
) -> ApplicationSettings:
    body = _model(model, data)
    if body.webhook_url is not None:
        body.webhook_url = check_target(body.webhook_url, allow_private)
    return body
