"""Typed errors raised by the clock client, mapped from the server's error bodies."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

# How much of a non-JSON error body goes into the message (a proxy's HTML page can be big).
_SNIPPET_CHARS = 200


class ClockError(Exception):
    """Root of every error the client raises.

    ``status_code`` is the HTTP status (None when no response was received),
    ``code`` the server's machine-readable code (e.g. ``"validation_error"``),
    ``message`` a human-readable text, ``field`` the offending request field when
    the server named one, and ``body`` the whole decoded error body (``{}`` when the
    body was not JSON).
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        code: str = "error",
        field: str | None = None,
        body: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.code = code
        self.field = field
        self.body: Mapping[str, Any] = body if body is not None else {}

    def __str__(self) -> str:
        where = f" (field {self.field!r})" if self.field else ""
        status = f"{self.status_code} " if self.status_code is not None else ""
        return f"{status}{self.code}: {self.message}{where}"


class ValidationError(ClockError):
    """The request was rejected as malformed or too large (400, 413); nothing changed."""


class Unauthorized(ClockError):
    """The server wants a valid bearer token (401)."""


class Forbidden(ClockError):
    """The token is valid but not allowed to do this (403)."""


class NotFound(ClockError):
    """No alarm with that (application, business_id), or no such registered application
    (404)."""


class Conflict(ClockError):
    """The alarm's status does not allow the operation (409).

    ``status`` is the alarm's current status as reported by the server
    (e.g. ``"cancelled"``, ``"rung"``), or None if the server did not say.
    """

    def __init__(self, message: str, *, status: str | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.status = status


class RateLimited(ClockError):
    """Over a limit (429 ``rate_limited``): the application's creation rate, and nothing was
    stored; or, for a pull with ``wait_s``, the pulls the server lets wait at once.

    ``retry_after_s`` is how many seconds to wait before trying again, from the
    ``Retry-After`` header or the error body (None if the server gave neither).
    """

    def __init__(self, message: str, *, retry_after_s: int | None = None, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.retry_after_s = retry_after_s


class CapacityExceeded(ClockError):
    """The application has as many pending alarms as it may (429 ``capacity_exceeded``);
    nothing was stored. Room is made as its alarms ring or are cancelled."""


class Unavailable(ClockError):
    """The service could not answer: 502/503/504 after retries, or no response at all.

    ``status_code`` is None when the connection failed or timed out; in that case an
    update may or may not have been applied (creates and cancels are idempotent and
    safe to repeat).
    """


class WebhookVerificationError(ClockError):
    """A webhook did not verify: a header missing, a timestamp more than five minutes off,
    no signature matching the secret, or a body that is not a JSON object. Do not act on
    it."""


_BY_STATUS: dict[int, type[ClockError]] = {
    400: ValidationError,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: ValidationError,
    429: RateLimited,
    502: Unavailable,
    503: Unavailable,
    504: Unavailable,
}


def error_from_body(
    status_code: int, body: Mapping[str, Any], retry_after: str | None = None
) -> ClockError:
    """Build the typed error for a decoded error body ``{"error": {...}}``.

    Used for whole responses and for failed items of a batch. Missing or odd-typed
    parts fall back to generic values instead of failing. ``retry_after`` is the
    response's ``Retry-After`` header, if any.
    """
    err = body.get("error")
    details: Mapping[str, Any] = err if isinstance(err, Mapping) else {}
    code = details.get("code")
    message = details.get("message")
    field = details.get("field")
    kwargs: dict[str, Any] = {
        "status_code": status_code,
        "code": code if isinstance(code, str) else f"http_{status_code}",
        "field": field if isinstance(field, str) else None,
        "body": body,
    }
    text = message if isinstance(message, str) and message else f"HTTP {status_code}"
    cls = _BY_STATUS.get(status_code, ClockError)
    if cls is Conflict:
        status = details.get("status")
        return Conflict(text, status=status if isinstance(status, str) else None, **kwargs)
    if status_code == 429 and code == "capacity_exceeded":
        return CapacityExceeded(text, **kwargs)
    if cls is RateLimited:
        seconds = _seconds(retry_after)
        if seconds is None:
            seconds = _seconds(details.get("retry_after_s"))
        return RateLimited(text, retry_after_s=seconds, **kwargs)
    return cls(text, **kwargs)


def _seconds(value: object) -> int | None:
    """Whole seconds from a Retry-After header (delta-seconds) or a JSON number."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return max(0, math.ceil(value))
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        return int(value.strip())
    return None


def error_from_response(
    status_code: int, content: bytes, reason: str = "", retry_after: str | None = None
) -> ClockError:
    """Build the typed error for an HTTP error response from its raw body (and its
    ``Retry-After`` header, if any).

    A body that is not an error object (an HTML page from a proxy, an empty body) still
    gives the error class for the status, with a message quoting the start of the body;
    a JSON object of another shape is kept in ``body``.
    """
    try:
        decoded = json.loads(content) if content else None
    except ValueError:
        decoded = None
    if isinstance(decoded, dict) and isinstance(decoded.get("error"), dict):
        return error_from_body(status_code, decoded, retry_after)
    snippet = content[:_SNIPPET_CHARS].decode("utf-8", errors="replace").strip()
    message = f"HTTP {status_code} {reason}".strip()
    if snippet:
        message = f"{message}: {snippet}"
    cls = _BY_STATUS.get(status_code, ClockError)
    body = decoded if isinstance(decoded, dict) else None
    if cls is RateLimited:
        return RateLimited(
            message,
            retry_after_s=_seconds(retry_after),
            status_code=status_code,
            code=f"http_{status_code}",
            body=body,
        )
    return cls(message, status_code=status_code, code=f"http_{status_code}", body=body)
