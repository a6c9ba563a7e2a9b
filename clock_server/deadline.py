"""One point in time that several steps share, so that together they take no longer than it."""

from __future__ import annotations

import time
from collections.abc import Callable


class Deadline:
    """Ends `seconds` after it is made, on the monotonic clock (a shutdown's budget, not an
    alarm's time: alarms go by the Clock)."""

    def __init__(self, seconds: float, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self.seconds = seconds
        self.at = monotonic() + seconds

    def remaining_s(self) -> float:
        """Seconds left, never below 0."""
        return max(self.at - self._monotonic(), 0.0)

    def share(self, fraction: float) -> Deadline:
        """A deadline that ends after `fraction` of the time left, leaving the rest to the
        steps that follow."""
        return Deadline(self.remaining_s() * fraction, self._monotonic)

    @property
    def expired(self) -> bool:
        return self.remaining_s() == 0.0
