"""Which ids a preload pass looks at again: the new ones and the gaps among them, by a table."""

from __future__ import annotations

import pytest

from clock_server.engine.new_rows import JUMP, TOO_MANY, UNSEEN, NewRows

TTL = 1_000


@pytest.mark.parametrize(
    ("rule", "looks", "after_id", "gaps", "given_up"),
    [
        ("ids seen in order leave no gap", [([11, 12, 13], 0)], 13, [], {}),
        ("a later id seen first leaves the earlier as a gap", [([11, 13], 0)], 13, [12], {}),
        ("a gap seen at a later look is no longer one", [([11, 13], 0), ([12], 100)], 13, [], {}),
        ("nothing new leaves everything as it was", [([], 0)], 10, [], {}),
        ("a gap missing past its time is given up", [([11, 13], 0), ([], TTL + 1)], 13, [],
         {UNSEEN: 1}),
        ("a gap missing for its time exactly is kept", [([11, 13], 0), ([], TTL)], 13, [12], {}),
        ("earlier gaps stay while new ones come", [([12], 0), ([14], 10)], 14, [11, 13], {}),
        ("an id below the last look changes nothing", [([12], 0), ([5], 10)], 12, [11], {}),
        ("a jump beyond the gaps kept is not walked", [([10_000_000], 0)], 10_000_000, [],
         {JUMP: 10_000_000 - 11}),
        ("a walk as long as the gaps kept is walked whole", [([111], 0)], 111,
         list(range(11, 111)), {}),
        ("a span longer than the gaps kept, with few missing, is walked whole",
         [([11, *range(13, 150)], 0)], 149, [12], {}),
    ],
)  # fmt: skip
def test_new_rows(
    rule: str,
    looks: list[tuple[list[int], int]],
    after_id: int,
    gaps: list[int],
    given_up: dict[str, int],
):
    new = NewRows(after_id=10, gap_ttl_ms=TTL, max_gaps=100)
    for ids, now_ms in looks:
        new.saw(ids, now_ms)
    assert (new.after_id, new.kept) == (after_id, gaps), rule
    assert new.take_given_up() == given_up, rule
    assert new.take_given_up() == {}, rule  # taken once


KEEP = 10_000
SLOW = 300  # under TTL, as in the preloader


@pytest.mark.parametrize(
    ("rule", "looks_at_ms", "looked_at"),  # each look: gaps(), then saw([])
    [
        ("a young gap is looked at at every pass", [100, 200, TTL], [[12], [12], [12]]),
        ("an old gap only when a slow look is due", [TTL + 100, TTL + 200, TTL + 400],
         [[12], [], [12]]),
        ("an old gap is looked at until it is kept no longer",
         [KEEP, KEEP + SLOW, KEEP + 2 * SLOW], [[12], [12], []]),
    ],
)  # fmt: skip
def test_which_gaps_a_pass_looks_at(rule: str, looks_at_ms: list[int], looked_at: list[list[int]]):
    new = NewRows(after_id=10, gap_ttl_ms=TTL, keep_ms=KEEP, slow_look_ms=SLOW, max_gaps=100)
    new.saw([11, 13], 0)  # 12 is a gap, since 0
    assert new.gaps(0) == [12]  # the first look is a slow look too
    looks = []
    for now_ms in looks_at_ms:
        looks.append(new.gaps(now_ms))
        new.saw([], now_ms)
    assert looks == looked_at, rule


def test_a_gap_kept_past_its_every_pass_time_is_given_up_only_after_keep_ms():
    new = NewRows(after_id=10, gap_ttl_ms=TTL, keep_ms=KEEP, slow_look_ms=SLOW, max_gaps=100)
    new.saw([11, 13], 0)
    new.saw([], KEEP)
    assert new.kept == [12] and new.take_given_up() == {}
    new.saw([12], KEEP)  # found at last: the row of a transaction that took that long
    assert new.kept == [] and new.take_given_up() == {}
    new.saw([15], KEEP)
    new.saw([], 2 * KEEP + 1)
    assert new.kept == [] and new.take_given_up() == {UNSEEN: 1}


def test_the_oldest_gaps_go_first_beyond_the_most_kept():
    new = NewRows(after_id=0, gap_ttl_ms=TTL, max_gaps=3)
    new.saw([3], 0)  # gaps 1 and 2, since 0
    assert new.take_given_up() == {}
    new.saw([6], 10)  # gaps 4 and 5, since 10: one of the oldest goes
    assert new.kept == [2, 4, 5]
    assert new.take_given_up() == {TOO_MANY: 1}
