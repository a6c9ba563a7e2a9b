"""The Flask application factory."""

from __future__ import annotations

from typing import Any

import orjson
from flask import Flask, Response
from flask.json.provider import DefaultJSONProvider
from werkzeug.exceptions import HTTPException
from werkzeug.routing import PathConverter
from werkzeug.sansio.response import Response as BaseResponse

from clock_server.api import request_log
from clock_server.api.access import authenticate
from clock_server.api.action_routes import actions
from clock_server.api.application_routes import applications
from clock_server.api.console.overview_routes import overview
from clock_server.api.console.pages import console
from clock_server.api.forwarded import trust_proxies
from clock_server.api.health_routes import health
from clock_server.api.http_errors import clock_error, http_error, unexpected_error
from clock_server.api.pull_routes import pulls
from clock_server.api.request_guard import (
    RequestGuard,
    install,
    screen_body,
    screen_query,
    screen_request,
    screened,
)
from clock_server.api.routes import allow_sub_resource_methods, api
from clock_server.api.schedule_routes import schedules
from clock_server.api.services import Services
from clock_server.api.stats_routes import stats
from clock_server.errors import ClockError


def create_app(services: Services) -> Flask:
    """A Flask app serving /v1, /livez, /readyz, /healthz, /metrics, /openapi.json and
    /console over `services`."""
    app = Flask("clock_server")
    app.json = OrjsonProvider(app)
    app.extensions["clock"] = services
    # A business_id may start with "/" or hold a line break: /v1/alarms/app//x must reach the
    # alarm "/x", not be redirected (308, method kept) to the different alarm "x".
    app.url_map.merge_slashes = False
    app.url_map.converters["path"] = _AnyPath
    install(app, RequestGuard.build(services.settings, services.tokens))
    request_log.install(app)  # first: a request refused by a hook below still has its id
    app.before_request(before_route)
    app.after_request(after_route)
    app.register_blueprint(api)
    app.register_blueprint(health)
    app.register_blueprint(applications)
    app.register_blueprint(actions)
    app.register_blueprint(overview)
    app.register_blueprint(pulls)
    app.register_blueprint(console)
    app.register_blueprint(stats)
    app.register_blueprint(schedules)
    app.register_error_handler(ClockError, clock_error)
    app.register_error_handler(HTTPException, http_error)
    app.register_error_handler(Exception, unexpected_error)
    trust_proxies(app, services.settings.trusted_proxy_hops)
    return app


def before_route() -> None:
    """What a request must show before its route runs, in this order. One hook rather than
    four, since Flask's own cost is per hook and per request. The Host, Origin and body
    checks are not made twice when the HTTP server's gate made them of the same headers."""
    gated = screened()
    if not gated:
        screen_request()  # a Host served, no foreign Origin
    authenticate()  # 401 for /v1 without a valid token, when tokens are set; the grant
    screen_query()  # no query parameter given twice
    if not gated:
        screen_body()  # a JSON body within the route's limit


def after_route(response: Response) -> Response:
    """Every answer is read as the type it says it is, never sniffed as another; a 405 or
    an OPTIONS answer on an alarm's sub-resource lists that sub-resource's methods."""
    response.headers["X-Content-Type-Options"] = "nosniff"
    return allow_sub_resource_methods(response)


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
