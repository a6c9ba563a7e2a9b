"""In-memory twins of the service's ports, for fast unit tests without MySQL or RabbitMQ."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from clock_server.publishing import OutgoingMessage


class _Settled:
    def __init__(self, outcome: list[bool]) -> None:
        self.outcome = outcome

    def wait(self, timeout_s: float) -> list[bool]:
        return self.outcome


class InMemoryPublisher:
    """Publisher twin: keeps confirmed messages in a list and fails when told to.

    A message is False when the publisher is unhealthy or closed, when it is one of the next
    ``fail_next(n)`` messages, or when its application is in ``unroutable``; otherwise it is
    recorded and True. Safe to call from several threads.
    """

    def __init__(self) -> None:
        self.healthy = True
        self.closed = False
        self.unroutable: set[str] = set()
        self.batches: list[list[OutgoingMessage]] = []
        self._published: list[OutgoingMessage] = []
        self._failures_left = 0
        self._lock = threading.Lock()

    @property
    def published(self) -> list[OutgoingMessage]:
        """A copy of every message the twin confirmed, in publish order."""
        with self._lock:
            return list(self._published)

    def published_for(self, application: str) -> list[OutgoingMessage]:
        """The confirmed messages routed to ``application``."""
        return [m for m in self.published if m.application == application]

    def fail_next(self, count: int) -> None:
        """Make the next ``count`` messages offered while healthy come back False."""
        with self._lock:
            self._failures_left = count

    def publish_batch(self, messages: Sequence[OutgoingMessage], timeout_s: float) -> list[bool]:
        """Record and confirm each message unless a failure rule applies to it."""
        with self._lock:
            self.batches.append(list(messages))
            return [self._offer(message) for message in messages]

    def start_batch(self, messages: Sequence[OutgoingMessage]) -> _Settled:
        """Publish at once (see publish_batch); the returned handle gives the outcome."""
        return _Settled(self.publish_batch(messages, 0.0))

    def is_healthy(self) -> bool:
        """True while ``healthy`` is set and ``close()`` has not been called."""
        return self.healthy and not self.closed

    def close(self) -> None:
        """Refuse every later message."""
        self.closed = True

    def _offer(self, message: OutgoingMessage) -> bool:
        if not self.is_healthy():
            return False
        if self._failures_left > 0:
            self._failures_left -= 1
            return False
        if message.application in self.unroutable:
            return False
        self._published.append(message)
        return True


class SettableClock:
    """Clock twin: time stands still until a test sets or advances it."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = now_ms
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        with self._lock:
            return self._now_ms

    def set(self, now_ms: int) -> None:
        with self._lock:
            self._now_ms = now_ms

    def advance(self, ms: int) -> int:
        """Move time forward by `ms` and return the new now."""
        with self._lock:
            self._now_ms += ms
            return self._now_ms
