"""Client SDK of the clock service: create and manage alarms and applications over HTTP, consume
rings over AMQP or pull them over HTTP."""

from .client import ClockClient
from .consumer import Consumer
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
from .webhooks import verify as verify_webhook

__all__ = [
    "AckResult",
    "Alarm",
    "AlarmEvent",
    "AlarmMessage",
    "AlarmPage",
    "Application",
    "ApplicationCounts",
    "BatchResult",
    "CapacityExceeded",
    "ClockClient",
    "ClockError",
    "Conflict",
    "Consumer",
    "Counted",
    "Forbidden",
    "NotFound",
    "PullConsumer",
    "PulledMessage",
    "RateLimited",
    "Unauthorized",
    "Unavailable",
    "ValidationError",
    "WebhookVerificationError",
    "verify_webhook",
]
