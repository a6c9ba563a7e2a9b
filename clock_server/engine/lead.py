"""How far ahead of their due time the ring lanes lock rows."""

from __future__ import annotations

import threading
from collections import deque


class LockLead:
    """The lead: at least `floor_ms`, and while locking is slow, twice the slowest of the last
    `window` waits from when a batch was to be taken off the heap until its rows were held (a
    database busy with other work, or threads woken late on a busy machine), plus
    `margin_ms`;
    never more than `ceiling_ms`. Twice, because the next wait can be longer than any seen:
    under full API load, covering the slowest wait alone left the engine's p99 at 8 and 11 ms,
    twice it at 5 and 10, a fixed 30 ms at 3 and 4 (against 16-19 with a fixed 5).

    Rows locked ahead are still published no sooner than due, so the lead only decides whether
    that wait is part of an alarm's lateness. Its price is that a cancel of an alarm within the
    lead of its ring waits for the ring: kept at the floor while the database answers quickly,
    raised only under the load that would otherwise make alarms late. A floor of 0 turns
    locking ahead off altogether.
    """

    def __init__(
        self, floor_ms: int, ceiling_ms: int, window: int = 100, margin_ms: int = 2
    ) -> None:
        self.floor_ms = floor_ms
        self.margin_ms = margin_ms
        self.ceiling_ms = max(ceiling_ms, floor_ms) if floor_ms > 0 else 0
        self._waits: deque[int] = deque(maxlen=window)
        self._lock = threading.Lock()
        self._ms = floor_ms

    @property
    def ms(self) -> int:
        return self._ms

    def observe(self, wait_ms: int) -> int:
        """One batch waited `wait_ms` from when it was to be taken until its rows were locked;
        the lead from now on."""
        with self._lock:
            self._waits.append(wait_ms)
            slowest = max(self._waits)
        self._ms = min(self.ceiling_ms, max(self.floor_ms, 2 * slowest + self.margin_ms))
        return self._ms
