"""The dispatch policy, rule by rule: given what the heap holds, how busy the lanes are and
the tuning, which claims go to which lane and connection. No threads, no clock."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clock_server.engine import dispatch
from clock_server.engine.dispatch import EXPRESS, LANE, Busy, HeapView, Horizons, decide
from clock_server.engine.tuning import RingTuning

T = RingTuning(batch=100, lanes=4, gather_ms=50)
FEW = T.few_due
NOW = 1_000_000
H = Horizons(NOW + 5, NOW + 55, NOW + 205)


def view(due: dict[str, int], gathered: dict[str, int] | None = None,
         express: dict[str, int] | None = None, waiting: dict[str, int] | None = None
         ) -> HeapView:  # fmt: skip
    """Each application's due counts (gathered and express default to the due ones), and
    applications holding claims none of which is due (`waiting`: their earliest)."""
    gathered = {**due, **(gathered or {})}
    express = {**gathered, **(express or {})}
    earliest = {app: NOW for app in due} | (waiting or {})
    return HeapView(due, gathered, express, earliest)


def takes(decision: dispatch.Decision) -> list[tuple[str, dict[str, int]]]:
    return [(batch.lane, dict(batch.take)) for batch in decision.batches]


RULES = [
    (
        "everything due fits in a batch: one lane takes it all",
        view({"a": 10, "b": 3}),
        Busy(),
        {},
        T,
        [(LANE, {"a": 10, "b": 3})],
    ),
    (
        "more due than a batch takes: a fair share each, the smallest first (max-min)",
        view({"a": 500, "b": 30, "c": 500}, waiting={}),
        Busy(),
        {},
        replace(T, few_due=10),
        [(LANE, {"b": 30, "a": 35, "c": 35})],
    ),
    (
        "an application with few due never shares a transaction with another's backlog: "
        "it goes to an express lane, even while a lane is free",
        view({"burst": 5_000, "quiet": 2}),
        Busy(),
        {},
        T,
        [(EXPRESS, {"quiet": 2}), (LANE, {"burst": 100})],
    ),
    (
        "beside a backlog, a lane's batch leaves the few in the heap even while every "
        "express lane is busy",
        view({"burst": 5_000, "quiet": 2}),
        Busy(0, T.express_lanes),
        {},
        T,
        [(LANE, {"burst": 100})],
    ),
    (
        "a backlog beside others' claims takes at most beside_backlog_lanes lanes: the few "
        "still ring, in an express lane",
        view({"burst": 5_000}, waiting={"quiet": NOW + 100}),
        Busy(T.beside_backlog_lanes),
        {},
        T,
        [],
    ),
    (
        "a backlog alone takes every lane",
        view({"burst": 5_000}),
        Busy(T.beside_backlog_lanes),
        {},
        T,
        [(LANE, {"burst": 100})],
    ),
    (
        "with every lane busy, applications with few due still ring in an express lane",
        view({"burst": 90, "quiet": 2}),
        Busy(T.lanes),
        {},
        T,
        [(EXPRESS, {"quiet": 2})],
    ),
    (
        "with every lane and every express lane busy, nothing goes",
        view({"burst": 90, "quiet": 2}),
        Busy(T.lanes, T.express_lanes),
        {},
        T,
        [],
    ),
    (
        "an express batch gathers up to few_due of each of its applications over its span",
        view({"burst": 5_000, "quiet": 2}, express={"quiet": 80}),
        Busy(),
        {},
        T,
        [(EXPRESS, {"quiet": FEW}), (LANE, {"burst": 100})],
    ),
    (
        "a lane's batch takes what is due by its gather horizon",
        view({"a": 3}, gathered={"a": 9}),
        Busy(),
        {},
        T,
        [(LANE, {"a": 9})],
    ),
    (
        "a webhook application takes no more than its room for calls",
        view({"hooks": 30, "other": 3}),
        Busy(),
        {"hooks": 4},
        T,
        [(LANE, {"hooks": 4, "other": 3})],
    ),
    (
        "a webhook application gathers nothing past the lead: a call waiting for its moment "
        "would hold a place of its room",
        view({"hooks": 3, "other": 3}, gathered={"hooks": 9, "other": 9}),
        Busy(),
        {"hooks": 40},
        T,
        [(LANE, {"hooks": 3, "other": 9})],
    ),
    (
        "a webhook application with no room takes nothing",
        view({"hooks": 30}),
        Busy(),
        {"hooks": 0},
        T,
        [],
    ),
    (
        "with one lane there are no express lanes: one batch, a fair share each",
        view({"burst": 5_000, "quiet": 2}),
        Busy(),
        {},
        replace(T, lanes=1),
        [(LANE, {"quiet": 2, "burst": 98})],
    ),
]


@pytest.mark.parametrize(
    ("rule", "heap", "busy", "room", "tuning", "expected"), RULES, ids=[r[0] for r in RULES]
)
def test_rule(rule, heap, busy, room, tuning, expected):
    assert takes(decide(heap, busy, room, H, tuning)) == expected


def test_in_a_lanes_batch_the_few_beside_a_backlog_go_on_the_express_connection():
    one_lane = replace(T, lanes=1)
    (batch,) = decide(view({"burst": 5_000, "quiet": 2}), Busy(), {}, H, one_lane).batches
    assert batch.express_connection == {"quiet"}
    (batch,) = decide(view({"a": 20, "b": 3}), Busy(), {}, H, one_lane).batches
    assert batch.express_connection == frozenset()  # no backlog: one connection


def test_express_batches_publish_on_the_express_connection():
    express, _lane = decide(view({"burst": 5_000, "q": 2, "r": 1}), Busy(), {}, H, T).batches
    assert express.lane == EXPRESS and express.express_connection == {"q", "r"}


def test_a_batch_is_due_by_its_kinds_horizon_and_says_its_span():
    express, lane = decide(view({"burst": 5_000, "quiet": 2}), Busy(), {}, H, T).batches
    assert (express.due_by_ms, express.gather_ms) == (H.express_gather_by_ms, 200)
    assert (lane.due_by_ms, lane.gather_ms) == (H.gather_by_ms, 50)


def test_with_nothing_due_the_loop_looks_again_when_the_earliest_falls_due():
    decision = decide(view({}, waiting={"a": NOW + 300, "b": NOW + 90}), Busy(), {}, H, T)
    assert decision == dispatch.Decision(next_due_ms=NOW + 90)
    decision = decide(view({}), Busy(), {}, H, T)
    assert decision == dispatch.Decision()  # nothing held: until woken


def test_an_application_with_no_room_is_not_what_the_loop_wakes_for():
    decision = decide(view({"hooks": 3}, waiting={"b": NOW + 90}), Busy(), {"hooks": 0}, H, T)
    assert decision.next_due_ms == NOW + 90  # hooks' own end of a call wakes the loop


def test_waiting_for_a_lane_is_said_so_the_first_lane_free_wakes_the_loop():
    decision = decide(view({"burst": 90}), Busy(T.lanes), {}, H, T)
    assert decision.waits_for_lane and not decision.batches
    decision = decide(view({"burst": 90}), Busy(T.lanes - 1), {}, H, T)
    assert not decision.waits_for_lane


@pytest.mark.parametrize(
    ("lead_ms", "busy", "locks_rows", "gathers", "express_gathers"),
    [
        (5, Busy(), True, True, True),
        (T.gather_ms + 1, Busy(), True, False, False),  # the lead grew past the span
        (5, Busy(T.lanes - 1), True, False, True),  # no second lane free beside this one
        (5, Busy(0, T.express_lanes - 1), True, True, False),
        (5, Busy(), False, False, False),  # the store locks the whole database
    ],
)
def test_a_batch_gathers_only_while_the_lead_is_short_and_a_lane_stays_free(
    lead_ms, busy, locks_rows, gathers, express_gathers
):
    h = dispatch.horizons(NOW, lead_ms, busy, T, locks_rows)
    assert h.due_by_ms == NOW + lead_ms
    assert (h.gather_by_ms > h.due_by_ms) == gathers
    assert (h.express_gather_by_ms > h.due_by_ms) == express_gathers
    if gathers:
        assert h.gather_by_ms - h.due_by_ms == T.gather_ms
    if express_gathers:
        assert h.express_gather_by_ms - h.due_by_ms == T.express_gather_ms


counts = st.dictionaries(st.sampled_from("abcdef"), st.integers(0, 300))


@given(counts, st.integers(1, 500))
def test_fair_shares_never_exceed_the_limit_nor_what_is_due_and_share_max_min(due, limit):
    shares = dispatch.fair_shares(due, limit)
    assert sum(shares.values()) == min(limit, sum(due.values()))
    assert all(0 < shares[app] <= due[app] for app in shares)
    for short, got in shares.items():
        if got < due[short]:  # left some behind: nobody got more than one more
            assert all(other <= got + 1 for other in shares.values())


@given(counts, st.sampled_from([0, 1, 5, 50]), st.integers(0, 8), st.integers(0, 8))
def test_no_decision_overfills_a_lane_kind_or_mixes_the_few_with_a_backlog(
    due, few, lanes_busy, express_busy
):
    tuning = replace(T, few_due=few)
    busy = Busy(min(lanes_busy, tuning.lanes), min(express_busy, tuning.express_lanes))
    decision = decide(view(due), busy, {}, H, tuning)
    lanes = sum(b.lane == LANE for b in decision.batches)
    express = sum(b.lane == EXPRESS for b in decision.batches)
    assert busy.lanes + lanes <= tuning.lanes
    assert busy.express + express <= tuning.express_lanes
    backlog = any(count > few for count in due.values())
    for batch in decision.batches:
        assert batch.size <= tuning.batch
        assert all(0 < n <= due[app] for app, n in batch.take.items())
        if batch.lane == LANE and backlog and len(due) > 1:
            assert all(due[app] > few for app in batch.take)  # no few beside a backlog
        if batch.lane == EXPRESS:
            assert all(due[app] <= few for app in batch.take)
