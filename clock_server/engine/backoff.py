"""Retry timing for failed publishes: exponential, capped, with jitter."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    """After failed try n (1-based), wait between half and all of min(cap, base * 2**(n-1))."""

    base_ms: int = 1_000
    cap_ms: int = 300_000
    max_retries: int = 16

    def gives_up(self, failed_tries: int) -> bool:
        """True when `failed_tries` failures exhaust the retries: the alarm is dead."""
        return failed_tries > self.max_retries

    def delay_ms(self, failed_tries: int, rng: random.Random | None = None) -> int:
        ceiling = min(self.cap_ms, self.base_ms * 2 ** min(failed_tries - 1, 62))
        # Equal jitter: never less than half the step, so retries keep backing off,
        # and spread over the other half so a broker outage does not end in a stampede.
        half = ceiling // 2
        return ceiling - half + (rng or random).randint(0, half)
