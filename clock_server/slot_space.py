"""The slots alarms are spread over, so that engines can each own a part of the table.

Every alarm has a slot, set when it is inserted from its key, so that a retried create and
a schedule's occurrence land in the same one. Engines own contiguous ranges of slots
(engine.slot_shares) and claim only their own slots' alarms. The number of slots is fixed
for the life of a database: changing it would move every pending alarm.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

SLOTS = 1024


def slot_of(application: str, business_id: str) -> int:
    """The alarm's slot: a hash of its key, the same on every server and in every release."""
    return zlib.crc32(f"{application}\x00{business_id}".encode()) % SLOTS


@dataclass(frozen=True, slots=True)
class SlotRange:
    """The slots from `start` up to, not including, `stop`."""

    start: int
    stop: int

    def holds(self, slot: int) -> bool:
        return self.start <= slot < self.stop

    @property
    def size(self) -> int:
        return max(self.stop - self.start, 0)


ALL_SLOTS = SlotRange(0, SLOTS)
