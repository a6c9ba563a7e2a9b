"""The groups of an engine's slots the preloader reads side by side: how the slots are cut,
and where each group's reading got to. Pure, without a store."""

from __future__ import annotations

import pytest

from clock_server.engine.slot_groups import SlotGroups, split
from clock_server.slot_space import ALL_SLOTS, SLOTS, SlotRange

LAST = 2**63 - 1


@pytest.mark.parametrize(
    ("rule", "slots", "groups", "cut"),
    [
        ("all slots in four equal groups", ALL_SLOTS, 4,
         [(0, 256), (256, 512), (512, 768), (768, 1024)]),
        ("one group is the whole range", SlotRange(10, 20), 1, [(10, 20)]),
        ("sizes differ by one at most, the larger first", SlotRange(0, 10), 4,
         [(0, 3), (3, 6), (6, 8), (8, 10)]),
        ("fewer slots than groups: a group per slot", SlotRange(5, 7), 4, [(5, 6), (6, 7)]),
        ("no slots: no groups", SlotRange(3, 3), 4, []),
        ("a count below one reads in one group", SlotRange(0, 8), 0, [(0, 8)]),
    ],
)  # fmt: skip
def test_how_the_slots_are_cut(rule: str, slots: SlotRange, groups: int, cut: list):
    ranges = split(slots, groups)
    assert [(r.start, r.stop) for r in ranges] == cut, rule
    # Contiguous and covering: every slot in exactly one group.
    assert sum(r.size for r in ranges) == slots.size, rule


def test_every_slot_is_in_exactly_one_group_whatever_the_share():
    for start, stop in ((0, SLOTS), (0, 341), (341, 683), (683, SLOTS), (100, 101)):
        for groups in (1, 2, 3, 4, 7):
            ranges = split(SlotRange(start, stop), groups)
            for slot in range(start, stop):
                assert sum(r.holds(slot) for r in ranges) == 1


def test_the_position_is_the_earliest_group_s_and_none_until_each_has_read():
    groups = SlotGroups(3)
    assert groups.position is None  # not cut yet
    assert len(groups.ranges(ALL_SLOTS)) == 3
    groups.read(0, (500, 7))
    groups.read(2, (300, 9))
    assert groups.position is None  # group 1 starts from the start
    groups.read(1, (400, 1))
    assert groups.position == (300, 9)
    assert groups.position_of(0) == (500, 7)
    assert groups.position_of(SLOTS - 1) == (300, 9)


def test_reading_again_from_a_time_moves_back_only_the_groups_past_it():
    groups = SlotGroups(3)
    groups.ranges(ALL_SLOTS)
    for index, position in enumerate([(500, 7), (300, 9), (250, 1)]):
        groups.read(index, position)
    groups.read_again_from(300)
    # (300, 9) is past the start of 300's alarms, (250, 1) before them.
    assert [position for _, position in groups.ranges(ALL_SLOTS)] == [
        (299, LAST), (299, LAST), (250, 1)
    ]  # fmt: skip


def test_a_reading_from_the_start_and_a_new_share_start_every_group_again():
    groups = SlotGroups(2)
    groups.ranges(ALL_SLOTS)
    groups.read(0, (5, 5))
    groups.read(1, (6, 6))
    groups.from_start()
    assert [position for _, position in groups.ranges(ALL_SLOTS)] == [None, None]
    groups.read(0, (5, 5))
    groups.read(1, (6, 6))
    share = SlotRange(0, 512)
    assert groups.ranges(share) == [(SlotRange(0, 256), None), (SlotRange(256, 512), None)]
    assert groups.position_of(700) is None  # no longer this engine's
