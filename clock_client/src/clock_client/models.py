"""Value types of the clock client: alarms, batch results, ring messages, applications, time
helpers."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from .errors import ClockError, error_from_body

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_MS = timedelta(milliseconds=1)


def to_epoch_ms(value: int | datetime) -> int:
    """Epoch milliseconds for an int (taken as ms) or a timezone-aware datetime.

    Raises ValueError for a naive datetime (its instant is ambiguous) and TypeError
    for anything else.
    """
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValueError("datetime must be timezone-aware, e.g. datetime.now(UTC)")
        return (value - _EPOCH) // _ONE_MS
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise TypeError(f"expected epoch ms (int) or an aware datetime, got {type(value).__name__}")


def to_delay_ms(value: float | timedelta) -> int:
    """Milliseconds for a delay given as seconds (int/float) or a timedelta."""
    if isinstance(value, timedelta):
        return value // _ONE_MS
    if isinstance(value, int | float) and not isinstance(value, bool):
        return round(value * 1000)
    raise TypeError(f"expected seconds (float) or a timedelta, got {type(value).__name__}")


def timing_fields(
    target_ring_at: int | datetime | None = None,
    delay: float | timedelta | None = None,
    latest_ring_at: int | datetime | None = None,
) -> dict[str, Any]:
    """The request fields for the times given (None means not sent)."""
    fields: dict[str, Any] = {}
    if target_ring_at is not None:
        fields["target_ring_at"] = to_epoch_ms(target_ring_at)
    if delay is not None:
        fields["delay_ms"] = to_delay_ms(delay)
    if latest_ring_at is not None:
        fields["latest_ring_at"] = to_epoch_ms(latest_ring_at)
    return fields


def create_body(
    application: str,
    business_id: str,
    payload: str,
    *,
    target_ring_at: int | datetime | None = None,
    delay: float | timedelta | None = None,
    latest_ring_at: int | datetime | None = None,
    ring_after_count: int | None = None,
    count_only: bool = False,
) -> dict[str, Any]:
    """The JSON body creating one alarm; which fields are required is the server's rule."""
    body: dict[str, Any] = {
        "application": application,
        "business_id": business_id,
        "payload": payload,
    }
    if ring_after_count is not None:
        body["ring_after_count"] = ring_after_count
    if count_only:
        body["count_only"] = True
    return body | timing_fields(target_ring_at, delay, latest_ring_at)


@dataclass(frozen=True, slots=True)
class Counted:
    """The answer to a count: the alarm after it, whether it counted (False for a repeated
    increment_id), and whether it reached ``ring_after_count`` (the alarm rings now)."""

    alarm: Alarm
    counted: bool
    reached: bool

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Counted:
        return cls(
            alarm=Alarm.from_dict(data["alarm"]),
            counted=_get(data, "counted", bool),
            reached=_get(data, "reached", bool),
        )


def from_epoch_ms(ms: int) -> datetime:
    """The aware UTC datetime for epoch milliseconds."""
    return _EPOCH + timedelta(milliseconds=ms)


def _get(data: Mapping[str, Any], key: str, kind: type, *, optional: bool = False) -> Any:
    value = data.get(key)
    if value is None and optional:
        return None
    # bool is an int subclass; a True where an id belongs is a broken document.
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"{key!r} must be {kind.__name__}, got {value!r}")
    return value


@dataclass(frozen=True, slots=True)
class Alarm:
    """One alarm as the server stores it. Times are epoch milliseconds (UTC).

    ``status`` is one of ``"pending"``, ``"rung"``, ``"cancelled"``, ``"expired"``,
    ``"dead"``. The ``*_datetime`` properties give the same instants as aware datetimes.
    """

    id: int
    application: str
    business_id: str
    payload: str
    target_ring_at: int
    latest_ring_at: int | None
    next_try_time: int
    retry_times: int
    status: str
    rung_at: int | None
    created_at: int
    updated_at: int
    ring_after_count: int | None = None  # a count-triggered alarm: rings at this count
    count: int = 0  # counted on it so far

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Alarm:
        """Build from the server's alarm JSON; ValueError if a field is missing or mistyped.

        Keys the client does not know are ignored, so newer servers stay compatible.
        """
        return cls(
            id=_get(data, "id", int),
            application=_get(data, "application", str),
            business_id=_get(data, "business_id", str),
            payload=_get(data, "payload", str),
            target_ring_at=_get(data, "target_ring_at", int),
            latest_ring_at=_get(data, "latest_ring_at", int, optional=True),
            next_try_time=_get(data, "next_try_time", int),
            retry_times=_get(data, "retry_times", int),
            status=_get(data, "status", str),
            rung_at=_get(data, "rung_at", int, optional=True),
            created_at=_get(data, "created_at", int),
            updated_at=_get(data, "updated_at", int),
            ring_after_count=_get(data, "ring_after_count", int, optional=True),
            count=_get(data, "count", int, optional=True) or 0,
        )

    @property
    def is_pending(self) -> bool:
        """True while the alarm can still ring, be updated or be cancelled."""
        return self.status == "pending"

    @property
    def target_ring_datetime(self) -> datetime:
        """``target_ring_at`` as an aware UTC datetime."""
        return from_epoch_ms(self.target_ring_at)

    @property
    def latest_ring_datetime(self) -> datetime | None:
        """``latest_ring_at`` as an aware UTC datetime, or None."""
        return None if self.latest_ring_at is None else from_epoch_ms(self.latest_ring_at)

    @property
    def rung_datetime(self) -> datetime | None:
        """``rung_at`` as an aware UTC datetime, or None while not rung."""
        return None if self.rung_at is None else from_epoch_ms(self.rung_at)

    @property
    def created_datetime(self) -> datetime:
        """``created_at`` as an aware UTC datetime."""
        return from_epoch_ms(self.created_at)


@dataclass(frozen=True, slots=True)
class AlarmPage:
    """One page of a listing; pass ``next_cursor`` back to get the next (None: last page)."""

    alarms: tuple[Alarm, ...]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class BatchResult:
    """Outcome of one item of a batch create, in the order the items were given.

    ``status`` is 201 (created), 200 (already existed; ``alarm`` is the stored one) or
    an error status with ``error`` set and ``alarm`` None.
    """

    status: int
    alarm: Alarm | None
    error: ClockError | None

    @property
    def ok(self) -> bool:
        """True when the alarm exists on the server (created now or before)."""
        return self.alarm is not None

    @property
    def created(self) -> bool:
        """True when this call created the alarm."""
        return self.status == 201


@dataclass(frozen=True, slots=True)
class AlarmMessage:
    """One ring, as every channel delivers it: a Consumer (AMQP), a PullConsumer or
    ``ClockClient.pull`` (HTTP pull), and ``verify_webhook`` (webhooks).

    ``message_id`` is the delivery's id, stable across redeliveries and the server's retries:
    ``str(id)``, or ``<id>-r<n>`` after an operator's n-th re-drive; deduplicate on it.
    ``attempt`` counts the server's attempts; ``published_at`` is when this attempt was sent
    (None from a server that does not send it). ``redelivered`` says the message may have
    been handled before: the broker's flag on AMQP (a handler failed, or a consumer died
    before acking), ``attempt > 1`` on pull and webhooks. A count-triggered alarm's message
    also says what made it ring, ``trigger`` (``"count"`` or ``"time"``), and its ``count``;
    both are None for other alarms.
    """

    id: int
    application: str
    business_id: str
    payload: str
    target_ring_at: int
    attempt: int
    message_id: str
    redelivered: bool
    published_at: int | None = None
    trigger: str | None = None
    count: int | None = None

    @classmethod
    def from_body(
        cls, body: Mapping[str, Any], *, message_id: str | None, redelivered: bool
    ) -> AlarmMessage:
        """Build from a decoded ring body; ValueError if a field is missing or mistyped.

        A message without a message id gets ``str(id)``, the id the server uses.
        """
        alarm_id = _get(body, "id", int)
        return cls(
            id=alarm_id,
            application=_get(body, "application", str),
            business_id=_get(body, "business_id", str),
            payload=_get(body, "payload", str),
            target_ring_at=_get(body, "target_ring_at", int),
            attempt=_get(body, "attempt", int),
            message_id=message_id if message_id else str(alarm_id),
            redelivered=redelivered,
            published_at=_get(body, "published_at", int, optional=True),
            trigger=_get(body, "trigger", str, optional=True),
            count=_get(body, "count", int, optional=True),
        )

    @property
    def target_ring_datetime(self) -> datetime:
        """``target_ring_at`` as an aware UTC datetime."""
        return from_epoch_ms(self.target_ring_at)


# What a Consumer or a PullConsumer hands each message to; what it returns is ignored.
Handler = Callable[[AlarmMessage], object]


@dataclass(frozen=True, slots=True)
class AlarmEvent:
    """One step of an alarm's history, as ``ClockClient.events`` returns it, oldest first.

    ``at`` is epoch milliseconds (UTC). ``kind`` is one of ``"created"``, ``"moved"``,
    ``"changed"``, ``"cancelled"``, ``"attempt_failed"``, ``"rung"``, ``"expired"``,
    ``"dead"``, ``"redriven"``. ``actor`` says who: the application whose token was used,
    ``"admin"``, ``"anonymous"`` (a server without tokens), ``"clock"`` (the server's
    engine) or ``"unknown"``. ``detail`` holds what the kind tells (see the API reference),
    the common ones also as properties.
    """

    at: int
    kind: str
    actor: str
    detail: Mapping[str, Any]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AlarmEvent:
        """Build from the server's event JSON; ValueError if a field is missing or mistyped."""
        detail = data.get("detail")
        if not isinstance(detail, Mapping):
            raise ValueError(f"'detail' must be an object, got {detail!r}")
        return cls(
            at=_get(data, "at", int),
            kind=_get(data, "kind", str),
            actor=_get(data, "actor", str),
            detail=dict(detail),
        )

    @property
    def at_datetime(self) -> datetime:
        """``at`` as an aware UTC datetime."""
        return from_epoch_ms(self.at)

    @property
    def attempt(self) -> int | None:
        """The publish attempt of an ``attempt_failed`` or ``rung`` event, else None."""
        return _get(self.detail, "attempt", int, optional=True)  # type: ignore[no-any-return]

    @property
    def error(self) -> str | None:
        """Why an ``attempt_failed`` or ``dead`` event's publish failed, else None."""
        return _get(self.detail, "error", str, optional=True)  # type: ignore[no-any-return]


def _bad(what: str) -> ClockError:
    return ClockError(f"unexpected response from the server: {what}", code="bad_response")


def alarm_from_json(data: Any) -> Alarm:
    """An Alarm from a decoded response; ClockError(code="bad_response") if malformed."""
    if not isinstance(data, Mapping):
        raise _bad(f"expected an alarm object, got {data!r}")
    try:
        return Alarm.from_dict(data)
    except ValueError as exc:
        raise _bad(f"malformed alarm: {exc}") from exc


def page_from_json(data: Mapping[str, Any]) -> AlarmPage:
    """An AlarmPage from a decoded ``{"alarms": [...], "next_cursor": ...}``."""
    alarms, cursor = data.get("alarms"), data.get("next_cursor")
    if not isinstance(alarms, list) or not isinstance(cursor, str | None):
        raise _bad("a listing must be {alarms: [...], next_cursor: str|null}")
    return AlarmPage(tuple(alarm_from_json(a) for a in alarms), cursor)


def batch_results_from_json(data: Mapping[str, Any], expected: int) -> list[BatchResult]:
    """The BatchResults of a decoded batch response that must hold ``expected`` items."""
    raw = data.get("results")
    if not isinstance(raw, list) or len(raw) != expected:
        raise _bad(f"a batch of {expected} items needs {expected} results")
    results = []
    for entry in raw:
        if not isinstance(entry, Mapping) or not isinstance(entry.get("status"), int):
            raise _bad(f"malformed batch result {entry!r}")
        status = entry["status"]
        if status < 400:
            results.append(BatchResult(status, alarm_from_json(entry.get("alarm")), None))
        else:
            results.append(BatchResult(status, None, error_from_body(status, entry)))
    return results


def events_from_json(data: Mapping[str, Any]) -> list[AlarmEvent]:
    """The AlarmEvents of a decoded ``{"events": [...]}``."""
    found = data.get("events")
    if not isinstance(found, list):
        raise _bad("an alarm's history must be {events: [...]}")
    try:
        return [AlarmEvent.from_dict(item) for item in found]
    except (ValueError, AttributeError) as exc:
        raise _bad(f"malformed event: {exc}") from exc


# The settings of an application, in the server's order (PUT and PATCH
# /v1/applications/{application}).
APPLICATION_SETTINGS = (
    "create_rate_per_s",
    "create_burst",
    "max_pending",
    "ring_rate_per_s",
    "ring_burst",
    "retry_base_s",
    "retry_cap_s",
    "retry_max",
    "default_cutoff_ms",
    "retention_days",
    "channel",
    "webhook_url",
    "webhook_timeout_s",
    "webhook_max_in_flight",
    "pull_visibility_s",
)


def _number(data: Mapping[str, Any], key: str) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ValueError(f"{key!r} must be a number, got {value!r}")
    return float(value)


@dataclass(frozen=True, slots=True)
class ApplicationCounts:
    """Live counts of an application's alarms: ``pending``, of those ``due_next_minute``
    (due from now to a minute ahead) and ``overdue`` (due before now), and ``dead``."""

    pending: int
    due_next_minute: int
    overdue: int
    dead: int

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ApplicationCounts:
        return cls(
            pending=_get(data, "pending", int),
            due_next_minute=_get(data, "due_next_minute", int),
            overdue=_get(data, "overdue", int),
            dead=_get(data, "dead", int),
        )


@dataclass(frozen=True, slots=True)
class Application:
    """An application as the registry knows it: its settings, and its alarms' counts.

    A setting of None means no limit (the rates, bursts and ``max_pending``) or the
    server's default (the retry settings, ``retention_days``); ``default_cutoff_ms`` None
    means alarms get no cutoff unless they give one. ``registered`` is False for an
    application that has alarms but no row in the registry (only ``applications()``
    lists those; its settings are all None). Times are epoch milliseconds (UTC), None
    when not registered.
    """

    name: str
    create_rate_per_s: float | None
    create_burst: int | None
    max_pending: int | None
    ring_rate_per_s: float | None
    ring_burst: int | None
    retry_base_s: float | None
    retry_cap_s: float | None
    retry_max: int | None
    default_cutoff_ms: int | None
    retention_days: float | None
    registered: bool
    counts: ApplicationCounts | None  # None when listed with counts=False
    created_at: int | None
    updated_at: int | None
    channel: str = "amqp"  # how its alarms reach it: "amqp", "webhook" or "pull"
    webhook_url: str | None = None
    webhook_timeout_s: float | None = None
    webhook_max_in_flight: int | None = None
    pull_visibility_s: float | None = None
    webhook_secret_set: bool = False  # read the secret with ClockClient.webhook_secret()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Application:
        """Build from the server's application JSON; ValueError if a field is missing or
        mistyped. Keys the client does not know are ignored."""
        registered = data.get("registered")
        if not isinstance(registered, bool):
            raise ValueError(f"'registered' must be bool, got {registered!r}")
        counts = data.get("counts")
        if counts is not None and not isinstance(counts, Mapping):
            raise ValueError(f"'counts' must be an object or null, got {counts!r}")
        return cls(
            name=_get(data, "name", str),
            create_rate_per_s=_number(data, "create_rate_per_s"),
            create_burst=_get(data, "create_burst", int, optional=True),
            max_pending=_get(data, "max_pending", int, optional=True),
            ring_rate_per_s=_number(data, "ring_rate_per_s"),
            ring_burst=_get(data, "ring_burst", int, optional=True),
            retry_base_s=_number(data, "retry_base_s"),
            retry_cap_s=_number(data, "retry_cap_s"),
            retry_max=_get(data, "retry_max", int, optional=True),
            default_cutoff_ms=_get(data, "default_cutoff_ms", int, optional=True),
            retention_days=_number(data, "retention_days"),
            registered=registered,
            counts=None if counts is None else ApplicationCounts.from_dict(counts),
            created_at=_get(data, "created_at", int, optional=True),
            updated_at=_get(data, "updated_at", int, optional=True),
            channel=_get(data, "channel", str, optional=True) or "amqp",
            webhook_url=_get(data, "webhook_url", str, optional=True),
            webhook_timeout_s=_number(data, "webhook_timeout_s"),
            webhook_max_in_flight=_get(data, "webhook_max_in_flight", int, optional=True),
            pull_visibility_s=_number(data, "pull_visibility_s"),
            webhook_secret_set=bool(data.get("webhook_secret_set", False)),
        )

    @property
    def settings(self) -> dict[str, Any]:
        """The settings by name, as ``configure()`` takes them."""
        return {name: getattr(self, name) for name in APPLICATION_SETTINGS}


def application_from_json(data: Any) -> Application:
    """An Application from a decoded response; ClockError(code="bad_response") if malformed."""
    if not isinstance(data, Mapping):
        raise _bad(f"expected an application object, got {data!r}")
    try:
        return Application.from_dict(data)
    except ValueError as exc:
        raise _bad(f"malformed application: {exc}") from exc


def applications_from_json(data: Mapping[str, Any]) -> list[Application]:
    """The Applications of a decoded ``{"applications": [...]}``."""
    found = data.get("applications")
    if not isinstance(found, list):
        raise _bad("a listing of applications must be {applications: [...]}")
    return [application_from_json(item) for item in found]


@dataclass(frozen=True, slots=True)
class PulledMessage:
    """One message leased by ``ClockClient.pull``: ack its ``id`` before ``leased_until``
    (epoch ms), or it is leased again with the next ``attempt``.

    ``message`` is the ring as a Consumer gets it (``message_id`` is the id, ``redelivered``
    True from the second lease on); ``body`` is the message as sent, decoded.
    """

    id: str
    attempt: int
    leased_until: int
    message: AlarmMessage
    body: Mapping[str, Any]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PulledMessage:
        """Build from one item of a pull's ``messages``; ValueError if malformed."""
        body = data.get("message")
        if not isinstance(body, Mapping):
            raise ValueError(f"'message' must be an object, got {body!r}")
        alarm_id = _get(data, "id", str)
        attempt = _get(data, "attempt", int)
        return cls(
            id=alarm_id,
            attempt=attempt,
            leased_until=_get(data, "leased_until", int),
            message=AlarmMessage.from_body(body, message_id=alarm_id, redelivered=attempt > 1),
            body=dict(body),
        )

    @property
    def leased_until_datetime(self) -> datetime:
        """``leased_until`` as an aware UTC datetime."""
        return from_epoch_ms(self.leased_until)


@dataclass(frozen=True, slots=True)
class AckResult:
    """The answer to ``ClockClient.ack``: the ids now rung, and the others (unknown, not
    the application's, already rung, expired or dead), each in the order given."""

    acked: tuple[str, ...]
    not_acked: tuple[str, ...]

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> AckResult:
        """Build from the server's answer; ValueError if malformed."""
        lists = {}
        for key in ("acked", "not_acked"):
            ids = data.get(key)
            if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
                raise ValueError(f"{key!r} must be a list of ids, got {ids!r}")
            lists[key] = tuple(ids)
        return cls(acked=lists["acked"], not_acked=lists["not_acked"])


def pulled_from_json(data: Mapping[str, Any]) -> list[PulledMessage]:
    """The PulledMessages of a decoded ``{"messages": [...]}``."""
    found = data.get("messages")
    if not isinstance(found, list):
        raise _bad("a pull's answer must be {messages: [...]}")
    try:
        return [PulledMessage.from_dict(item) for item in found]
    except (ValueError, AttributeError) as exc:
        raise _bad(f"malformed pulled message: {exc}") from exc


def ack_result_from_json(data: Mapping[str, Any]) -> AckResult:
    """An AckResult from a decoded response; ClockError(code="bad_response") if malformed."""
    try:
        return AckResult.from_dict(data)
    except ValueError as exc:
        raise _bad(f"malformed ack answer: {exc}") from exc
