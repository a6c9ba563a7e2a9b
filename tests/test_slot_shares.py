"""How the engines share the slots: one decision from the live engines, stated by a table."""

from __future__ import annotations

import itertools

import pytest

from clock_server.engine.slot_shares import SlotShare, share_of, shares
from clock_server.slot_space import ALL_SLOTS, SLOTS, SlotRange, slot_of


@pytest.mark.parametrize(
    ("rule", "live", "expected"),
    [
        ("one engine owns every slot", [7], {7: SlotRange(0, 1024)}),
        ("two engines a half each", [3, 9], {3: SlotRange(0, 512), 9: SlotRange(512, 1024)}),
        (
            "three engines a third each, to a slot",
            [1, 2, 3],
            {1: SlotRange(0, 341), 2: SlotRange(341, 682), 3: SlotRange(682, 1024)},
        ),
        (
            "ranges follow the ids, not the order listed",
            [9, 3],
            {3: SlotRange(0, 512), 9: SlotRange(512, 1024)},
        ),
        ("an engine listed twice counts once", [4, 4], {4: SlotRange(0, 1024)}),
    ],
)  # fmt: skip
def test_shares(rule: str, live: list[int], expected: dict[int, SlotRange]):
    assert shares(live) == expected, rule


@pytest.mark.parametrize("count", [1, 2, 3, 5, 7, 50, 1024])
def test_the_shares_cover_every_slot_once_and_differ_by_one_slot_at_most(count: int):
    ranges = sorted(shares(range(100, 100 + count)).values(), key=lambda r: r.start)
    assert ranges[0].start == 0 and ranges[-1].stop == SLOTS
    assert all(a.stop == b.start for a, b in itertools.pairwise(ranges))
    sizes = [r.size for r in ranges]
    assert max(sizes) - min(sizes) <= 1


def test_an_engine_counts_itself_among_the_live_even_when_the_registry_did_not_list_it():
    assert share_of(5, [2]) == SlotRange(512, 1024)
    assert share_of(1, []) == ALL_SLOTS


def test_a_share_says_what_it_owned_before_only_when_it_changed():
    share = SlotShare()
    assert share.current() == ALL_SLOTS  # until the first look at the registry
    assert share.move_to(ALL_SLOTS) is None
    assert share.move_to(SlotRange(0, 512)) == ALL_SLOTS
    assert share.current() == SlotRange(0, 512)


def test_a_slot_comes_from_the_key_alone_and_lies_in_range():
    assert slot_of("shop", "order-1") == slot_of("shop", "order-1")
    assert slot_of("shop", "order-1") != slot_of("shop", "order-2")
    # The same in every release: changing the hash would move every pending alarm.
    assert slot_of("shop", "order-1") == 687
    assert all(0 <= slot_of("a", str(i)) < SLOTS for i in range(2_000))


def test_slots_spread_keys_evenly_enough_for_three_engines_to_ring_a_third_each():
    counts = [0, 0, 0]
    ranges = list(shares([1, 2, 3]).values())
    for i in range(30_000):
        slot = slot_of("shop", f"order-{i}")
        counts[next(k for k, r in enumerate(ranges) if r.holds(slot))] += 1
    assert all(abs(count - 10_000) <= 500 for count in counts), counts
