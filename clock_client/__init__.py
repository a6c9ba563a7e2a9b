"""Client SDK of the clock service: create and manage alarms over HTTP, consume rings over AMQP."""

from .client import ClockClient
from .consumer import Consumer
from .errors import (
    ClockError,
    Conflict,
    Forbidden,
    NotFound,
    Unauthorized,
    Unavailable,
    ValidationError,
)
from .models import Alarm, AlarmMessage, AlarmPage, BatchResult

__all__ = [
    "Alarm",
    "AlarmMessage",
    "AlarmPage",
    "BatchResult",
    "ClockClient",
    "ClockError",
    "Conflict",
    "Consumer",
    "Forbidden",
    "NotFound",
    "Unauthorized",
    "Unavailable",
    "ValidationError",
]
