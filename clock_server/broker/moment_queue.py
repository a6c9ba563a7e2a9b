"""Timed groups waiting on the publisher's IO thread for their moments, earliest first."""

from __future__ import annotations

import heapq
import itertools

from clock_server.broker.confirms import Batch
from clock_server.broker.publisher import TimedGroup
from clock_server.timesource import Clock


class MomentQueue:
    """The groups handed over on one clock, by moment; the IO thread's alone."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._heap: list[tuple[int, int, TimedGroup, Batch]] = []
        self._order = itertools.count()  # equal moments keep the order they were handed in

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, group: TimedGroup, batch: Batch) -> None:
        heapq.heappush(self._heap, (group.at_ms, next(self._order), group, batch))

    def take_due(self) -> list[tuple[TimedGroup, Batch, int]]:
        """The groups whose moment has come on the clock, earliest first, each with the
        clock's time when it was found due."""
        due = []
        heap = self._heap
        while heap:
            now_ms = self.clock.now_ms()
            if heap[0][0] > now_ms:
                break
            _, _, group, batch = heapq.heappop(heap)
            due.append((group, batch, now_ms))
        return due

    def ms_to_next(self) -> int | None:
        """How long until the earliest group's moment on the clock (0 if it has come), or
        None when nothing waits."""
        if not self._heap:
            return None
        return max(self._heap[0][0] - self.clock.now_ms(), 0)
