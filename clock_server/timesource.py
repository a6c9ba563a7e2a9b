"""The one notion of "now" in the service: epoch milliseconds from a replaceable clock."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Gives the current time; the engine reads it once per pass."""

    def now_ms(self) -> int:
        """Current time as integer epoch milliseconds (UTC)."""
        ...


class SystemClock:
    """The wall clock of this host (hosts must keep NTP time)."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000
