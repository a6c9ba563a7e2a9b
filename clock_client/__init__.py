"""Client SDK of the clock service: create and manage alarms and applications over HTTP, consume
rings over AMQP."""

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
)
from .models import (
    Alarm,
    AlarmEvent,
    AlarmMessage,
    AlarmPage,
    Application,
    ApplicationCounts,
    BatchResult,
    Counted,
)

__all__ = [
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
    "RateLimited",
    "Unauthorized",
    "Unavailable",
    "ValidationError",
]
