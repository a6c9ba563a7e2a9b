"""The bounded heap keeps the earliest-due claims and never hands out one that is not due."""

from __future__ import annotations

import gc
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from clock_server.engine.dispatch import Horizons
from clock_server.engine.heap import ClaimHeap
from clock_server.model import Claim

claims = st.lists(
    st.builds(Claim, st.integers(0, 10_000), st.integers(1, 10**9), st.integers(0, 5), st.just("")),
    max_size=300,
    unique_by=lambda c: c.id,
)
# Claims of up to four applications.
mixed_claims = st.lists(
    st.builds(
        Claim,
        st.integers(0, 10_000),
        st.integers(1, 10**9),
        st.integers(0, 5),
        st.sampled_from("abcd"),
    ),
    max_size=300,
    unique_by=lambda c: c.id,
)


@given(claims, st.integers(1, 50), st.integers(1, 60))
def test_holds_the_earliest_claims_and_displaces_the_latest(items, capacity, chunk):
    heap = ClaimHeap(capacity)
    displaced: list[Claim] = []
    for start in range(0, len(items), chunk):
        displaced += heap.push_many(items[start : start + chunk]).displaced
    held = heap.drain()
    assert len(held) == min(capacity, len(items))
    assert sorted(held + displaced) == sorted(items)
    if held and displaced:
        assert max(held) <= min(displaced)


@given(claims, st.integers(0, 10_000), st.integers(1, 400))
def test_pop_due_takes_only_due_claims_earliest_first(items, now_ms, limit):
    heap = ClaimHeap(1_000)
    heap.push_many(items)
    taken = heap.pop_due(now_ms, limit)
    due = sorted(c for c in items if c.due_ms <= now_ms)
    assert taken == due[:limit]
    assert all(c.due_ms <= now_ms for c in taken)
    held_per_application = heap.held_per_application()
    rest = heap.drain()
    assert sorted(rest + taken) == sorted(items)
    assert held_per_application == dict(Counter(c.application for c in rest))


def test_push_reports_when_the_head_moves_earlier():
    heap = ClaimHeap(10)
    assert heap.push_many([Claim(100, 1, 1)]).head_moved_earlier
    assert not heap.push_many([Claim(200, 2, 1)]).head_moved_earlier
    assert heap.push_many([Claim(50, 3, 1)]).head_moved_earlier
    assert heap.next_due_ms() == 50
    assert heap.latest_due_ms() == 200
    assert heap.free() == 7


def test_empty_heap():
    heap = ClaimHeap(3)
    assert heap.next_due_ms() is None
    assert heap.pop_due(10**12, 10) == []
    assert not heap.push_many([]).head_moved_earlier


@given(mixed_claims, st.integers(0, 10_000), st.integers(1, 400))
def test_pop_due_shares_a_backlog_between_applications(items, now_ms, limit):
    heap = ClaimHeap(1_000)
    heap.push_many(items)
    taken = heap.pop_due(now_ms, limit)
    due = sorted(c for c in items if c.due_ms <= now_ms)
    assert len(taken) == min(len(due), limit)
    held_per_application = heap.held_per_application()
    rest = heap.drain()
    assert sorted(rest + taken) == sorted(items)
    assert held_per_application == dict(Counter(c.application for c in rest))
    if len(due) <= limit:
        assert taken == due
        return
    due_of = {app: [c for c in due if c.application == app] for app in "abcd"}
    got = {app: sorted(c for c in taken if c.application == app) for app in "abcd"}
    for app in "abcd":
        assert got[app] == due_of[app][: len(got[app])]  # each its own earliest first
    for short in "abcd":
        if len(got[short]) < len(due_of[short]):  # left some of its due claims behind...
            for other in "abcd":  # ...so no other application got more than one more
                assert len(got[other]) <= len(got[short]) + 1


def test_a_backlog_of_one_application_leaves_room_for_another():
    heap = ClaimHeap(100_000)
    heap.push_many(Claim(1_000, alarm_id, 1, "burst") for alarm_id in range(1, 50_001))
    heap.push_many([Claim(1_500, 60_001, 1, "steady"), Claim(2_500, 60_002, 1, "steady")])
    taken = heap.pop_due(2_000, 1_000)
    assert len(taken) == 1_000
    assert Claim(1_500, 60_001, 1, "steady") in taken
    assert Claim(2_500, 60_002, 1, "steady") not in taken  # not due yet
    assert len(heap) == 50_002 - 1_000
    assert heap.next_due_ms() == 1_000


def test_a_shared_push_displaces_the_latest_of_the_application_holding_most():
    heap = ClaimHeap(10)
    heap.push_many(Claim(1_000 + i, i, 1, "burst") for i in range(1, 9))
    heap.push_many([Claim(5_000, 100, 1, "other"), Claim(6_000, 101, 1, "other")])
    pushed = heap.push_many([Claim(9_000, 200, 1, "late"), Claim(9_001, 201, 1, "late")], True)
    assert pushed.displaced == [Claim(1_008, 8, 1, "burst"), Claim(1_007, 7, 1, "burst")]
    assert heap.held_per_application() == {"burst": 6, "other": 2, "late": 2}
    assert heap.push_many([Claim(9_002, 202, 1, "late")]).displaced == [
        Claim(9_002, 202, 1, "late")
    ]  # without sharing, the latest due is the one displaced


def test_claims_held_are_not_followed_by_the_garbage_collector():
    """Each pass of the collector follows every object it tracks; a heap of tracked claims
    made the full passes pause the engine's threads for tens of milliseconds."""
    heap = ClaimHeap(capacity=20_000)
    gc.collect()
    before = len(gc.get_objects())
    heap.push_many(Claim(1_000 + i, i, 1, f"app{i % 3}") for i in range(10_000))
    gc.collect()
    # 10,000 if the claims were followed; other threads of the suite make a few hundred.
    assert len(gc.get_objects()) - before < 1_000
    popped = heap.pop_due(1_000 + 9_999, 10_000)
    assert popped[:2] == [Claim(1_000, 0, 1, "app0"), Claim(1_001, 1, 1, "app1")]
    assert all(type(claim) is Claim for claim in popped)


def test_a_backlog_whose_neighbours_are_not_due_yet_is_taken_earliest_first():
    heap = ClaimHeap(capacity=100)
    heap.push_many(Claim(1_000 + i, i, 1, "burst") for i in range(50))
    heap.push_many([Claim(5_000, 99, 1, "quiet"), Claim(1_020, 98, 1, "late")])
    taken = heap.pop_due(1_010, 5)
    assert taken == [Claim(1_000 + i, i, 1, "burst") for i in range(5)]
    assert heap.held_per_application() == {"burst": 45, "quiet": 1, "late": 1}
    assert heap.pop_due(1_020, 100)[-2:] == [
        Claim(1_020, 20, 1, "burst"),
        Claim(1_020, 98, 1, "late"),
    ]


@given(mixed_claims, st.integers(0, 10_000), st.integers(0, 100), st.integers(0, 400))
def test_the_view_counts_each_applications_claims_due_by_each_horizon(items, now_ms, a, b):
    heap = ClaimHeap(1_000)
    heap.push_many(items)
    view = heap.view(Horizons(now_ms, now_ms + a, now_ms + b))
    for app in "abcd":
        own = [c.due_ms for c in items if c.application == app]
        if not own:
            assert app not in view.earliest
            continue
        assert view.earliest[app] == min(own)
        for counts, bound in ((view.due, now_ms), (view.gathered, now_ms + a),
                              (view.gathered_express, now_ms + b)):  # fmt: skip
            assert counts.get(app, 0) == sum(due <= bound for due in own)


@given(
    mixed_claims,
    st.integers(0, 10_000),
    st.dictionaries(st.sampled_from("abcde"), st.integers(0, 50)),
)
def test_take_removes_each_applications_earliest_due_and_nothing_not_due(items, now_ms, counts):
    heap = ClaimHeap(1_000)
    heap.push_many(items)
    taken = heap.take(counts, now_ms)
    for app in "abcde":
        due = sorted(c for c in items if c.application == app and c.due_ms <= now_ms)
        got = sorted(c for c in taken if c.application == app)
        expected = due[: counts.get(app, 0)]
        assert [c.due_ms for c in got] == [c.due_ms for c in expected]
    assert all(c.due_ms <= now_ms for c in taken)
    left = Counter(c.application for c in items) - Counter(c.application for c in taken)
    assert heap.held_per_application() == dict(left)
    assert sorted(heap.drain() + taken) == sorted(items)
