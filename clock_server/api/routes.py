"""The /v1 alarm endpoints, /metrics and /openapi.json; the probes are in health_routes."""

from __future__ import annotations

from typing import Any, Literal
from urllib.parse import unquote

from flask import Blueprint, Response, current_app, jsonify, request
from werkzeug.exceptions import MethodNotAllowed

from clock_server.api import validation
from clock_server.api.access import Creators, actor, authorize, authorize_listing, current_grant
from clock_server.api.answers.alarms import Whoami
from clock_server.api.bounded_pages import alarm_page
from clock_server.api.health_gauges import record_health
from clock_server.api.http_errors import error_body, status_for
from clock_server.api.openapi import openapi_document
from clock_server.api.services import Services
from clock_server.errors import ClockError, PayloadTooLarge
from clock_server.metrics import EXPOSITION_CONTENT_TYPE, exposition
from clock_server.model import Alarm, NewAlarm
from clock_server.settings import Settings

INCREMENT_MAX_BYTES = 1_024  # an increment_id of 128 characters and a count fit easily
# An alarm's sub-resources, by the last segment of their path, and the methods each takes.
SUB_RESOURCES = {"events": ("GET",), "count": ("POST",), "redrive": ("POST",)}

api = Blueprint("api", __name__)


def services() -> Services:
    return current_app.extensions["clock"]  # type: ignore[no-any-return]


@api.post("/v1/alarms")
def create_alarm() -> tuple[Response, int]:
    svc = services()
    data = json_body(svc.settings.single_body_max_bytes, "six times CLOCK_PAYLOAD_MAX_BYTES")
    now_ms = svc.clock.now_ms()
    new = validation.new_alarm(data, now_ms, svc.settings.payload_max_bytes, Creators())
    with svc.admission.admit([new], now_ms) as admitted:
        (outcome,) = admitted.outcomes
        if isinstance(outcome, ClockError):
            raise outcome  # unregistered, or over a limit of the application
        if isinstance(outcome, Alarm):  # at capacity, but the key exists: a repeat
            return jsonify(outcome.to_json()), 200
        alarm, created = svc.single_creates.submit((outcome, now_ms))
        admitted.record(alarm.application, created)
    if created:
        notify(svc, alarm.next_try_time)
    return jsonify(alarm.to_json()), 201 if created else 200


@api.post("/v1/alarms/batch")
def create_alarms() -> tuple[Response, int]:
    svc = services()
    data = json_body(svc.settings.batch_max_bytes, "CLOCK_BATCH_MAX_BYTES")
    requests = validation.batch_requests(data, svc.settings.batch_max_items)
    now_ms = svc.clock.now_ms()
    results: list[dict[str, Any] | None] = []
    valid = []
    creators = Creators()
    for item in requests:
        try:
            # an item of another application gets its own 403
            valid.append(
                validation.alarm_from(item, now_ms, svc.settings.payload_max_bytes, creators)
            )
            results.append(None)
        except ClockError as error:
            results.append({"status": status_for(error), **error_body(error)})
    earliest: int | None = None
    with svc.admission.admit(valid, now_ms) as admitted:
        writes = [outcome for outcome in admitted.outcomes if isinstance(outcome, NewAlarm)]
        stored = iter(svc.store.create_many(writes, now_ms) if writes else [])
        outcomes = iter(admitted.outcomes)
        for index, result in enumerate(results):
            if result is not None:
                continue
            outcome = next(outcomes)
            if isinstance(outcome, ClockError):  # its own 403 or 429; the others go on
                results[index] = {"status": status_for(outcome), **error_body(outcome)}
                continue
            alarm, created = (outcome, False) if isinstance(outcome, Alarm) else next(stored)
            admitted.record(alarm.application, created)
            results[index] = {"status": 201 if created else 200, "alarm": alarm.to_json()}
            if created:
                earliest = (
                    alarm.next_try_time if earliest is None else min(earliest, alarm.next_try_time)
                )
    if earliest is not None and svc.engine is not None:
        svc.engine.notify_due(earliest)
    return jsonify({"results": results}), 200


@api.get("/v1/alarms/<application>/<path:business_id>")
def get_alarm(application: str, business_id: str) -> Response:
    check_alarm_path()
    check_key(application, business_id)
    return jsonify(services().store.get(application, business_id).to_json())


@api.patch("/v1/alarms/<application>/<path:business_id>")
def update_alarm(application: str, business_id: str) -> Response:
    svc = services()
    check_alarm_path()
    check_key(application, business_id)
    data = json_body(svc.settings.single_body_max_bytes, "six times CLOCK_PAYLOAD_MAX_BYTES")
    now_ms = svc.clock.now_ms()
    changes = validation.alarm_changes(data, now_ms, svc.settings.payload_max_bytes)
    svc.admission.admit_change(application, now_ms)
    alarm = svc.store.update(application, business_id, changes, now_ms, actor=actor(application))
    if changes.target_ring_at is not None:
        notify(svc, alarm.next_try_time)
    return jsonify(alarm.to_json())


@api.delete("/v1/alarms/<application>/<path:business_id>")
def cancel_alarm(application: str, business_id: str) -> Response:
    svc = services()
    check_alarm_path()
    check_key(application, business_id)
    now_ms = svc.clock.now_ms()
    alarm, changed = svc.store.cancel_telling(
        application, business_id, now_ms, actor=actor(application)
    )
    if changed:
        svc.metrics.count_cancelled(application)
    return jsonify(alarm.to_json())


@api.post("/v1/alarms/<application>/<path:business_id>/count")
def count_alarm(application: str, business_id: str) -> Response:
    svc = services()
    check_key(application, business_id)
    data = optional_json_body(INCREMENT_MAX_BYTES, "1 KiB")
    increment_id, by = validation.increment(data)
    now_ms = svc.clock.now_ms()
    svc.admission.admit_change(application, now_ms)
    counted = svc.counts.count(
        application, business_id, increment_id, by, now_ms, actor=actor(application)
    )
    if counted.reached:
        notify(svc, now_ms)
    body = {
        "alarm": counted.alarm.to_json(),
        "counted": counted.counted,
        "reached": counted.reached,
    }
    return jsonify(body)


@api.get("/v1/alarms/<application>/<path:business_id>/events")
def alarm_events(application: str, business_id: str) -> Response:
    if _escaped_last_slash():
        return get_alarm(application, f"{business_id}/events")
    check_key(application, business_id)
    events = services().history.events(application, business_id)
    return jsonify({"events": [event.to_json() for event in events]})


@api.get("/v1/alarms")
def list_alarms() -> Response:
    svc = services()
    where, limit, after = validation.list_query(request.args.to_dict(), svc.settings.list_max_limit)
    authorize_listing(where.application)
    return alarm_page(svc.store.search, where, limit, after, svc.settings, validation.encode_cursor)


@api.get("/v1/whoami")
def whoami() -> Response:
    """What this request's token may do, so that a client (the console) can tell before it
    tries; never the token itself."""
    grant = current_grant()
    if grant is None:
        return jsonify(Whoami(authenticated=False, applications="*", read_only=False))
    apps: Literal["*"] | list[str] = (
        "*" if grant.applications is None else sorted(grant.applications)
    )
    return jsonify(Whoami(authenticated=True, applications=apps, read_only=grant.read_only))


@api.get("/metrics")
def metrics() -> Response:
    svc = services()
    record_health(svc)
    return Response(exposition(svc.metrics.registry), mimetype=EXPOSITION_CONTENT_TYPE)


@api.get("/openapi.json")
def openapi() -> Response:
    return jsonify(openapi_document())


def max_body_bytes(settings: Settings) -> int:
    """The largest body any route takes; the HTTP server refuses longer ones itself."""
    return max(settings.batch_max_bytes, settings.single_body_max_bytes)


def json_body(max_bytes: int, limit_name: str) -> dict[str, Any]:
    """The body as JSON, read only when it is within `max_bytes` (what one request may make
    this process hold); a longer one is a 413 that names the limit."""
    length = request.content_length
    if length is not None and length > max_bytes:
        raise PayloadTooLarge(
            f"the request body is {length} bytes, over the limit of {max_bytes} ({limit_name})"
        )
    request.max_content_length = max_bytes  # a body without a length is cut off there
    return validation.parse_json(request.get_data(cache=False))


def optional_json_body(max_bytes: int, limit_name: str) -> dict[str, Any]:
    """`json_body`, or an empty object when the request has no body at all."""
    if request.content_length == 0 or (
        request.content_length is None and "Transfer-Encoding" not in request.headers
    ):
        return {}
    return json_body(max_bytes, limit_name)


def check_key(application: str, business_id: str) -> None:
    """400 for a malformed key, then 403 for an application the token does not cover."""
    validation.check_application(application)
    validation.check_business_id(business_id)
    authorize(application)


def check_alarm_path() -> None:
    """405, with the methods it takes, for a path that names one of an alarm's sub-resources
    (.../events, .../count, .../redrive) with a method that only the alarm itself takes: the
    alarm whose business_id ends in "/count" is reached with that "/" sent as %2F."""
    methods = sub_resource_methods()
    if methods is not None:
        raise MethodNotAllowed(valid_methods=methods)


def sub_resource_methods() -> tuple[str, ...] | None:
    """The methods of the alarm's sub-resource that this request's path names, if it names
    one (its last "/" not escaped), with OPTIONS, and HEAD beside GET."""
    parts = request.path.split("/", 4)  # "", "v1", "alarms", application, the rest
    if len(parts) < 5 or parts[1:3] != ["v1", "alarms"]:
        return None
    head, slash, last = parts[4].rpartition("/")
    if not (slash and head and last in SUB_RESOURCES) or _escaped_last_slash():
        return None
    methods = SUB_RESOURCES[last]
    return tuple(sorted({*methods, "OPTIONS", *(["HEAD"] if "GET" in methods else [])}))


def allow_sub_resource_methods(response: Response) -> Response:
    """A 405 or an OPTIONS answer on a path that names an alarm's sub-resource lists the
    sub-resource's methods only: the router's list also holds the alarm's, since the path
    matches the alarm's route too (a business_id may hold "/")."""
    if response.status_code == 405 or request.method == "OPTIONS":
        methods = sub_resource_methods()
        if methods is not None:
            response.headers["Allow"] = ", ".join(methods)
    return response


def _escaped_last_slash() -> bool:
    """Whether the path's last "/" came escaped as %2F (as the SDK sends every "/" of a
    business_id), which only the raw request line still shows: then a path ending in
    "/events" is the alarm whose business_id ends so, not that alarm's history."""
    raw = request.environ.get("REQUEST_URI") or request.environ.get("RAW_URI")
    if not raw:
        return False
    last = str(raw).split("?", 1)[0].rsplit("/", 1)[-1]
    return "/" in unquote(last)


def notify(svc: Services, due_ms: int) -> None:
    """Tell this process's engine, if it runs one, of an alarm due at `due_ms`."""
    if svc.engine is not None:
        svc.engine.notify_due(due_ms)
