"""What the engine needs from a message broker, independent of AMQP."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol

from clock_server.model import DeadLetter, OutgoingMessage
from clock_server.timesource import Clock


class PendingBatch(Protocol):
    """A batch handed to the broker whose confirms may still be on their way."""

    def wait(self, timeout_s: float) -> list[bool]:
        """The outcome, as publish_batch gives it, once confirmed or once the broker has
        said nothing (no confirm, no heartbeat) for `timeout_s` (`confirms.waits_on_s`)."""
        ...

    @property
    def refused(self) -> list[int]:
        """Once `wait` has returned: the indices of the messages the broker refused (nacked,
        or returned as unroutable), the receiving side's failure. Any other False of the
        outcome was never settled (no connection, a blocked connection, no confirm in time):
        the service's own trouble, which spends none of an alarm's attempts."""
        ...


class TimedGroup(NamedTuple):
    """`size` messages to send together the moment `at_ms` comes, never before, made by
    `make` for the moment they go out; a message whose cutoff (`not_after_ms`, one per
    message or None for none) has passed by then is not sent."""

    at_ms: int
    size: int
    make: Callable[[int], Sequence[OutgoingMessage]]
    not_after_ms: Sequence[int | None] | None = None

    def too_late(self, now_ms: int) -> list[int]:
        """The indices of the messages whose cutoff has passed by `now_ms`."""
        if self.not_after_ms is None:
            return []
        return [i for i, cut in enumerate(self.not_after_ms) if cut is not None and cut < now_ms]


class TimedBatch(PendingBatch, Protocol):
    """A `TimedGroup` handed to the broker. Once `wait` has returned, `sent_at_ms` is when its
    moment was found to have come, on the clock it was given (None if that never happened),
    and `too_late` the indices of the messages not sent because their cutoff had passed by
    then (False in the outcome)."""

    @property
    def sent_at_ms(self) -> int | None: ...

    @property
    def too_late(self) -> list[int]: ...


class Publisher(Protocol):
    """Publishes batches of messages and says which ones the broker took."""

    def publish_batch(self, messages: Sequence[OutgoingMessage], timeout_s: float) -> list[bool]:
        """Publish every message, persistent and mandatory, with confirms pipelined.

        Returns one flag per message, in order: True only when the broker confirmed the
        message and did not return it as unroutable. A broker that is down, a nack, a
        return, or a broker that said nothing for ``timeout_s`` (at most
        `settings.PUBLISH_PATIENCE` timeouts in all while it still talks) gives False; the
        call never raises for broker trouble.
        """
        ...

    def start_batch(self, messages: Sequence[OutgoingMessage]) -> PendingBatch:
        """Start publishing and return at once, so later messages need not wait for these
        confirms. publish_batch(m, t) is start_batch(m).wait(t)."""
        ...

    def start_timed(self, groups: Sequence[TimedGroup], clock: Clock) -> list[TimedBatch]:
        """Hand every group over at once and return; each is sent when its moment comes on
        `clock`, so that the caller need not wake at each moment. One `TimedBatch` per group,
        in order."""
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
