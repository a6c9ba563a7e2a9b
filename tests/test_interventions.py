"""An operator's interventions in the store: re-drive one alarm, re-drive or cancel by filter,
and the searches they share with GET /v1/alarms. On SQLite and MariaDB."""

from __future__ import annotations

import pytest

from clock_server.errors import Conflict, NotFound, ValidationError
from clock_server.model import AlarmFilter, NewAlarm
from clock_server.store.alarm_search import BY_DUE, BY_ID, BY_KEY, order_of, position
from clock_server.store.alarms import AlarmStore
from clock_server.store.claims import SqlClaimStore
from clock_server.store.history import AlarmHistory
from clock_server.store.interventions import AlarmInterventions

NOW = 1_700_000_000_000


def new(business_id: str, application: str = "app", **kw) -> NewAlarm:  # type: ignore[no-untyped-def]
    values = {"target_ring_at": NOW, "latest_ring_at": None, **kw}
    return NewAlarm(application, business_id, "p", created_by=application, **values)


def finish(store: AlarmStore, dead: list[str], expired: list[str] = ()) -> None:  # type: ignore[assignment]
    """Make the alarms `dead` die and `expired` expire, as a ring batch does at NOW + 10."""
    claims = SqlClaimStore(store)
    taken = claims.load_due(NOW + 10, 1_000)
    ids = {a.business_id: a.id for a in store.list(None, "pending", 1_000, None)}
    with claims.ring_transaction() as tx:
        tx.lock_live(taken)
        tx.mark_dead([ids[key] for key in dead], NOW + 10, "nacked")
        tx.mark_expired([ids[key] for key in expired], NOW + 10)


def statuses(store: AlarmStore) -> dict[str, str]:
    return {a.business_id: a.status for a in store.list(None, None, 1_000, None)}


def test_a_redrive_makes_a_dead_alarm_pending_again_with_a_fresh_budget(store: AlarmStore):
    store.create(new("d", latest_ring_at=NOW + 5_000), NOW - 1_000)
    finish(store, ["d"])
    actions = AlarmInterventions(store)
    alarm = actions.redrive("app", "d", NOW + 60_000, NOW + 20, actor="admin")
    assert (alarm.status, alarm.retry_times) == ("pending", 0)
    assert (alarm.target_ring_at, alarm.next_try_time) == (NOW + 60_000, NOW + 60_000)
    assert alarm.latest_ring_at == NOW + 65_000  # the cutoff keeps its 5 s from the target
    kinds = [(e.kind, e.actor, e.detail) for e in AlarmHistory(store).events("app", "d")]
    assert kinds[-1] == ("redriven", "admin", {"from_status": "dead", "due_at": NOW + 60_000})

    claims = SqlClaimStore(store)
    # never before its new time
    assert claims.load_due(NOW + 59_999, 10) == []
    [claim] = claims.load_due(NOW + 60_000, 10)
    assert claim.id == alarm.id  # the same id: consumers deduplicate by it


def test_an_expired_alarm_is_redriven_and_no_cutoff_stays_none(store: AlarmStore):
    store.create_many([new("e", latest_ring_at=NOW + 5), new("n")], NOW - 1_000)
    finish(store, ["n"], ["e"])
    actions = AlarmInterventions(store)
    expired = actions.redrive("app", "e", NOW + 100, NOW + 50, actor="app")
    assert (expired.status, expired.latest_ring_at) == ("pending", NOW + 105)
    dead = actions.redrive("app", "n", NOW + 100, NOW + 50, actor="app")
    assert (dead.status, dead.latest_ring_at) == ("pending", None)


@pytest.mark.parametrize("status", ["pending", "rung", "cancelled"])
def test_only_dead_or_expired_alarms_are_redriven(store: AlarmStore, status: str):
    alarm, _ = store.create(new("x"), NOW - 1_000)
    if status == "cancelled":
        store.cancel("app", "x", NOW, actor="app")
    if status == "rung":
        claims = SqlClaimStore(store)
        taken = claims.load_due(NOW, 10)
        with claims.ring_transaction() as tx:
            tx.lock_live(taken)
            tx.mark_rung([(alarm.id, NOW)], NOW)
    before = store.get("app", "x")
    with pytest.raises(Conflict) as raised:
        AlarmInterventions(store).redrive("app", "x", NOW, NOW, actor="admin")
    assert raised.value.status == status and status in str(raised.value)
    assert store.get("app", "x") == before
    with pytest.raises(NotFound):
        AlarmInterventions(store).redrive("app", "missing", NOW, NOW, actor="admin")


def test_bulk_redrive_changes_what_the_filter_matches_and_is_safe_to_repeat(store: AlarmStore):
    store.create_many(
        [new(f"order-{n}") for n in range(7)]
        + [new("other-1"), new("order-x", application="b"),
           new("order-live", target_ring_at=NOW + 60_000)],
        NOW - 1_000,
    )  # fmt: skip
    finish(store, [f"order-{n}" for n in range(5)] + ["other-1", "order-x"], ["order-5", "order-6"])
    actions = AlarmInterventions(store)
    where = AlarmFilter(application="app", business_id_prefix="order-")
    outcome = actions.bulk_redrive(where, NOW + 1_000, NOW + 20, "admin", budget_s=30)
    assert (outcome.changed, outcome.done, outcome.per_application) == (7, True, {"app": 7})
    after = statuses(store)
    assert {after[f"order-{n}"] for n in range(7)} == {"pending"}
    assert (after["other-1"], after["order-x"], after["order-live"]) == ("dead", "dead", "pending")
    again = actions.bulk_redrive(where, NOW + 1_000, NOW + 30, "admin", budget_s=30)
    assert (again.changed, again.done) == (0, True)
    assert [e.kind for e in AlarmHistory(store).events("app", "order-5")][-1] == "redriven"


def test_bulk_redrive_by_status_and_due_range(store: AlarmStore):
    store.create_many([new("d1"), new("d2"), new("e1", latest_ring_at=NOW)], NOW - 1_000)
    finish(store, ["d1", "d2"], ["e1"])  # each finished at NOW + 10: its next_try_time
    actions = AlarmInterventions(store)
    none = AlarmFilter(status="dead", due_from=NOW + 11)
    assert actions.bulk_redrive(none, NOW, NOW, "admin", 30).changed == 0
    dead = AlarmFilter(status="dead", due_from=NOW + 10, due_to=NOW + 11)
    assert actions.bulk_redrive(dead, NOW + 500, NOW + 20, "admin", 30).changed == 2
    assert statuses(store) == {"d1": "pending", "d2": "pending", "e1": "expired"}
    with pytest.raises(ValidationError) as raised:
        actions.bulk_redrive(AlarmFilter(status="pending"), NOW, NOW, "admin", 30)
    assert raised.value.field == "status"


def test_a_bulk_call_stops_at_its_budget_and_the_next_goes_on(store: AlarmStore):
    store.create_many([new(f"k{n}") for n in range(3)], NOW - 1_000)
    finish(store, [f"k{n}" for n in range(3)])
    actions = AlarmInterventions(store)
    stopped = actions.bulk_redrive(AlarmFilter(), NOW, NOW, "admin", budget_s=0)
    assert (stopped.changed, stopped.done) == (0, False)
    assert statuses(store) == {"k0": "dead", "k1": "dead", "k2": "dead"}
    finished = actions.bulk_redrive(AlarmFilter(), NOW, NOW, "admin", budget_s=30)
    assert (finished.changed, finished.done) == (3, True)


def test_bulk_cancel_cancels_matching_pending_alarms_even_claimed_ones(store: AlarmStore):
    store.create_many(
        [new("soon-1"), new("soon-2"), new("later", target_ring_at=NOW + 600_000),
         new("soon-b", application="b")],
        NOW - 1_000,
    )  # fmt: skip
    claims = SqlClaimStore(store)
    taken = claims.load_due(NOW, 10)  # soon-1, soon-2, soon-b held
    assert len(taken) == 3
    actions = AlarmInterventions(store)
    outcome = actions.bulk_cancel(AlarmFilter(application="app"), NOW + 1, "admin", 30)
    assert (outcome.changed, outcome.done) == (3, True)
    assert statuses(store) == {
        "soon-1": "cancelled", "soon-2": "cancelled", "later": "cancelled", "soon-b": "pending"
    }  # fmt: skip
    with claims.ring_transaction() as tx:  # the stale claims lock nothing: nothing rings
        assert [row.business_id for row in tx.lock_live(taken)] == ["soon-b"]
    history = AlarmHistory(store).events("app", "later")
    assert [(e.kind, e.actor) for e in history][-1] == ("cancelled", "admin")
    with pytest.raises(ValidationError):
        actions.bulk_cancel(AlarmFilter(status="dead"), NOW, "admin", 30)


def test_searches_page_in_the_order_of_their_filter(store: AlarmStore):
    keys = ["a%1", "a_2", "A-3", "ab", "a%", "b"]
    store.create_many(
        [new(key, target_ring_at=NOW + 1_000 * (6 - n)) for n, key in enumerate(keys)],
        NOW - 1_000,
    )
    prefix = AlarmFilter(application="app", business_id_prefix="a%")
    assert order_of(prefix) == BY_KEY
    found = store.search(prefix, 10, None)
    assert [a.business_id for a in found] == ["a%", "a%1"]  # "%" is no wildcard; case counts
    page = store.search(prefix, 1, None)
    assert store.search(prefix, 10, position(BY_KEY, page[-1])) == found[1:]

    due = AlarmFilter(due_from=NOW + 2_000, due_to=NOW + 5_000)
    assert order_of(due) == BY_DUE
    pages, after = [], None
    while chunk := store.search(due, 2, after):
        pages.append([a.business_id for a in chunk])
        after = position(BY_DUE, chunk[-1])
    assert pages == [["a%", "ab"], ["A-3"]]  # by next_try_time; due_to is exclusive

    assert order_of(AlarmFilter(status="pending")) == BY_ID
    by_id = store.search(AlarmFilter(status="pending"), 3, (store.get("app", "a_2").id,))
    assert [a.business_id for a in by_id] == ["A-3", "ab", "a%"]


def test_a_due_range_of_every_status_merges_them_in_due_order(store: AlarmStore):
    store.create_many(
        [new("dead-1"), new("p-late", target_ring_at=NOW + 50),
         new("p-early", target_ring_at=NOW + 5)],
        NOW - 1_000,
    )  # fmt: skip
    finish(store, ["dead-1"])  # died at NOW + 10; the other two were claimed until NOW + 30,010
    store.cancel("app", "p-early", NOW + 20, actor="app")  # finished at NOW + 20
    due = AlarmFilter(application="app", due_from=NOW, due_to=NOW + 40_000)
    found = [(a.business_id, a.status) for a in store.search(due, 10, None)]
    assert found == [("dead-1", "dead"), ("p-early", "cancelled"), ("p-late", "pending")]
    first = store.search(due, 1, None)
    rest = store.search(due, 10, position(BY_DUE, first[-1]))
    assert [a.business_id for a in rest] == ["p-early", "p-late"]
