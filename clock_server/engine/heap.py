"""The bounded in-memory set of claimed alarms, ordered by due time."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

from sortedcontainers import SortedList

from clock_server.model import Claim


@dataclass(frozen=True, slots=True)
class PushResult:
    displaced: list[Claim]  # claims that no longer fit: the caller gives them back
    head_moved_earlier: bool  # the earliest due time is now sooner: wake the ring thread


class ClaimHeap:
    """Holds at most `capacity` claims and always the earliest-due ones. Thread-safe."""

    def __init__(self, capacity: int) -> None:
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        self.capacity = capacity
        self._items: SortedList = SortedList()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def free(self) -> int:
        return self.capacity - len(self._items)

    def next_due_ms(self) -> int | None:
        with self._lock:
            return self._items[0].due_ms if self._items else None

    def latest_due_ms(self) -> int | None:
        with self._lock:
            return self._items[-1].due_ms if self._items else None

    def push_many(self, claims: Iterable[Claim]) -> PushResult:
        """Add claims; when over capacity, the latest-due ones are displaced and returned."""
        displaced: list[Claim] = []
        with self._lock:
            head_before = self._items[0].due_ms if self._items else None
            for claim in claims:
                self._items.add(claim)
                if len(self._items) > self.capacity:
                    displaced.append(self._items.pop())
            head_after = self._items[0].due_ms if self._items else None
        moved = head_after is not None and (head_before is None or head_after < head_before)
        return PushResult(displaced=displaced, head_moved_earlier=moved)

    def pop_due(self, now_ms: int, limit: int) -> list[Claim]:
        """Remove and return up to `limit` claims with due_ms <= now_ms, earliest first."""
        with self._lock:
            count = min(self._items.bisect_right(Claim(now_ms, 2**63, 2**63)), limit)
            taken = list(self._items.islice(0, count))
            del self._items[:count]
        return taken

    def drain(self) -> list[Claim]:
        """Remove and return everything (at shutdown, to hand the claims back)."""
        with self._lock:
            taken = list(self._items)
            self._items.clear()
        return taken
