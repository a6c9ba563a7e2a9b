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
    assert (new.after_id, new.gaps(), new.gave_up) == (after_id, gaps, bool(given_up)), rule
    assert new.take_given_up() == given_up, rule
    assert new.take_given_up() == {}, rule  # taken once


def test_the_oldest_gaps_go_first_beyond_the_most_kept():
    new = NewRows(after_id=0, gap_ttl_ms=TTL, max_gaps=3)
    new.saw([3], 0)  # gaps 1 and 2, since 0
    assert not new.gave_up
    new.saw([6], 10)  # gaps 4 and 5, since 10: one of the oldest goes
    assert new.gaps() == [2, 4, 5] and new.gave_up
    assert new.take_given_up() == {TOO_MANY: 1}
