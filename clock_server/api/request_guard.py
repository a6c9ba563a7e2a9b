"""What a request must show before anything reads its body: a Host this server answers to, no
foreign browser origin, a JSON body of the route's size.

A page of another site can make a browser send requests to clock, and, with DNS rebinding
(a name of the attacker's that resolves to clock's address), read the answers. Authentication
off is the zero-configuration default, so the request itself must show it is not one of
those:
- `Host` is one of the names served (`CLOCK_ALLOWED_HOSTS`; by default, on loopback, the
  loopback names), so a rebound name is refused; the probes answer to any Host, as
  orchestrators probe by address;
- an `Origin` header names this server itself (or `CLOCK_ALLOWED_ORIGINS`), and no change
  comes with `Sec-Fetch-Site: cross-site`;
- a change (POST, PUT, PATCH, DELETE) that carries a body or a `Content-Type` says
  `application/json`: what an HTML form or a "simple" cross-origin request can send (a
  `text/plain` or urlencoded form, even an empty one) is refused;
- a body is no longer than its route takes.

The same checks tell the HTTP server, once a request's headers are in, whether the app will
answer without reading the body (refused whatever the body holds, or a route that takes
none): the server then does not read it either, and closes the connection after the answer
(`BodyGate`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import urlsplit

from flask import Flask, current_app, request
from werkzeug.exceptions import HTTPException
from werkzeug.routing import MapAdapter

from clock_server.api import action_routes, application_routes, pull_routes, routes
from clock_server.api.access import caller_grant
from clock_server.api.tokens import Tokens, is_loopback
from clock_server.errors import (
    ClockError,
    ConfigError,
    Forbidden,
    MisdirectedRequest,
    PayloadTooLarge,
    UnsupportedMediaType,
    ValidationError,
)
from clock_server.settings import Settings

Header = Callable[[str], str | None]  # a request header by name, None when absent

PROBES = frozenset({"/livez", "/readyz", "/healthz"})
# In a request's WSGI environment, True when the HTTP server's gate (`BodyGate`) made the
# Host, Origin, token and body checks of its headers and they passed.
SCREENED = "clock.screened"
CHANGES = frozenset({"POST", "PUT", "PATCH", "DELETE"})
JSON = "application/json"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
_DEFAULT_PORTS = {"http": "80", "https": "443"}
_EXTENSION = "clock_request_guard"
# The gate keeps the endpoints of this many recent (method, path) pairs, paths of at most
# PATH_KEPT_CHARS: the creates' one path, and a little memory for the rest.
ENDPOINTS_KEPT = 256
PATH_KEPT_CHARS = 256


@dataclass(frozen=True)
class BodyLimit:
    """The longest body a route takes, and how its 413 names that limit."""

    bytes_for: Callable[[Settings], int]
    name: str


_SINGLE = BodyLimit(lambda s: s.single_body_max_bytes, "six times CLOCK_PAYLOAD_MAX_BYTES")
_SMALL = BodyLimit(lambda s: action_routes.BODY_MAX_BYTES, "16 KiB")
# Each route that reads a body, by endpoint; every other route takes none.
BODY_LIMITS: dict[str, BodyLimit] = {
    "api.create_alarm": _SINGLE,
    "api.update_alarm": _SINGLE,
    "api.create_alarms": BodyLimit(lambda s: s.batch_max_bytes, "CLOCK_BATCH_MAX_BYTES"),
    "api.count_alarm": BodyLimit(lambda s: routes.INCREMENT_MAX_BYTES, "1 KiB"),
    "actions.redrive": _SMALL,
    "actions.bulk_redrive": _SMALL,
    "actions.bulk_cancel": _SMALL,
    "applications.replace_application": BodyLimit(
        lambda s: application_routes.BODY_MAX_BYTES, "16 KiB"
    ),
    "applications.change_application": BodyLimit(
        lambda s: application_routes.BODY_MAX_BYTES, "16 KiB"
    ),
    "applications.rotate_webhook_secret": BodyLimit(
        lambda s: application_routes.BODY_MAX_BYTES, "16 KiB"
    ),
    "pulls.pull": BodyLimit(lambda s: pull_routes.PULL_BODY_MAX_BYTES, "1 KiB"),
    "pulls.ack": BodyLimit(lambda s: pull_routes.ACK_BODY_MAX_BYTES, "64 KiB"),
    "schedules.replace_schedule": _SINGLE,
    "schedules.change_schedule": _SINGLE,
    "schedules.pause_schedule": _SMALL,
    "schedules.resume_schedule": _SMALL,
}


@dataclass(frozen=True)
class HostNames:
    """The Host names served: each a name, or a name and port; None serves any."""

    names: frozenset[str] | None

    def allows(self, host: str) -> bool:
        if self.names is None:
            return True
        name, port = split_host(host)
        return name in self.names or f"{name}:{port}" in self.names

    def __str__(self) -> str:
        return "any name" if self.names is None else ", ".join(sorted(self.names))


def split_host(host: str) -> tuple[str, str]:
    """A Host header as (name, port), lower case, "" for no port; IPv6 keeps its brackets."""
    host = host.strip().lower()
    if host.startswith("["):
        name, _, rest = host.partition("]")
        return f"{name}]", rest.removeprefix(":")
    name, colon, port = host.rpartition(":")
    if not colon:
        return host.rstrip("."), ""
    return name.rstrip("."), port


def served_hosts(settings: Settings, tokens: Tokens) -> HostNames:
    """The names this server answers to; ConfigError when none is safe to assume."""
    configured = [part.strip().lower() for part in settings.allowed_hosts.split(",")]
    configured = [part for part in configured if part]
    if "*" in configured:
        return HostNames(None)
    if configured:
        return HostNames(frozenset(configured))
    if is_loopback(settings.host):
        bound = settings.host.strip().lower()
        bound = f"[{bound}]" if ":" in bound and not bound.startswith("[") else bound
        return HostNames(frozenset({bound, *LOOPBACK_NAMES}))
    if tokens.enabled:  # every request but the probes needs a token a rebound page lacks
        return HostNames(None)
    raise ConfigError(
        f"CLOCK_HOST={settings.host!r} without tokens needs CLOCK_ALLOWED_HOSTS: the names "
        "clients reach this server by (say clock.internal,clock.internal:8080), so that a page "
        "of another site cannot reach it under a name of its own (DNS rebinding); '*' serves "
        "any name",
        field="allowed_hosts",
    )


def served_origins(settings: Settings) -> frozenset[str]:
    """CLOCK_ALLOWED_ORIGINS as normalized origins; ConfigError for one that is not."""
    origins = set()
    for part in settings.allowed_origins.split(","):
        if not part.strip():
            continue
        origin = normalized_origin(part)
        if origin is None:
            raise ConfigError(
                f"CLOCK_ALLOWED_ORIGINS: {part.strip()!r} is not an origin "
                "(http or https://name[:port], without a path)",
                field="allowed_origins",
            )
        origins.add(origin)
    return frozenset(origins)


def normalized_origin(origin: str) -> str | None:
    """scheme://name[:port] in lower case without its scheme's default port; None if not
    an http or https origin."""
    try:
        parts = urlsplit(origin.strip().lower())
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        return None
    if parts.scheme not in _DEFAULT_PORTS or not parts.netloc or parts.path not in ("", "/"):
        return None
    if parts.query or parts.fragment or "@" in parts.netloc:
        return None
    netloc = parts.netloc.removesuffix(":" + _DEFAULT_PORTS[parts.scheme])
    return f"{parts.scheme}://{netloc}"


@dataclass(frozen=True)
class RequestGuard:
    """The checks above, built once from the settings."""

    settings: Settings
    tokens: Tokens
    hosts: HostNames
    origins: frozenset[str]

    @classmethod
    def build(cls, settings: Settings, tokens: Tokens) -> RequestGuard:
        return cls(settings, tokens, served_hosts(settings, tokens), served_origins(settings))

    def screen(self, method: str, path: str, header: Header) -> None:
        """Host, Origin and Sec-Fetch-Site: MisdirectedRequest or Forbidden."""
        host = header("Host")
        if host is not None and path not in PROBES and not self.hosts.allows(host):
            raise MisdirectedRequest(
                f"this server does not answer to the name {host!r}; it serves {self.hosts} "
                "(CLOCK_ALLOWED_HOSTS)",
                field="Host",
            )
        origin = header("Origin")
        if origin is not None and not self._serves_origin(origin, host or ""):
            raise Forbidden(
                f"requests from the origin {origin!r} are refused: only this server's own "
                "pages, and the origins in CLOCK_ALLOWED_ORIGINS, may call it",
                field="Origin",
            )
        fetch_site = (header("Sec-Fetch-Site") or "").strip().lower()
        if method in CHANGES and fetch_site == "cross-site":
            raise Forbidden(
                "a cross-site request (Sec-Fetch-Site: cross-site) may not change anything",
                field="Sec-Fetch-Site",
            )

    def _serves_origin(self, origin: str, host: str) -> bool:
        normalized = normalized_origin(origin)
        if normalized is None:  # "null" (a sandboxed page, a file), or garbage
            return False
        if normalized in self.origins:
            return True
        scheme, _, netloc = normalized.partition("://")
        return netloc == host.strip().lower().removesuffix(":" + _DEFAULT_PORTS[scheme])

    def screen_body(
        self, method: str, endpoint: str | None, content_type: str | None, length: int | None,
        chunked: bool,
    ) -> None:  # fmt: skip
        """UnsupportedMediaType for a change whose body or Content-Type is not JSON;
        PayloadTooLarge for a declared length over the route's limit."""
        has_body = bool(length) or chunked
        if method in CHANGES and (content_type is not None or has_body):
            media = (content_type or "").split(";", 1)[0].strip().lower()
            if media != JSON:
                said = f"not {media!r}" if media else "and this request names none"
                raise UnsupportedMediaType(
                    f"a request body must be sent as 'Content-Type: {JSON}', {said}",
                    field="Content-Type",
                )
        limit = BODY_LIMITS.get(endpoint or "")
        if limit is None or not length:
            return  # a route that takes no body never reads one
        most = limit.bytes_for(self.settings)
        if length > most:
            raise PayloadTooLarge(
                f"the request body is {length} bytes, over the limit of {most} ({limit.name})"
            )


def install(app: Flask, guard: RequestGuard) -> None:
    """Keep `guard` on `app`, for the hooks below and for the HTTP server's BodyGate."""
    app.extensions[_EXTENSION] = guard


def screened() -> bool:
    """Whether the HTTP server's gate already made the checks of `screen_request` and
    `screen_body` for this request, with the same headers (no proxy of
    CLOCK_TRUSTED_PROXY_HOPS rewrites any of them: werkzeug's ProxyFix moves only the
    prefix), and they passed."""
    return request.environ.get(SCREENED) is True


def screen_request() -> None:
    """Flask before_request hook: Host and Origin."""
    guard: RequestGuard = current_app.extensions[_EXTENSION]
    guard.screen(request.method, request.path, request.headers.get)


def screen_query() -> None:
    """Flask before_request hook, after authentication: no query parameter of a /v1 route
    given twice (of `?minutes=5&minutes=abc` no route could say which one it answered)."""
    if not request.query_string or not request.path.startswith("/v1/"):
        return  # no query; the probes, /metrics and the document take no parameters
    for name in request.args:
        if len(request.args.getlist(name)) > 1:
            raise ValidationError(f"the query parameter {name} is given more than once", field=name)


def screen_body() -> None:
    """Flask before_request hook, after authentication: the body's type and length."""
    guard: RequestGuard = current_app.extensions[_EXTENSION]
    chunked = "chunked" in request.headers.get("Transfer-Encoding", "").lower()
    guard.screen_body(
        request.method,
        request.endpoint,
        request.headers.get("Content-Type"),
        request.content_length,
        chunked,
    )


class BodyGate:
    """For the HTTP server: once a request's headers are in, whether the app will answer it
    without reading its body (it refuses the request whatever the body holds, or the route
    takes no body), so that the server need not read it. Runs in the server's one I/O
    thread: a route lookup and a token digest, no I/O."""

    def __init__(self, app: Flask) -> None:
        self.guard: RequestGuard = app.extensions[_EXTENSION]
        self._routes: MapAdapter = app.url_map.bind("localhost")
        # The router's state machine was half of the gate's time, for the same few paths.
        self._endpoints = lru_cache(maxsize=ENDPOINTS_KEPT)(self._endpoint)

    @classmethod
    def of(cls, app: object) -> BodyGate | None:
        """The gate of a clock app; None for any other WSGI app."""
        if isinstance(app, Flask) and _EXTENSION in app.extensions:
            return cls(app)
        return None

    def body_unread(
        self, method: str, path: str, header: Header, length: int, chunked: bool
    ) -> bool:
        if len(path) <= PATH_KEPT_CHARS:
            endpoint = self._endpoints(method, path)
        else:
            endpoint = self._endpoint(method, path)
        if endpoint not in BODY_LIMITS:
            return True
        settings = self.guard.settings
        try:
            self.guard.screen(method, path, header)
            authorization = header("Authorization") or ""
            caller_grant(
                self.guard.tokens, settings.metrics_token_required, method, path, authorization
            )
            self.guard.screen_body(method, endpoint, header("Content-Type"), length, chunked)
        except ClockError:
            return True
        return False

    def _endpoint(self, method: str, path: str) -> str | None:
        """The endpoint of the route `method` and `path` reach; None for none (404, 405), or
        a redirect."""
        try:
            endpoint, _ = self._routes.match(path, method)
        except HTTPException:
            return None
        return str(endpoint)
