"""Which slots each engine owns: one decision from the registry's live engines.

The slots (clock_server.slot_space) are cut into as many contiguous ranges as there are live
engines, as equal as whole slots allow, and given out in the order of the engines' ids. Every
engine reads the same registry, so each comes to the same answer within a heartbeat of a
change, without a coordinator; the steps of a change are in engine.liveness.
"""

from __future__ import annotations

from collections.abc import Iterable

from clock_server.slot_space import ALL_SLOTS, SLOTS, SlotRange


def shares(live_ids: Iterable[int], slots: int = SLOTS) -> dict[int, SlotRange]:
    """Each live engine's range of the slots, by engine id."""
    ordered = sorted(set(live_ids))
    count = len(ordered)
    return {
        engine_id: SlotRange(rank * slots // count, (rank + 1) * slots // count)
        for rank, engine_id in enumerate(ordered)
    }


def share_of(engine_id: int, live_ids: Iterable[int]) -> SlotRange:
    """`engine_id`'s range, counting it among the live engines whether or not they list it."""
    return shares([*live_ids, engine_id])[engine_id]


class SlotShare:
    """The range this engine claims from: every slot until its first look at the registry."""

    def __init__(self) -> None:
        self._range = ALL_SLOTS

    def current(self) -> SlotRange:
        return self._range

    def move_to(self, new: SlotRange) -> SlotRange | None:
        """Own `new` from now on; returns the range owned before, or None when unchanged."""
        old, self._range = self._range, new
        return None if old == new else old
