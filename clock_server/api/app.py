"""The Flask application factory and the one place errors become HTTP responses."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson
from flask import Flask, Response, jsonify
from flask.json.provider import DefaultJSONProvider
from werkzeug.exceptions import HTTPException
from werkzeug.routing import PathConverter
from werkzeug.sansio.response import Response as BaseResponse

from clock_server.errors import (
    ClockError,
    Conflict,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    Unauthorized,
    Unavailable,
    ValidationError,
)
from clock_server.group_commit import GroupCommit
from clock_server.metrics import Metrics
from clock_server.model import Alarm, NewAlarm
from clock_server.settings import Settings
from clock_server.store import AlarmStore
from clock_server.timesource import Clock

log = logging.getLogger(__name__)

_STATUS_BY_ERROR: list[tuple[type[ClockError], int]] = [
    (PayloadTooLarge, 413),
    (ValidationError, 400),
    (Unauthorized, 401),
    (Forbidden, 403),
    (NotFound, 404),
    (Conflict, 409),
    (Unavailable, 503),
]


class DueNotifier(Protocol):
    """What the API needs of the engine: to be told an alarm falls due at `due_ms`."""

    def notify_due(self, due_ms: int) -> None: ...


class HealthSource(Protocol):
    """Where /healthz learns whether the broker is reachable."""

    def is_healthy(self) -> bool: ...


@dataclass
class Services:
    """Everything a request handler uses; built once by the entry point."""

    settings: Settings
    store: AlarmStore
    clock: Clock
    metrics: Metrics
    engine: DueNotifier | None = None  # None when this process runs no engine
    publisher: HealthSource | None = None  # the publisher, or its health seen from a worker
    single_creates: GroupCommit[tuple[NewAlarm, int], tuple[Alarm, bool]] = field(init=False)

    def __post_init__(self) -> None:
        self.single_creates = GroupCommit(
            self.store.create_each,
            lambda request: self.store.create(*request),
            shared_errors=(Unavailable,),
        )


def create_app(services: Services) -> Flask:
    """A Flask app serving /v1, /healthz, /metrics and /openapi.json over `services`."""
    from clock_server.api.auth import authenticate
    from clock_server.api.routes import api

    app = Flask("clock_server")
    app.json = OrjsonProvider(app)
    app.extensions["clock"] = services
    # A business_id may start with "/" or hold a line break: /v1/alarms/app//x must reach the
    # alarm "/x", not be redirected (308, method kept) to the different alarm "x".
    app.url_map.merge_slashes = False
    app.url_map.converters["path"] = _AnyPath
    app.before_request(authenticate)  # 401 for /v1 without a valid token, when tokens are set
    app.register_blueprint(api)
    app.register_error_handler(ClockError, _clock_error)
    app.register_error_handler(HTTPException, _http_error)
    app.register_error_handler(Exception, _unexpected_error)
    return app


class OrjsonProvider(DefaultJSONProvider):
    """Flask's JSON answers through orjson: the json module's encoder was a tenth of a web
    worker's interpreter time under single creates. Keys keep their order; text is written as
    UTF-8 rather than escaped. What orjson cannot write (an integer beyond 64 bits) goes
    through the json module as before."""

    sort_keys = False

    def response(self, *args: Any, **kwargs: Any) -> BaseResponse:
        obj = self._prepare_response_obj(args, kwargs)
        try:
            body = orjson.dumps(obj, option=orjson.OPT_APPEND_NEWLINE)
        except TypeError:
            return super().response(obj)
        return Response(body, mimetype=self.mimetype)


class _AnyPath(PathConverter):
    """Like werkzeug's `path`, but the value may also start with "/" and hold line breaks."""

    part_isolating = False
    regex = "(?s:.+?)"


def error_body(error: ClockError) -> dict[str, Any]:
    body: dict[str, Any] = {"code": error.code, "message": error.message, "field": error.field}
    if isinstance(error, Conflict):
        body["status"] = error.status
    return {"error": body}


def status_for(error: ClockError) -> int:
    for error_type, status in _STATUS_BY_ERROR:
        if isinstance(error, error_type):
            return status
    return 500


def _clock_error(error: ClockError) -> tuple[Response, int, list[tuple[str, str]]]:
    status = status_for(error)
    if status >= 500:
        log.warning("request failed: %s", error.message, extra={"action": "request_unavailable"})
    headers = []
    if isinstance(error, Unauthorized):
        headers.append(("WWW-Authenticate", error.challenge))
    return jsonify(error_body(error)), status, headers


def _http_error(error: HTTPException) -> tuple[Response, int, list[tuple[str, str]]]:
    status = error.code or 500
    codes = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}
    message = error.description or error.name
    if status == 413:
        message = "the request body is over the size limit"
    body = {"code": codes.get(status, "http_error"), "message": message, "field": None}
    headers = [(name, value) for name, value in error.get_headers() if name == "Allow"]
    return jsonify({"error": body}), status, headers


def _unexpected_error(error: Exception) -> tuple[Response, int]:
    log.exception("unexpected error", extra={"action": "request_error"})
    body = {"code": "internal", "message": "internal server error", "field": None}
    return jsonify({"error": body}), 500
