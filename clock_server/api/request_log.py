"""Each request's id, and one access line per request.

A request's `X-Request-Id` is kept when it is 1 to 128 characters of visible ASCII (no
space); otherwise, or when none is sent, the request gets a new one. The answer carries it
back in `X-Request-Id`, and every log line made while serving the request has it as
`request_id` (`clock_server.log_context`).

The access line (action `http_request`) is written once the answer's last byte has been
handed to the server: the method, the route (the URL rule, such as
`/v1/alarms/<application>/<path:business_id>`, so that ids do not make every line unique),
the status, the milliseconds, and the application the request named or its token covers.
The probes and /metrics, which orchestrators and Prometheus call every few seconds, log it at
DEBUG unless they answer 5xx.
"""

from __future__ import annotations

import logging
import re
import secrets
import time
from dataclasses import dataclass

from flask import Flask, Response, g, request

from clock_server.log_context import REQUEST_ID

log = logging.getLogger(__name__)

HEADER = "X-Request-Id"
_SENT_ID = re.compile(r"[\x21-\x7e]{1,128}")
QUIET_PATHS = frozenset({"/livez", "/readyz", "/healthz", "/metrics"})
# A batch may name many applications; the line names the first few.
_MAX_APPLICATIONS = 10


def install(app: Flask) -> None:
    """Give every request of `app` an id and an access line; called before any other hook is
    registered, so that a request refused by one still has both."""
    app.before_request(_begin)
    app.after_request(_finish)
    app.teardown_request(_end)


def request_id_of(sent: str | None) -> str:
    """The id a request is logged under: the one it sent when acceptable, else a new one."""
    if sent is not None and _SENT_ID.fullmatch(sent):
        return sent
    return secrets.token_hex(16)


def names(application: str) -> None:
    """This request names `application`, or acts on its alarms."""
    named: list[str] = g.setdefault("clock_applications", [])
    if application not in named and len(named) < _MAX_APPLICATIONS:
        named.append(application)


def authenticated_as(application: str) -> None:
    """This request's token covers `application` alone: the access line's application when
    the request names none."""
    g.clock_token_application = application


def _begin() -> None:
    request_id = request_id_of(request.headers.get(HEADER))
    g.clock_request_id = request_id
    g.clock_request_started = time.perf_counter()
    g.clock_request_token = REQUEST_ID.set(request_id)


def _finish(response: Response) -> Response:
    request_id: str | None = g.get("clock_request_id")
    if request_id is None:  # _begin did not run: nothing to say
        return response
    response.headers[HEADER] = request_id
    quiet = request.path in QUIET_PATHS and response.status_code < 500
    if log.isEnabledFor(logging.DEBUG if quiet else logging.INFO):
        line = AccessLine(
            method=request.method,
            route=request.url_rule.rule if request.url_rule is not None else None,
            status=response.status_code,
            application=_application(),
            request_id=request_id,
            started=g.clock_request_started,
            quiet=quiet,
        )
        response.call_on_close(line.write)
    return response


def _end(_error: BaseException | None) -> None:
    token = g.pop("clock_request_token", None)
    if token is not None:
        REQUEST_ID.reset(token)


def _application() -> str | None:
    named = list(g.get("clock_applications", ()))
    in_url = (request.view_args or {}).get("application")
    if isinstance(in_url, str) and in_url not in named:
        named.insert(0, in_url)
    if named:
        return ",".join(named)
    token_application: str | None = g.get("clock_token_application")
    return token_application


@dataclass(frozen=True)
class AccessLine:
    """What the access line of one request says, written when its answer is done."""

    method: str
    route: str | None  # None: no route matched (a 404, say)
    status: int
    application: str | None
    request_id: str
    started: float  # time.perf_counter() when the request began
    quiet: bool  # a probe's or /metrics' answer below 500: written at DEBUG

    def write(self) -> None:
        milliseconds = round((time.perf_counter() - self.started) * 1000, 1)
        log.log(
            logging.DEBUG if self.quiet else logging.INFO,
            "%s %s %d %.1f ms",
            self.method,
            self.route or "-",
            self.status,
            milliseconds,
            extra={
                "action": "http_request",
                "method": self.method,
                "route": self.route,
                "status": self.status,
                "duration_ms": milliseconds,
                "application": self.application,
                "request_id": self.request_id,
            },
        )
