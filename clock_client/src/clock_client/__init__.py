"""Client SDK of the clock service: create and manage alarms and applications over HTTP, consume
rings over AMQP or pull them over HTTP.

What needs an extra is imported when first used, so that the package imports without it:
``Consumer`` (``amqp``: pika), ``AsyncClockClient`` (``async``: httpx) and ``verify_webhook``
(``webhooks``: standardwebhooks)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .client import ClockClient
from .errors import (
    CapacityExceeded,
    ClockError,
    Conflict,
    Forbidden,
    NotFound,
    RateLimited,
    Unauthorized,
    Unavailable,
    ValidationError,
    WebhookVerificationError,
)
from .models import (
    AckResult,
    Alarm,
    AlarmEvent,
    AlarmMessage,
    AlarmPage,
    Application,
    ApplicationCounts,
    BatchResult,
    Counted,
    PulledMessage,
)
from .pull_consumer import PullConsumer
from .reports import CappedCount, Overview, Stats, StatsMinute, WhoAmI

if TYPE_CHECKING:
    from .async_client import AsyncClockClient
    from .consumer import Consumer
    from .webhooks import verify as verify_webhook

# name: (module, its attribute, the extra that installs what the module needs)
_WITH_AN_EXTRA = {
    "AsyncClockClient": ("async_client", "AsyncClockClient", "async"),
    "Consumer": ("consumer", "Consumer", "amqp"),
    "verify_webhook": ("webhooks", "verify", "webhooks"),
}

__all__ = [
    "AckResult",
    "Alarm",
    "AlarmEvent",
    "AlarmMessage",
    "AlarmPage",
    "Application",
    "ApplicationCounts",
    "AsyncClockClient",
    "BatchResult",
    "CapacityExceeded",
    "CappedCount",
    "ClockClient",
    "ClockError",
    "Conflict",
    "Consumer",
    "Counted",
    "Forbidden",
    "NotFound",
    "Overview",
    "PullConsumer",
    "PulledMessage",
    "RateLimited",
    "Stats",
    "StatsMinute",
    "Unauthorized",
    "Unavailable",
    "ValidationError",
    "WebhookVerificationError",
    "WhoAmI",
    "verify_webhook",
]


def __getattr__(name: str) -> Any:
    """A name of _WITH_AN_EXTRA, imported on first use; ImportError naming the extra when
    what it needs is not installed."""
    try:
        module, attribute, extra = _WITH_AN_EXTRA[name]
    except KeyError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    try:
        value = getattr(importlib.import_module(f".{module}", __name__), attribute)
    except ModuleNotFoundError as error:
        raise ImportError(
            f"clock_client.{name} needs {error.name}, which is not installed: "
            f"pip install 'clock-alarm-client[{extra}]'",
            name=error.name,
        ) from error
    globals()[name] = value
    return value
