"""Request bodies and query strings turned into validated domain objects, or a clear 4xx."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)
from pydantic import ValidationError as PydanticError
from pydantic_core import PydanticCustomError

from clock_server.api import schema_rules
from clock_server.errors import PayloadTooLarge, ValidationError
from clock_server.model import (
    APPLICATION_CHARS,
    APPLICATION_PATTERN,
    DEAD,
    DOT_SEGMENTS,
    EXPIRED,
    MAX_EPOCH_MS,
    MAX_INCREMENT_BY,
    MAX_RING_AFTER_COUNT,
    PENDING,
    STATUSES,
    AlarmChanges,
    AlarmFilter,
    NewAlarm,
    is_application_name,
)
from clock_server.occurrences import OCCURRENCE_PREFIX
from clock_server.store.alarm_search import BY_DUE, BY_KEY, order_of


def _utf8(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise PydanticCustomError("invalid_text", "must be valid Unicode text") from None
    return value


Text = Annotated[str, AfterValidator(_utf8)]
EpochMs = Annotated[int, Field(ge=0, le=MAX_EPOCH_MS, description="epoch milliseconds, UTC")]


def _not_dots(value: str) -> str:
    if value in DOT_SEGMENTS:
        raise PydanticCustomError("dot_segment", "must not be '.' or '..'")
    return value


Application = Annotated[
    str,
    Field(
        pattern=APPLICATION_PATTERN,
        description="routing key and queue suffix",
        json_schema_extra={"not": {"enum": sorted(DOT_SEGMENTS)}},
    ),
    AfterValidator(_not_dots),
]
BusinessId = Annotated[Text, Field(min_length=1, max_length=128)]
DelayMs = Annotated[int, Field(ge=0, le=MAX_EPOCH_MS, description="ring this many ms from now")]
RingAfterCount = Annotated[
    int,
    Field(
        ge=1,
        le=MAX_RING_AFTER_COUNT,
        description="ring once this many were counted (POST .../count), or at the target "
        "time, whichever comes first",
    ),
]
IncrementBy = Annotated[int, Field(ge=1, le=MAX_INCREMENT_BY)]


class _Body(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    @field_validator("payload", check_fields=False)
    @classmethod
    def _payload_size(cls, value: str | None, info: ValidationInfo) -> str | None:
        limit = (info.context or {}).get("payload_max_bytes")
        if value is not None and limit is not None and len(value.encode("utf-8")) > limit:
            raise PydanticCustomError(
                "payload_too_large", "payload is over the limit of {limit} bytes", {"limit": limit}
            )
        return value


class CreateAlarm(_Body):
    """POST /v1/alarms: give exactly one of target_ring_at and delay_ms."""

    model_config = ConfigDict(json_schema_extra=schema_rules.CREATE_ALARM)

    application: Application
    business_id: BusinessId
    payload: Text
    target_ring_at: EpochMs | None = None
    delay_ms: DelayMs | None = None
    latest_ring_at: EpochMs | None = None
    ring_after_count: RingAfterCount | None = None
    count_only: bool | None = None


class UpdateAlarm(_Body):
    """PATCH /v1/alarms/{application}/{business_id}: at most one of target_ring_at and delay_ms."""

    model_config = ConfigDict(json_schema_extra=schema_rules.update_alarm)

    payload: Text | None = None
    target_ring_at: EpochMs | None = None
    delay_ms: DelayMs | None = None
    latest_ring_at: EpochMs | None = None


class BatchCreate(BaseModel):
    """POST /v1/alarms/batch: each item is a CreateAlarm, validated on its own."""

    model_config = ConfigDict(strict=True, extra="forbid")
    # each validated on its own, so that the 400 names the item
    alarms: Annotated[list[Any], WithJsonSchema(schema_rules.BATCH_ALARMS)]


def parse_json(raw: bytes) -> dict[str, Any]:
    """Decode a JSON object; duplicate keys, bad UTF-8 and deep nesting are 400s."""
    try:
        data = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicate_keys)
    except UnicodeDecodeError:
        raise ValidationError("the body is not valid UTF-8") from None
    except RecursionError:
        raise ValidationError("the JSON body is nested too deeply") from None
    except ValueError as error:
        raise ValidationError(f"the body is not valid JSON: {error}") from None
    if not isinstance(data, dict):
        raise ValidationError("the JSON body must be an object")
    return data


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def new_alarm(
    data: Any,
    now_ms: int,
    payload_max_bytes: int,
    creator: Callable[[str], str | None] = lambda application: None,
) -> NewAlarm:
    """Validate a create request: its shape (`alarm_request`), then the rules beyond it."""
    return alarm_from(alarm_request(data), now_ms, payload_max_bytes, creator)


def alarm_request(data: Any) -> CreateAlarm:
    """A create request as the document's CreateAlarm describes it: a JSON object of the
    model's fields, with exactly one of target_ring_at and delay_ms, or `count_only` with
    `ring_after_count` and no time."""
    if not isinstance(data, dict):
        raise ValidationError("each alarm must be a JSON object")
    body: CreateAlarm = _validate(CreateAlarm, data, None)
    if body.count_only:
        if body.ring_after_count is None:
            raise ValidationError("count_only needs ring_after_count", field="ring_after_count")
        for name in ("target_ring_at", "delay_ms", "latest_ring_at"):
            if getattr(body, name) is not None:
                raise ValidationError(
                    f"a count_only alarm has no time: leave out {name}", field=name
                )
    elif body.target_ring_at is not None and body.delay_ms is not None:
        raise ValidationError("give target_ring_at or delay_ms, not both", field="delay_ms")
    elif body.target_ring_at is None and body.delay_ms is None:
        if body.ring_after_count is not None:
            raise ValidationError(
                "a count-triggered alarm needs its deadline (target_ring_at or delay_ms), "
                "or count_only: true to ring by its count alone",
                field="target_ring_at",
            )
        raise ValidationError("give one of target_ring_at or delay_ms", field="target_ring_at")
    return body


def alarm_from(
    body: CreateAlarm,
    now_ms: int,
    payload_max_bytes: int,
    creator: Callable[[str], str | None] = lambda application: None,
) -> NewAlarm:
    """The alarm a well-shaped create request makes, by the rules the document's schema
    cannot state: the payload within its limit in bytes, a delay that stays within the year
    9999, and no cutoff before the target. A count-only alarm's target is the end of the year
    9999, so it rings by its count alone. `creator(application)`, asked once the request is
    valid, names who creates it (`created_by`); it may refuse by raising."""
    _check_payload(body.payload, payload_max_bytes)
    if body.business_id.startswith(OCCURRENCE_PREFIX):
        raise ValidationError(
            f"business_id must not start with {OCCURRENCE_PREFIX!r}: those are the keys of "
            "the occurrences of schedules",
            field="business_id",
        )
    if body.count_only:
        target = MAX_EPOCH_MS
    else:
        found = _one_target(body.target_ring_at, body.delay_ms, now_ms, required=True)
        assert found is not None
        target = found
    if body.latest_ring_at is not None and body.latest_ring_at < target:
        raise ValidationError(
            "latest_ring_at must not be before target_ring_at", field="latest_ring_at"
        )
    return NewAlarm(
        body.application,
        body.business_id,
        body.payload,
        target,
        body.latest_ring_at,
        created_by=creator(body.application),
        ring_after_count=body.ring_after_count,
    )


def _check_payload(payload: str, limit: int) -> None:
    if len(payload.encode("utf-8")) > limit:
        raise PayloadTooLarge(
            f"payload: payload is over the limit of {limit} bytes", field="payload"
        )


class Increment(_Body):
    """POST .../count: how much to add, and an id that makes a repeat count nothing."""

    increment_id: BusinessId | None = None
    by: IncrementBy = 1


def increment(data: dict[str, Any]) -> tuple[str | None, int]:
    body = _validate(Increment, data, None)
    return body.increment_id, body.by


def alarm_changes(data: dict[str, Any], now_ms: int, payload_max_bytes: int) -> AlarmChanges:
    """Validate a PATCH; latest_ring_at may be set to null to remove the cutoff."""
    body = _validate(UpdateAlarm, data, payload_max_bytes)
    if not body.model_fields_set:
        raise ValidationError(
            "nothing to change: give payload, target_ring_at, delay_ms or latest_ring_at"
        )
    for name in ("payload", "target_ring_at", "delay_ms"):
        if name in body.model_fields_set and getattr(body, name) is None:
            raise ValidationError(f"{name} cannot be null", field=name)
    target = _one_target(body.target_ring_at, body.delay_ms, now_ms, required=False)
    return AlarmChanges(
        target_ring_at=target,
        payload=body.payload,
        set_latest_ring_at="latest_ring_at" in body.model_fields_set,
        latest_ring_at=body.latest_ring_at,
    )


def batch_requests(data: dict[str, Any], max_items: int) -> list[CreateAlarm]:
    """The items of a batch, each as the document's CreateAlarm describes it. One that is not
    makes the whole batch a 400 naming it (`alarms.<index>.<field>`); the rules beyond the
    schema are each item's own (`alarm_from`)."""
    body = _validate(BatchCreate, data, None)
    if not body.alarms:
        raise ValidationError("alarms must hold at least one alarm", field="alarms")
    if len(body.alarms) > max_items:
        raise PayloadTooLarge(
            f"a batch holds at most {max_items} alarms, got {len(body.alarms)}", field="alarms"
        )
    requests = []
    for index, item in enumerate(body.alarms):
        try:
            requests.append(alarm_request(item))
        except ValidationError as error:
            field = ".".join(
                str(part) for part in ("alarms", index, error.field) if part is not None
            )
            raise ValidationError(f"alarms[{index}]: {error.message}", field=field) from None
    return requests


class Redrive(_Body):
    """POST .../redrive: when the alarm is due again; now when neither is given."""

    model_config = ConfigDict(json_schema_extra=schema_rules.ONE_DUE_TIME)

    target_ring_at: EpochMs | None = None
    delay_ms: DelayMs | None = None


class _Filter(_Body):
    application: Application | None = None
    status: str | None = None
    business_id_prefix: BusinessId | None = None
    due_from: EpochMs | None = None
    due_to: EpochMs | None = None


class BulkRedrive(_Filter):
    """POST /v1/alarms/redrive: the filter, and when the alarms are due again (default now)."""

    model_config = ConfigDict(json_schema_extra=schema_rules.bulk_action(DEAD, EXPIRED))

    target_ring_at: EpochMs | None = None
    delay_ms: DelayMs | None = None


class BulkCancel(_Filter):
    """POST /v1/alarms/cancel: the filter."""

    model_config = ConfigDict(json_schema_extra=schema_rules.bulk_action(PENDING))


def redrive_due(data: dict[str, Any], now_ms: int) -> int:
    """When a re-driven alarm is due: target_ring_at, now + delay_ms, or now."""
    body = _validate(Redrive, data, None)
    return _one_target(body.target_ring_at, body.delay_ms, now_ms, required=False) or now_ms


def bulk_redrive(data: dict[str, Any], now_ms: int) -> tuple[AlarmFilter, int]:
    """The filter of a bulk re-drive and when its alarms are due again."""
    body = _validate(BulkRedrive, data, None)
    due = _one_target(body.target_ring_at, body.delay_ms, now_ms, required=False)
    return _alarm_filter(body), now_ms if due is None else due


def bulk_cancel(data: dict[str, Any]) -> AlarmFilter:
    return _alarm_filter(_validate(BulkCancel, data, None))


def list_query(
    args: dict[str, str], max_limit: int
) -> tuple[AlarmFilter, int, tuple[Any, ...] | None]:
    """(filter, limit, position after) from the query string of GET /v1/alarms; an empty
    value is no filter."""
    known = ("application", "status", "business_id_prefix", "due_from", "due_to")
    fields: dict[str, Any] = {}
    for name in known:
        value = args.get(name) or None
        if value is not None and name.startswith("due_"):
            fields[name] = _whole_number(name, value, MAX_EPOCH_MS)
        elif value is not None:
            fields[name] = value
    where = _alarm_filter(_validate(_Filter, fields, None))
    limit = _whole_number("limit", args.get("limit", "100"), max_limit, least=1)
    cursor = args.get("cursor") or None
    return where, limit, decode_cursor(cursor, order_of(where)) if cursor else None


def _alarm_filter(body: _Filter) -> AlarmFilter:
    if body.status is not None and body.status not in STATUSES:
        raise ValidationError(f"status must be one of {', '.join(STATUSES)}", field="status")
    if body.business_id_prefix is not None and body.application is None:
        raise ValidationError(
            "business_id_prefix needs application: keys are searched within one application",
            field="business_id_prefix",
        )
    if body.due_from is not None and body.due_to is not None and body.due_to < body.due_from:
        raise ValidationError("due_to must not be before due_from", field="due_to")
    return AlarmFilter(
        body.application, body.status, body.business_id_prefix, body.due_from, body.due_to
    )


def flag(raw: str, name: str) -> bool:
    """A true/false query parameter."""
    if raw not in ("true", "false"):
        raise ValidationError(f"{name} must be true or false", field=name)
    return raw == "true"


def _whole_number(name: str, raw: str, most: int, least: int = 0) -> int:
    # isdigit() alone lets through "²" and 5000-digit strings, on which int() raises
    digits = raw.isascii() and raw.isdigit() and len(raw) <= len(str(most))
    if not digits or not least <= int(raw) <= most:
        raise ValidationError(f"{name} must be a whole number from {least} to {most}", field=name)
    return int(raw)


def check_application(application: str) -> None:
    if not is_application_name(application):
        raise ValidationError(
            f"application must be 1 to 64 characters of {APPLICATION_CHARS}", field="application"
        )


def check_business_id(business_id: str) -> None:
    if not 1 <= len(business_id) <= 128:
        raise ValidationError("business_id must be 1 to 128 characters", field="business_id")


def encode_cursor(position: tuple[Any, ...]) -> str:
    """An opaque cursor for the page position `position` (store.alarm_search.position)."""
    text = json.dumps(list(position), ensure_ascii=False, separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


def decode_cursor(cursor: str, order: str) -> tuple[Any, ...]:
    """The position of a cursor handed out by a search in `order`; 400 for any other."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        value = json.loads(raw)
    except (binascii.Error, UnicodeDecodeError, ValueError, RecursionError):
        value = None
    if isinstance(value, list) and _is_position(order, value):
        return tuple(value)
    raise ValidationError(
        "cursor is not one this server handed out for these filters", field="cursor"
    )


def _is_position(order: str, value: list[Any]) -> bool:
    if order == BY_KEY:
        return len(value) == 1 and isinstance(value[0], str) and _is_key(value[0])
    width = 2 if order == BY_DUE else 1
    return len(value) == width and all(type(part) is int and 0 <= part < 2**63 for part in value)


def _is_key(value: str) -> bool:
    """A business_id: 1 to 128 characters of text (JSON may spell a lone surrogate, which no
    UTF-8 column can hold)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return 0 < len(value) <= 128


def _one_target(target: int | None, delay: int | None, now_ms: int, required: bool) -> int | None:
    if target is not None and delay is not None:
        raise ValidationError("give target_ring_at or delay_ms, not both", field="delay_ms")
    if delay is not None:
        if now_ms + delay > MAX_EPOCH_MS:
            raise ValidationError("delay_ms reaches beyond the year 9999", field="delay_ms")
        return now_ms + delay
    if target is None and required:
        raise ValidationError("give one of target_ring_at or delay_ms", field="target_ring_at")
    return target


def _validate(model: type[BaseModel], data: dict[str, Any], payload_max_bytes: int | None):  # type: ignore[no-untyped-def]
    try:
        return model.model_validate(data, context={"payload_max_bytes": payload_max_bytes})
    except PydanticError as error:
        first = error.errors(include_url=False)[0]
        field = ".".join(str(part) for part in first["loc"]) or None
        message = f"{field}: {first['msg']}" if field else first["msg"]
        if first["type"] == "payload_too_large":
            raise PayloadTooLarge(message, field=field) from None
        raise ValidationError(message, field=field) from None
