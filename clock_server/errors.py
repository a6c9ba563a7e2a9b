"""One error root for the service; the HTTP layer maps these to status codes in one place."""

from __future__ import annotations


class ClockError(Exception):
    """Root of every error the service raises on purpose."""

    code = "error"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field


class ValidationError(ClockError):
    """The request is malformed or breaks a rule; nothing was changed."""

    code = "validation_error"


class PayloadTooLarge(ValidationError):
    """The body or the payload is over the configured limit."""

    code = "payload_too_large"


class UnsupportedMediaType(ClockError):
    """The request's body, or its Content-Type, is not JSON; nothing was read or changed."""

    code = "unsupported_media_type"


class MisdirectedRequest(ClockError):
    """The request names a Host this server does not answer to."""

    code = "misdirected_request"


class Unauthorized(ClockError):
    """The request carries no valid bearer token (tokens are configured)."""

    code = "unauthorized"

    def __init__(self, message: str, *, challenge: str = 'Bearer realm="clock"') -> None:
        super().__init__(message)
        self.challenge = challenge  # the WWW-Authenticate header value


class Forbidden(ClockError):
    """The token is valid but does not cover the application."""

    code = "forbidden"


class NotFound(ClockError):
    """No alarm with that (application, business_id)."""

    code = "not_found"


class Conflict(ClockError):
    """The alarm is in a status that does not allow the operation."""

    code = "conflict"

    def __init__(self, message: str, *, status: str, field: str | None = None) -> None:
        super().__init__(message, field=field)
        self.status = status


class RateLimited(ClockError):
    """Over a limit: the application's creation rate (nothing was stored), or the pulls a
    web process lets wait at once. Try again in `retry_after_s` seconds."""

    code = "rate_limited"

    def __init__(self, message: str, *, retry_after_s: int, field: str | None = None) -> None:
        super().__init__(message, field=field)
        self.retry_after_s = retry_after_s


class CapacityExceeded(ClockError):
    """The application has as many pending alarms as it may; nothing was stored."""

    code = "capacity_exceeded"


class Unavailable(ClockError):
    """A backing service (database or broker) cannot be reached right now."""

    code = "unavailable"


class ConfigError(ClockError):
    """A setting has a value the service cannot run with."""

    code = "config_error"
