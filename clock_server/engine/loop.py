"""A thread that repeats one step, waiting in between on a wake-up that is never lost."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from clock_server.errors import ClockError
from clock_server.timesource import Clock

log = logging.getLogger(__name__)


class Waker:
    """A wait on the Clock with the promise that a wake() during the step skips the next wait."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._event = threading.Event()

    def wake(self) -> None:
        self._event.set()

    def arm(self) -> None:
        """Forget earlier wakes; called before the step, so wakes during it still count."""
        self._event.clear()

    def wait(self, timeout_s: float) -> None:
        self._clock.wait(self._event, max(int(timeout_s * 1000), 1))


class StepLoop:
    """Runs `step` in a thread; `step` returns seconds to wait, 0 to go again, None to idle."""

    def __init__(
        self,
        name: str,
        step: Callable[[], float | None],
        waker: Waker,
        idle_s: float = 1.0,
        error_pause_s: float = 1.0,
    ) -> None:
        self.name = name
        self.step = step
        self.waker = waker
        self.idle_s = idle_s
        self.error_pause_s = error_pause_s
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
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
        while not self._stopping.is_set():
            self.waker.arm()
            try:
                wait_s = self.step()
            except ClockError as error:
                log.warning("%s step failed: %s", self.name, error, extra={"action": "step_failed"})
                wait_s = self.error_pause_s
            except Exception:
                log.exception("%s step failed", self.name, extra={"action": "worker_error"})
                wait_s = self.error_pause_s
            if wait_s is None:
                wait_s = self.idle_s
            if wait_s > 0 and not self._stopping.is_set():
                self.waker.wait(wait_s)
