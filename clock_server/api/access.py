"""Bearer-token checks for /v1: who is calling (before each request), and for which application.

With no token configured every request passes. Otherwise every /v1 request needs
``Authorization: Bearer <token>`` (401 without a valid one), and each route asks
`authorize(application)` before it touches an alarm (403 for an application the token does
not cover). The probes (/livez, /readyz, /healthz) and /openapi.json stay open; /metrics too,
unless CLOCK_METRICS_TOKEN_REQUIRED asks for a token of every application.
Tokens are never logged: only the grant's label (where the token was configured) is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from flask import current_app, g, request

from clock_server.api import request_log
from clock_server.api.tokens import Grant, Tokens
from clock_server.errors import Forbidden, Unauthorized
from clock_server.model import ADMIN, ANONYMOUS

log = logging.getLogger(__name__)

_INVALID_TOKEN = 'Bearer realm="clock", error="invalid_token"'
_READS = frozenset({"GET", "HEAD", "OPTIONS"})


def authenticate() -> None:
    """Flask before_request hook: find the caller's grant or raise Unauthorized."""
    svc = current_app.extensions["clock"]
    grant = caller_grant(
        svc.tokens,
        svc.settings.metrics_token_required,
        request.method,
        request.path,
        request.headers.get("Authorization", ""),
        _rejected,
    )
    if grant is not None:
        g.clock_grant = grant
        if grant.applications is not None and len(grant.applications) == 1:
            request_log.authenticated_as(next(iter(grant.applications)))


def needs_token(path: str, metrics_token_required: bool) -> bool:
    """Whether a request for `path` must show a token (when tokens are configured)."""
    if path == "/v1" or path.startswith("/v1/"):
        return True
    return metrics_token_required and path == "/metrics"


def caller_grant(
    table: Tokens,
    metrics_token_required: bool,
    method: str,
    path: str,
    authorization: str,
    rejected: Callable[[str], None] | None = None,
) -> Grant | None:
    """The grant of the request's token, None when it needs none; Unauthorized or Forbidden
    when it may not go on. Pure: the HTTP server asks it too, before reading a body."""
    if not table.enabled or not needs_token(path, metrics_token_required):
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if not authorization:
        raise Unauthorized("this request needs an 'Authorization: Bearer <token>' header")
    if scheme.lower() != "bearer" or not token:
        if rejected is not None:
            rejected("not a bearer token")
        raise Unauthorized(
            "the Authorization header must be 'Bearer <token>'", challenge=_INVALID_TOKEN
        )
    grant = table.lookup(token)
    if grant is None:
        if rejected is not None:
            rejected("unknown token")
        raise Unauthorized("the bearer token is not valid", challenge=_INVALID_TOKEN)
    if grant.read_only and method not in _READS:
        raise Forbidden("this token may only read: it is configured with ':read'")
    if path == "/metrics" and not grant.is_admin:
        raise Forbidden("only a token for every application ('*' or '*:read') may read /metrics")
    return grant


def current_grant() -> Grant | None:
    """The grant of this request's token; None when authentication is off."""
    grant: Grant | None = g.get("clock_grant")
    return grant


def authorize(application: str) -> None:
    """Raise Forbidden unless this request's token covers `application`."""
    request_log.names(application)
    grant = current_grant()
    if grant is not None and not grant.allows(application):
        log.debug(
            "forbidden: %s may not use application %r",
            grant.label,
            application,
            extra={"action": "request_forbidden"},
        )
        raise Forbidden(f"this token may not use application {application!r}", field="application")


def actor(application: str) -> str:
    """Who this request acts as on `application`'s alarms, for their history: the application
    itself (its token covers it), "admin" for an admin token, "anonymous" with no tokens
    configured. Never the token, nor the grant's label."""
    grant = current_grant()
    if grant is None:
        return ANONYMOUS
    return ADMIN if grant.is_admin else application


class Creators:
    """Who this request creates alarms as, per application (`actor`): the token checked once
    per application it names (Forbidden for one it does not cover), not once per alarm of a
    batch."""

    def __init__(self) -> None:
        self._actors: dict[str, str] = {}

    def __call__(self, application: str) -> str:
        known = self._actors.get(application)
        if known is None:
            authorize(application)
            known = self._actors[application] = actor(application)
        return known


def authorize_admin(doing: str) -> None:
    """Raise Forbidden unless this request's token is an admin token (any request, when
    authentication is off); `doing` says what needs it."""
    grant = current_grant()
    if grant is not None and not grant.is_admin:
        raise Forbidden(f"only an admin token (one for '*') may {doing}")


def authorize_secrets(doing: str) -> None:
    """Raise Forbidden unless this request's token is an admin token that may write: a
    signing secret lets its holder forge what every receiver accepts, so a read-only token
    never sees one, though it reads everything else."""
    authorize_admin(doing)
    grant = current_grant()
    if grant is not None and grant.read_only:
        raise Forbidden(
            f"this token may only read, and only an admin token without ':read' may {doing}"
        )


def reads_only() -> bool:
    """Whether this request's token is configured with ':read'."""
    grant = current_grant()
    return grant is not None and grant.read_only


def admin_actor() -> str:
    """Who an admin request acts as, for the history: "admin", or "anonymous" without tokens."""
    return ANONYMOUS if current_grant() is None else ADMIN


def authorize_listing(application: str | None) -> None:
    """Listing every application needs an admin token; others must name one of theirs."""
    if application is not None:
        request_log.names(application)
    grant = current_grant()
    if grant is None:
        return
    if application is None:
        if not grant.is_admin:
            raise Forbidden(
                "this token may list only its own applications: give application=",
                field="application",
            )
        return
    authorize(application)


def _rejected(reason: str) -> None:
    log.info(
        "unauthorized %s %r: %s",
        request.method,
        request.path,
        reason,
        extra={"action": "request_unauthorized"},
    )
