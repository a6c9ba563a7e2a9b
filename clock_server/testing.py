"""In-memory twins of the service's ports, for fast unit tests without MySQL or RabbitMQ."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from clock_server.broker.publisher import TimedGroup
from clock_server.model import DeadLetter, OutgoingMessage
from clock_server.timesource import Clock


class _Settled:
    def __init__(self, outcome: list[bool], refused: list[int]) -> None:
        self.outcome = outcome
        self.refused = refused

    def wait(self, timeout_s: float) -> list[bool]:
        return self.outcome


class _TimedInMemory:
    """A timed group of the twin. The thread that waits for a group of a `start_timed` call
    sends it, and every earlier group of that call not sent yet first, in order, each once
    its moment has come on the clock (sleeping on the clock until then). A group whose moment
    is further off on the clock than the wait's timeout is given up on, all False, and never
    sent: as the real publisher does when its moment does not come within the timeout."""

    def __init__(self, groups: _TimedGroups, index: int) -> None:
        self._groups = groups
        self._index = index
        self.sent_at_ms: int | None = None
        self.too_late: list[int] = []
        self.outcome: list[bool] = []
        self.refused: list[int] = []

    def wait(self, timeout_s: float) -> list[bool]:
        self._groups.send_through(self._index, timeout_s)
        return self.outcome


class _TimedGroups:
    def __init__(
        self, publisher: InMemoryPublisher, groups: Sequence[TimedGroup], clock: Clock
    ) -> None:
        self._publisher = publisher
        self._groups = list(groups)
        self._clock = clock
        self.handles = [_TimedInMemory(self, index) for index in range(len(self._groups))]
        self._sent = 0
        self._lock = threading.Lock()

    def send_through(self, index: int, timeout_s: float) -> None:
        give_up_after_ms = self._clock.now_ms() + int(timeout_s * 1000)
        with self._lock:
            while self._sent <= index:
                self._send(self._groups[self._sent], self.handles[self._sent], give_up_after_ms)
                self._sent += 1

    def _send(self, group: TimedGroup, handle: _TimedInMemory, give_up_after_ms: int) -> None:
        if group.at_ms > give_up_after_ms:
            handle.outcome = [False] * group.size
            return
        self._clock.sleep_until(group.at_ms)
        now_ms = handle.sent_at_ms = self._clock.now_ms()
        handle.too_late = group.too_late(now_ms)
        late = set(handle.too_late)
        messages = group.make(now_ms)
        kept = [i for i in range(len(messages)) if i not in late]
        if not kept:
            handle.outcome = [False] * len(messages)
            return
        settled = self._publisher.start_batch([messages[i] for i in kept])
        flags = dict(zip(kept, settled.wait(0.0), strict=True))
        handle.outcome = [flags.get(i, False) for i in range(len(messages))]
        handle.refused = [kept[i] for i in settled.refused]


class InMemoryPublisher:
    """Publisher twin: keeps confirmed messages in a list and fails when told to.

    A message is False when the publisher is unhealthy or closed (never settled, as with no
    connection), or refused when it is one of the next ``fail_next(n)`` messages (a nack) or
    its application is in ``unroutable``; otherwise it is recorded and True. Safe to call
    from several threads.
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
        """Publish at once (see publish_batch); the returned handle gives the outcome. The
        failures of a healthy twin are refusals; an unhealthy one's were never settled."""
        healthy = self.is_healthy()
        flags = self.publish_batch(messages, 0.0)
        refused = [index for index, ok in enumerate(flags) if not ok] if healthy else []
        return _Settled(flags, refused)

    def start_timed(self, groups: Sequence[TimedGroup], clock: Clock) -> list[_TimedInMemory]:
        """Each group is published (by start_batch), in order, when a waiter for it or for a
        later group of this call finds its moment come."""
        return _TimedGroups(self, groups, clock).handles

    def start(self) -> None:
        """Nothing to connect: the twin takes messages from the start."""

    def is_healthy(self) -> bool:
        """True while ``healthy`` is set and ``close()`` has not been called."""
        return self.healthy and not self.closed

    def close(self, timeout_s: float = 0.0) -> None:
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


class InMemoryDeadLetterPublisher:
    """DeadLetterPublisher twin: keeps the letters it confirmed; while `healthy` is False, or
    for the next `fail_next(n)` letters, it confirms nothing (and every later letter of the
    batch fails too, as the AMQP publisher's blocking channel stops at the first failure)."""

    def __init__(self) -> None:
        self.healthy = True
        self.published: list[DeadLetter] = []
        self._failures_left = 0

    def fail_next(self, count: int) -> None:
        self._failures_left = count

    def publish_dead(self, letters: Sequence[DeadLetter], timeout_s: float) -> list[bool]:
        outcome: list[bool] = []
        for letter in letters:
            ok = self.healthy and self._failures_left == 0 and all(outcome)
            if self._failures_left:
                self._failures_left -= 1
            if ok:
                self.published.append(letter)
            outcome.append(ok)
        return outcome


class SettableClock:
    """Clock twin: time stands still until a test sets or advances it.

    Waits are on this clock's time: sleep_until() returns once a test has moved the time that
    far, and wait() once its event is set or the time has moved past its timeout. A test that
    needs to know a thread is waiting asks wait_for_sleepers(). A wait that nothing ends within
    `stuck_after_s` of real time raises, so a test that forgot to advance fails instead of
    hanging.
    """

    def __init__(self, now_ms: int = 1_700_000_000_000, stuck_after_s: float = 30.0) -> None:
        self._now_ms = now_ms
        self._stuck_after_s = stuck_after_s
        self._changed = threading.Condition()
        self._sleeping: list[int] = []  # what each thread in sleep_until waits for
        self._waiters = 0  # threads in wait

    def now_ms(self) -> int:
        with self._changed:
            return self._now_ms

    def set(self, now_ms: int) -> None:
        with self._changed:
            self._now_ms = now_ms
            self._changed.notify_all()

    def advance(self, ms: int) -> int:
        """Move time forward by `ms` and return the new now."""
        with self._changed:
            self._now_ms += ms
            self._changed.notify_all()
            return self._now_ms

    def sleep_until(self, at_ms: int) -> None:
        with self._changed:
            self._sleeping.append(at_ms)
            self._changed.notify_all()
            try:
                ended = self._changed.wait_for(
                    lambda: self._now_ms >= at_ms, timeout=self._stuck_after_s
                )
            finally:
                self._sleeping.remove(at_ms)
        if not ended:
            raise TimeoutError(f"nobody advanced the clock to {at_ms}")

    def wait(self, event: threading.Event, timeout_ms: int) -> bool:
        until_ms = self.now_ms() + timeout_ms
        give_up = time.monotonic() + self._stuck_after_s
        with self._changed:
            self._waiters += 1
            self._changed.notify_all()
            try:
                # An Event cannot wake this condition, so look at it every millisecond.
                while not event.is_set() and self._now_ms < until_ms:
                    if time.monotonic() > give_up:
                        raise TimeoutError(f"nobody advanced the clock to {until_ms}")
                    self._changed.wait(0.001)
            finally:
                self._waiters -= 1
        return event.is_set()

    @property
    def sleepers(self) -> int:
        """Threads in sleep_until for a moment still to come (one whose moment has come counts
        no more, even before it has woken)."""
        with self._changed:
            return self._count_sleepers()

    def next_wake_ms(self) -> int | None:
        """The earliest moment a thread in sleep_until waits for, if any is still to come."""
        with self._changed:
            return min((at_ms for at_ms in self._sleeping if at_ms > self._now_ms), default=None)

    def _count_sleepers(self) -> int:
        return sum(1 for at_ms in self._sleeping if at_ms > self._now_ms)

    @property
    def waiters(self) -> int:
        """Threads in wait now."""
        with self._changed:
            return self._waiters

    def wait_for_sleepers(self, count: int, timeout_s: float = 5.0) -> None:
        """Block (in real time) until `count` threads are in sleep_until."""
        with self._changed:
            if not self._changed.wait_for(lambda: self._count_sleepers() >= count, timeout_s):
                raise TimeoutError(f"{self._count_sleepers()} threads sleep on the clock")

    def wait_for_waiters(self, count: int, timeout_s: float = 5.0) -> None:
        """Block (in real time) until `count` threads are in wait (idle loops, say)."""
        with self._changed:
            if not self._changed.wait_for(lambda: self._waiters >= count, timeout=timeout_s):
                raise TimeoutError(f"{self._waiters} threads wait on the clock, not {count}")
