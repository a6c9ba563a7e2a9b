"""What the engine needs from a message broker, independent of AMQP."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from clock_server.model import DeadLetter, OutgoingMessage


class PendingBatch(Protocol):
    """A batch handed to the broker whose confirms may still be on their way."""

    def wait(self, timeout_s: float) -> list[bool]:
        """The outcome, as publish_batch gives it, once confirmed or after `timeout_s`."""
        ...


class Publisher(Protocol):
    """Publishes batches of messages and says which ones the broker took."""

    def publish_batch(self, messages: Sequence[OutgoingMessage], timeout_s: float) -> list[bool]:
        """Publish every message, persistent and mandatory, with confirms pipelined.

        Returns one flag per message, in order: True only when the broker confirmed the
        message and did not return it as unroutable. A broker that is down, a nack, a
        return or no confirm within ``timeout_s`` gives False; the call never raises
        for broker trouble.
        """
        ...

    def start_batch(self, messages: Sequence[OutgoingMessage]) -> PendingBatch:
        """Start publishing and return at once, so later messages need not wait for these
        confirms. publish_batch(m, t) is start_batch(m).wait(t)."""
        ...

    def is_healthy(self) -> bool:
        """True while a connection to the broker is open."""
        ...

    def close(self, timeout_s: float) -> None:
        """Fail what is still in flight and close the connection, within `timeout_s`."""
        ...


class DeadLetterPublisher(Protocol):
    """Publishes dead alarms to the dead-letter exchange, routed by application."""

    def publish_dead(self, letters: Sequence[DeadLetter], timeout_s: float) -> list[bool]:
        """Publish each letter, persistent, with confirms; one flag per letter, in order: True
        only when the broker confirmed it. A broker that is down, a nack or no confirm within
        about `timeout_s` gives False; the call never raises for broker trouble."""
        ...
