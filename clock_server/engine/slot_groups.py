"""The groups of an engine's slots that the preloader reads side by side, each on its own
connection and each with its own position: one engine's load is not one serial scan.

Each group is read in (due time, id) order from where its own reading got to. What lies
before a group's position, of that group's slots, is in the heap, rang, or went elsewhere;
the groups move on at about the same pace, since the slots spread the alarms evenly.
"""

from __future__ import annotations

from clock_server.slot_space import SlotRange
from clock_server.store.ports import Position

_LAST_ID = 2**63 - 1


def split(slots: SlotRange, groups: int) -> list[SlotRange]:
    """`slots` cut into `groups` contiguous ranges whose sizes differ by one at most (fewer
    ranges when there are fewer slots, none when there are no slots)."""
    count = min(max(groups, 1), slots.size)
    if count == 0:
        return []
    size, extra = divmod(slots.size, count)
    ranges = []
    start = slots.start
    for index in range(count):
        stop = start + size + (1 if index < extra else 0)
        ranges.append(SlotRange(start, stop))
        start = stop
    return ranges


class SlotGroups:
    """The groups of the slots the engine owns now, each with where its reading got to
    (None: from the start). The groups are cut again, every reading from the start, when the
    slots owned change."""

    def __init__(self, groups: int) -> None:
        self.groups = max(groups, 1)
        self._slots: SlotRange | None = None
        self._ranges: list[SlotRange] = []
        self._positions: list[Position | None] = []

    def ranges(self, slots: SlotRange) -> list[tuple[SlotRange, Position | None]]:
        """Each group of `slots` and its position; every group from the start when `slots`
        is not what the groups were cut from."""
        if slots != self._slots:
            self._slots = slots
            self._ranges = split(slots, self.groups)
            self._positions = [None] * len(self._ranges)
        return list(zip(self._ranges, self._positions, strict=True))

    def read(self, index: int, position: Position) -> None:
        """Group `index` has been read up to `position`."""
        self._positions[index] = position

    def from_start(self) -> None:
        """Every group is read again from the start."""
        self._positions = [None] * len(self._ranges)

    def read_again_from(self, due_ms: int) -> None:
        """Alarms due from `due_ms` on may be missing from the heap: each group reads them
        again."""
        again: Position = (due_ms - 1, _LAST_ID)
        self._positions = [
            again if position is not None and position >= (due_ms, 0) else position
            for position in self._positions
        ]

    def position_of(self, slot: int) -> Position | None:
        """Where the reading of `slot`'s group got to; None when that group starts from the
        start, or `slot` is in none."""
        for slot_range, position in zip(self._ranges, self._positions, strict=True):
            if slot_range.holds(slot):
                return position
        return None

    @property
    def position(self) -> Position | None:
        """Where every group's reading has got to: the earliest of their positions; None when
        one starts from the start, or there are no groups yet."""
        if not self._positions or any(position is None for position in self._positions):
            return None
        return min(position for position in self._positions if position is not None)
