"""The one notion of time in the service: "now" in epoch milliseconds, and every wait the
engine makes, from one replaceable clock."""

from __future__ import annotations

import threading
import time
from typing import Protocol


class Clock(Protocol):
    """Gives the current time and owns the engine's waits, so a test can step both."""

    def now_ms(self) -> int:
        """Current time as integer epoch milliseconds (UTC)."""
        ...

    def sleep_until(self, at_ms: int) -> None:
        """Return once now_ms() >= at_ms; never sooner."""
        ...

    def wait(self, event: threading.Event, timeout_ms: int) -> bool:
        """Return True as soon as `event` is set, False once `timeout_ms` have passed."""
        ...


class SystemClock:
    """The wall clock of this host (hosts must keep NTP time)."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def sleep_until(self, at_ms: int) -> None:
        while (left_ms := at_ms - self.now_ms()) > 0:
            time.sleep(left_ms / 1000)

    def wait(self, event: threading.Event, timeout_ms: int) -> bool:
        return event.wait(timeout_ms / 1000)
