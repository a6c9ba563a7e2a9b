"""Waits between reconnection attempts: capped exponential, with full jitter."""

from __future__ import annotations

import random


class Backoff:
    """The n-th wait in a row is drawn at random from 0 to ``first_s * 2**(n-1)``, at most
    ``cap_s``: consumers cut off together by a broker restart do not all come back in the
    same instant. ``reset()`` after a success starts again from the first."""

    def __init__(self, first_s: float, cap_s: float, rng: random.Random | None = None) -> None:
        if not 0 < first_s <= cap_s:
            raise ValueError("backoff needs 0 < first_s <= cap_s")
        self.first_s = first_s
        self.cap_s = cap_s
        self.failures = 0
        self._rng = rng or random.Random()

    def next_s(self) -> float:
        """The wait after one more failure in a row."""
        self.failures += 1
        ceiling = min(self.cap_s, self.first_s * 2 ** min(self.failures - 1, 60))
        return self._rng.uniform(0, ceiling)

    def reset(self) -> None:
        self.failures = 0
