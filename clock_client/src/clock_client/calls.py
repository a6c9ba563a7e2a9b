"""Each call of the /v1 API as a value: its method, path and body, and how its answer is read.
ClockClient and AsyncClockClient send the same calls, each over its own HTTP library."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar
from urllib.parse import quote

from .errors import ClockError, ValidationError, error_from_response
from .models import (
    APPLICATION_SETTINGS,
    AckResult,
    Alarm,
    AlarmEvent,
    AlarmPage,
    Application,
    BatchResult,
    Counted,
    PulledMessage,
    ack_result_from_json,
    alarm_from_json,
    application_from_json,
    applications_from_json,
    batch_results_from_json,
    create_body,
    events_from_json,
    page_from_json,
    pulled_from_json,
    timing_fields,
    to_epoch_ms,
)
from .reports import (
    Overview,
    Stats,
    WhoAmI,
    overview_from_json,
    stats_from_json,
    whoami_from_json,
)

T = TypeVar("T")

MAX_BATCH = 1000  # the server's limit per /v1/alarms/batch request


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request and the reading of its answer.

    ``read`` turns the decoded JSON object (or, with ``text``, the body as text) into the
    result. ``extra_wait_s`` is added to the client's read timeout (a long poll).
    ``report_on_503``: a 503 whose body is a report with a ``status`` is the answer, not an
    error (the probes say "unavailable" that way).
    """

    method: str
    path: str
    read: Callable[[Any], T]
    json: Any = None
    params: Mapping[str, Any] | None = None
    extra_wait_s: float = 0.0
    report_on_503: bool = False
    text: bool = False

    def answer(
        self, status: int, content: bytes, reason: str = "", retry_after: str | None = None
    ) -> T:
        """The result for the server's answer, or the ClockError it stands for."""
        where = f"{self.method} {self.path}"
        if status >= 400:
            error = error_from_response(status, content, reason, retry_after)
            if self.report_on_503 and status == 503 and "status" in error.body:
                return self.read(dict(error.body))
            raise error
        if self.text:
            return self.read(content.decode("utf-8", errors="replace"))
        try:
            data = json.loads(content)
        except ValueError as exc:
            raise ClockError(
                f"{where} answered {status} with a non-JSON body",
                status_code=status,
                code="bad_response",
            ) from exc
        if not isinstance(data, dict):
            raise ClockError(
                f"{where} answered a JSON {type(data).__name__}, expected an object",
                status_code=status,
                code="bad_response",
            )
        return self.read(data)


def _itself(data: dict[str, Any]) -> dict[str, Any]:
    return data


def _segment(value: str, field: str) -> str:
    """`value` as one path segment. "." and ".." cannot be one: HTTP clients remove them
    from a path, so the call would reach another route or another alarm."""
    if value in (".", ".."):
        raise ValidationError(
            f"{field} must not be {value!r}: it cannot travel in a URL", field=field
        )
    return quote(value, safe="")


def alarm_path(application: str, business_id: str) -> str:
    return (
        f"/v1/alarms/{_segment(application, 'application')}/{_segment(business_id, 'business_id')}"
    )


def application_path(name: str) -> str:
    return f"/v1/applications/{_segment(name, 'application')}"


def filter_fields(
    application: str | None,
    status: str | None,
    business_id_prefix: str | None,
    due_from: int | datetime | None,
    due_to: int | datetime | None,
) -> dict[str, Any]:
    """The filter of a search or a bulk action, with only the parts given."""
    fields: dict[str, Any] = {}
    for name, value in (
        ("application", application),
        ("status", status),
        ("business_id_prefix", business_id_prefix),
    ):
        if value is not None:
            fields[name] = value
    if due_from is not None:
        fields["due_from"] = to_epoch_ms(due_from)
    if due_to is not None:
        fields["due_to"] = to_epoch_ms(due_to)
    return fields


def create(application: str, business_id: str, payload: str, **timing: Any) -> Call[Alarm]:
    body = create_body(application, business_id, payload, **timing)
    return Call("POST", "/v1/alarms", alarm_from_json, json=body)


def count(application: str, business_id: str, increment_id: str | None, by: int) -> Call[Counted]:
    body: dict[str, Any] = {"by": by}
    if increment_id is not None:
        body["increment_id"] = increment_id
    path = alarm_path(application, business_id) + "/count"
    return Call("POST", path, Counted.from_dict, json=body)


def batch_creates(items: Sequence[Mapping[str, Any]]) -> list[Call[list[BatchResult]]]:
    """The requests creating `items`, at most MAX_BATCH each; TypeError/ValueError for an item
    that cannot be encoded, before anything is sent."""
    bodies = [create_body(**item) for item in items]
    calls = []
    for start in range(0, len(bodies), MAX_BATCH):
        chunk = bodies[start : start + MAX_BATCH]

        def read(data: dict[str, Any], expected: int = len(chunk)) -> list[BatchResult]:
            return batch_results_from_json(data, expected)

        calls.append(Call("POST", "/v1/alarms/batch", read, json={"alarms": chunk}))
    return calls


def get(application: str, business_id: str) -> Call[Alarm]:
    return Call("GET", alarm_path(application, business_id), alarm_from_json)


def events(application: str, business_id: str) -> Call[list[AlarmEvent]]:
    return Call("GET", alarm_path(application, business_id) + "/events", events_from_json)


def update(
    application: str,
    business_id: str,
    target_ring_at: int | datetime | None,
    delay: float | timedelta | None,
    latest_ring_at: int | datetime | None,
    payload: str | None,
    clear_latest_ring_at: bool,
) -> Call[Alarm]:
    body: dict[str, Any] = timing_fields(target_ring_at, delay, latest_ring_at)
    if clear_latest_ring_at:
        if latest_ring_at is not None:
            raise ValueError("give latest_ring_at or clear_latest_ring_at, not both")
        body["latest_ring_at"] = None
    if payload is not None:
        body["payload"] = payload
    return Call("PATCH", alarm_path(application, business_id), alarm_from_json, json=body)


def cancel(application: str, business_id: str) -> Call[Alarm]:
    return Call("DELETE", alarm_path(application, business_id), alarm_from_json)


def list_page(filters: dict[str, Any], limit: int, cursor: str | None) -> Call[AlarmPage]:
    params = dict(filters, limit=limit)
    if cursor is not None:
        params["cursor"] = cursor
    return Call("GET", "/v1/alarms", page_from_json, params=params)


def health() -> Call[dict[str, Any]]:
    return Call("GET", "/healthz", _itself, report_on_503=True)


def live() -> Call[dict[str, Any]]:
    return Call("GET", "/livez", _itself, report_on_503=True)


def ready() -> Call[dict[str, Any]]:
    return Call("GET", "/readyz", _itself, report_on_503=True)


def metrics() -> Call[str]:
    return Call("GET", "/metrics", str, text=True)


def openapi() -> Call[dict[str, Any]]:
    return Call("GET", "/openapi.json", _itself)


def whoami() -> Call[WhoAmI]:
    return Call("GET", "/v1/whoami", whoami_from_json)


def overview() -> Call[Overview]:
    return Call("GET", "/v1/overview", overview_from_json)


def stats(minutes: int, application: str | None) -> Call[Stats]:
    params: dict[str, str] = {"minutes": str(minutes)}
    if application is not None:
        params["application"] = application
    return Call("GET", "/v1/stats", stats_from_json, params=params)


def redrive(
    application: str,
    business_id: str,
    target_ring_at: int | datetime | None,
    delay: float | timedelta | None,
) -> Call[Alarm]:
    path = alarm_path(application, business_id) + "/redrive"
    return Call("POST", path, alarm_from_json, json=timing_fields(target_ring_at, delay))


def bulk(action: str, body: dict[str, Any]) -> Call[tuple[int, bool]]:
    """One call of a bulk action ("redrive" or "cancel"): (how many it changed, done)."""

    def read(data: dict[str, Any]) -> tuple[int, bool]:
        return int(data["changed"]), bool(data["done"])

    return Call("POST", f"/v1/alarms/{action}", read, json=body)


def applications(counts: bool) -> Call[list[Application]]:
    params = {} if counts else {"counts": "false"}
    return Call("GET", "/v1/applications", applications_from_json, params=params)


def application(name: str) -> Call[Application]:
    return Call("GET", application_path(name), application_from_json)


def check_settings(settings: Mapping[str, Any]) -> None:
    """TypeError naming what in `settings` is not a setting of an application."""
    unknown = sorted(set(settings) - set(APPLICATION_SETTINGS))
    if unknown:
        raise TypeError(
            f"not settings of an application: {', '.join(unknown)}; "
            f"give any of {', '.join(APPLICATION_SETTINGS)}"
        )


def configure(name: str, settings: Mapping[str, Any], *, replace: bool) -> Call[Application]:
    """The PATCH (or, with `replace`, the PUT) of an application's settings."""
    method = "PUT" if replace else "PATCH"
    return Call(method, application_path(name), application_from_json, json=dict(settings))


def _secret(data: dict[str, Any]) -> str | None:
    secret = data.get("webhook_secret")
    return secret if isinstance(secret, str) else None


def webhook_secret(name: str, rotate: bool, overlap_s: float | None) -> Call[str | None]:
    path = f"{application_path(name)}/webhook-secret"
    if not rotate:
        return Call("GET", path, _secret)
    body = {} if overlap_s is None else {"overlap_s": overlap_s}
    return Call("POST", path, _secret, json=body)


def pull(application: str, max: int, wait_s: float) -> Call[list[PulledMessage]]:
    path = application_path(application) + "/pull"
    body = {"max": max, "wait_s": wait_s}
    return Call("POST", path, pulled_from_json, json=body, extra_wait_s=wait_s)


def ack(application: str, ids: Iterable[int | str]) -> Call[AckResult]:
    path = application_path(application) + "/ack"
    return Call("POST", path, ack_result_from_json, json={"ids": [str(i) for i in ids]})
