"""A thread that repeats one step, waiting in between on a wake-up that is never lost."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from clock_server.errors import ClockError
from clock_server.timesource import Clock

log = logging.getLogger(__name__)


class Waker:
    """A wait on the Clock with the promise that a wake() during the step skips the next wait,
    and that a wake_by() during the step or the wait ends the wait by then."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._woken = False
        self._by_ms: int | None = None

    def wake(self) -> None:
        with self._lock:
            self._woken = True
        self._event.set()

    def wake_by(self, at_ms: int) -> None:
        """End the wait by `at_ms` (at once if that has passed). Many calls before the wait
        ends cost the waiting thread one wake-up each only when they move its end sooner."""
        with self._lock:
            if self._by_ms is not None and self._by_ms <= at_ms:
                return
            self._by_ms = at_ms
        self._event.set()

    def arm(self) -> None:
        """Forget earlier wakes, and the end a wake_by() asked for: the step about to run
        does what they asked. Called before the step, so wakes during it still count."""
        with self._lock:
            self._woken = False
            self._by_ms = None
            self._event.clear()

    def wait(self, timeout_s: float) -> None:
        until_ms = self.clock.now_ms() + wait_ms(timeout_s)
        while True:
            now_ms = self.clock.now_ms()
            with self._lock:
                if self._woken or (self._by_ms is not None and self._by_ms <= now_ms):
                    return
                end_ms = until_ms if self._by_ms is None else min(until_ms, self._by_ms)
                self._event.clear()  # set again by a wake or wake_by from here on
            if end_ms <= now_ms or not self.clock.wait(self._event, end_ms - now_ms):
                return


def wait_ms(timeout_s: float) -> int:
    """How long a wait of `timeout_s` lasts at most, in whole ms (at least one)."""
    return max(int(timeout_s * 1000), 1)


class StepLoop:
    """Runs `step` in a thread; `step` returns seconds to wait, 0 to go again, None to idle.

    `beat_ms` says until when the loop is known to be well, for /livez: the moment its latest
    step started, or, while it waits, the end that wait will have at the latest. A loop that
    sleeps long while nothing is due is so never taken for a stalled one; a step that has not
    returned, or a thread that ended, leaves the beat behind as time goes on.
    """

    def __init__(
        self,
        name: str,
        step: Callable[[], float | None],
        waker: Waker,
        idle_s: float = 1.0,
        error_pause_s: float = 1.0,
        on_error: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self.on_error = on_error  # told of each exception a step raised
        self.step = step
        self.waker = waker
        self.idle_s = idle_s
        self.error_pause_s = error_pause_s
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._beat_ms: int | None = None

    @property
    def beat_ms(self) -> int | None:
        """Until when the loop is known to be well (see the class); None before start()."""
        return self._beat_ms

    def start(self) -> None:
        self._beat_ms = self.waker.clock.now_ms()
        self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Ask the loop to end after the step in hand."""
        self._stopping.set()
        self.waker.wake()

    def join(self, timeout_s: float) -> bool:
        """Wait for the loop to end; True when it did."""
        if self._thread is None:
            return True
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        clock = self.waker.clock
        while not self._stopping.is_set():
            self._beat_ms = clock.now_ms()
            self.waker.arm()
            try:
                wait_s = self.step()
            except ClockError as error:
                log.warning("%s step failed: %s", self.name, error, extra={"action": "step_failed"})
                wait_s = self._failed()
            except Exception:
                log.exception("%s step failed", self.name, extra={"action": "worker_error"})
                wait_s = self._failed()
            if wait_s is None:
                wait_s = self.idle_s
            if wait_s > 0 and not self._stopping.is_set():
                self._beat_ms = clock.now_ms() + wait_ms(wait_s)
                self.waker.wait(wait_s)

    def _failed(self) -> float:
        if self.on_error is not None:
            self.on_error()
        return self.error_pause_s
