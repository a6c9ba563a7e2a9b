"""The store's contract, run against SQLite and the real MariaDB."""

from __future__ import annotations

import gc
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from clock_server.errors import Conflict, NotFound, ValidationError
from clock_server.model import AlarmChanges, NewAlarm
from clock_server.store.alarms import AlarmStore
from clock_server.store.claims import SqlClaimStore
from tests.support import claim_as_before_slots

NOW = 1_700_000_000_000


def new(business_id: str = "b1", target: int = NOW + 1_000, **kw) -> NewAlarm:
    values = {
        "application": "app",
        "business_id": business_id,
        "payload": "p",
        "target_ring_at": target,
        "latest_ring_at": None,
        **kw,
    }
    return NewAlarm(**values)


def test_create_then_retry_returns_the_stored_alarm_unchanged(store: AlarmStore):
    first, created = store.create(new(payload="one"), NOW)
    again, created_again = store.create(new(payload="two", target=NOW + 9), NOW + 5)
    assert created and not created_again
    assert again == first
    assert again.payload == "one" and again.status == "pending"
    assert again.next_try_time == again.target_ring_at == NOW + 1_000


def test_keys_are_case_sensitive_and_scoped_by_application(store: AlarmStore):
    a, _ = store.create(new("Order-1"), NOW)
    b, created_b = store.create(new("order-1"), NOW)
    c, created_c = store.create(new("Order-1", application="other"), NOW)
    assert created_b and created_c
    assert len({a.id, b.id, c.id}) == 3


def test_concurrent_duplicate_creates_make_one_alarm(store: AlarmStore):
    barrier = threading.Barrier(8)

    def create(i: int):
        barrier.wait()
        return store.create(new("same", payload=f"p{i}"), NOW)

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(create, range(8)))
    assert sum(created for _, created in results) == 1
    assert len({alarm.id for alarm, _ in results}) == 1
    assert len(store.list("app", None, 100, None)) == 1


@pytest.fixture(params=["returning", "lookup"])
def batch_store(request: pytest.FixtureRequest, store: AlarmStore, monkeypatch) -> AlarmStore:
    """The store with INSERT ... RETURNING (MariaDB, SQLite) and without it (as on MySQL)."""
    if request.param == "lookup":
        monkeypatch.setattr(store, "_caps", replace(store.caps, insert_returning=False))
    return store


def test_create_many_reports_each_item(batch_store: AlarmStore):
    store = batch_store
    existing, _ = store.create(new("b0"), NOW)
    items = [new("b0"), new("b1"), new("b2"), new("b1", payload="dup")]
    results = store.create_many(items, NOW + 1)
    assert [created for _, created in results] == [False, True, True, False]
    assert results[0][0] == existing
    assert results[1][0].id == results[3][0].id
    assert results[3][0].payload == "p"
    assert results[1][0] == store.get("app", "b1")  # built from what was sent, as stored
    assert results[2][0] == store.get("app", "b2")


def test_create_each_stores_each_alarm_with_its_own_time(batch_store: AlarmStore):
    results = batch_store.create_each(
        [(new("t1"), NOW + 1), (new("t2"), NOW + 2), (new("t1"), NOW + 3)]
    )
    assert [created for _, created in results] == [True, True, False]
    assert [alarm.created_at for alarm, _ in results] == [NOW + 1, NOW + 2, NOW + 1]
    assert (
        batch_store.get("app", "t2").created_at
        == batch_store.get("app", "t2").updated_at
        == NOW + 2
    )


def test_concurrent_batches_with_the_same_keys_create_each_alarm_once(batch_store: AlarmStore):
    items = [new(f"k{i}") for i in range(50)]
    with ThreadPoolExecutor(4) as pool:
        batches = list(pool.map(lambda n: batch_store.create_many(items, NOW + n), range(4)))
    for position in range(50):
        outcomes = [batch[position] for batch in batches]
        assert sum(created for _, created in outcomes) == 1
        assert len({alarm.id for alarm, _ in outcomes}) == 1
    assert len(batch_store.list("app", None, 100, None)) == 50


def test_a_batch_of_large_payloads_is_stored_whole(batch_store: AlarmStore):
    # 300 x 64 KiB: 19 MiB, more than MariaDB takes in one statement by default (16 MiB).
    payloads = {f"big{i}": chr(0x1F600 + i % 64) * 16_384 for i in range(300)}
    results = batch_store.create_many([new(k, payload=v) for k, v in payloads.items()], NOW)
    assert all(created for _, created in results)
    assert {k: batch_store.get("app", k).payload for k in payloads} == payloads


def test_a_batch_of_known_keys_changes_nothing(batch_store: AlarmStore):
    first = batch_store.create_many([new("a"), new("b")], NOW)
    again = batch_store.create_many([new("a", payload="other"), new("b")], NOW + 5)
    assert [created for _, created in again] == [False, False]
    assert [alarm for alarm, _ in again] == [alarm for alarm, _ in first]


def test_get_unknown_is_not_found(store: AlarmStore):
    with pytest.raises(NotFound):
        store.get("app", "missing")


def test_update_moves_target_and_drops_the_claim(store: AlarmStore):
    alarm, _ = store.create(new(), NOW)
    claims = SqlClaimStore(store).load_due(NOW + 10_000, 10)
    assert [c.id for c in claims] == [alarm.id]
    moved = store.update(
        "app", "b1", AlarmChanges(target_ring_at=NOW + 5_000), NOW + 1, actor="app"
    )
    assert moved.target_ring_at == moved.next_try_time == NOW + 5_000
    assert moved.updated_at == NOW + 1
    with SqlClaimStore(store).ring_transaction() as tx:
        assert tx.lock_live(claims) == []


def test_update_checks_the_cutoff_against_stored_values(store: AlarmStore):
    store.create(new(target=NOW + 1_000), NOW)
    with pytest.raises(ValidationError):
        store.update(
            "app", "b1", AlarmChanges(set_latest_ring_at=True, latest_ring_at=NOW), NOW, actor="a"
        )
    store.update(
        "app",
        "b1",
        AlarmChanges(set_latest_ring_at=True, latest_ring_at=NOW + 2_000),
        NOW,
        actor="app",
    )
    with pytest.raises(ValidationError):
        store.update("app", "b1", AlarmChanges(target_ring_at=NOW + 3_000), NOW, actor="app")
    cleared = store.update("app", "b1", AlarmChanges(set_latest_ring_at=True), NOW, actor="app")
    assert cleared.latest_ring_at is None and cleared.target_ring_at == NOW + 1_000


def test_cancel_twice_then_conflict_once_rung(store: AlarmStore):
    store.create(new("c"), NOW)
    assert store.cancel("app", "c", NOW, actor="app").status == "cancelled"
    assert store.cancel("app", "c", NOW, actor="app").status == "cancelled"
    with pytest.raises(Conflict) as info:
        store.update("app", "c", AlarmChanges(payload="x"), NOW, actor="app")
    assert info.value.status == "cancelled"
    store.create(new("r", target=NOW), NOW)
    claims_store = SqlClaimStore(store)
    claims = claims_store.load_due(NOW, 10)
    with claims_store.ring_transaction() as tx:
        tx.mark_rung([(c.id, NOW) for c in claims], NOW)
    with pytest.raises(Conflict) as info:
        store.cancel("app", "r", NOW, actor="app")
    assert info.value.status == "rung"


@pytest.mark.mariadb
def test_a_ring_batch_locks_only_its_own_rows_on_a_small_table(mariadb_store: AlarmStore):
    """Another lane, a cancel and a claim of other alarms go on while a batch holds its rows:
    with few rows MariaDB would read them by `status`, and lock every pending row."""
    store = mariadb_store
    claims_store = SqlClaimStore(store)
    store.create_many([new(f"l{i:02}", target=NOW) for i in range(60)], NOW)
    claims = claims_store.load_due(NOW, 40)
    done: dict[str, object] = {}

    def others() -> None:
        with claims_store.ring_transaction() as lane:
            done["other lane locked"] = len(lane.lock_live(claims[20:]))
        done["cancel"] = store.cancel("app", "l59", NOW, actor="app").status
        done["claimed"] = len(claims_store.load_due(NOW, 100))

    with claims_store.ring_transaction() as holding:
        assert len(holding.lock_live(claims[:20])) == 20
        thread = threading.Thread(target=others, daemon=True)
        thread.start()
        thread.join(5)
        finished_while_held = dict(done)
    thread.join(60)
    # a read locks nothing and waits for nothing: the 59 pending, the held ones among them
    expected = {"other lane locked": 20, "cancel": "cancelled", "claimed": 59}
    assert finished_while_held == expected, "waited on another batch's locks"


def test_outcomes_of_a_ring_batch_are_recorded_per_alarm(store: AlarmStore):
    store.create_many([new(f"o{i}", target=NOW) for i in range(7)], NOW)
    claims_store = SqlClaimStore(store)
    ids = [c.id for c in claims_store.load_due(NOW, 10)]
    with claims_store.ring_transaction() as tx:
        # three publish groups, each with its own time; one dead, one expired
        tx.mark_rung(
            [(ids[0], NOW + 1), (ids[1], NOW + 1), (ids[2], NOW + 3), (ids[3], NOW + 7)], NOW + 9
        )
        tx.mark_dead([ids[4]], NOW + 9)
        tx.mark_expired([ids[5]], NOW + 9)
        tx.mark_rung([], NOW + 9)
    alarms = {alarm.id: alarm for alarm in store.list("app", None, 10, None)}
    assert [alarms[i].status for i in ids] == ["rung"] * 4 + ["dead", "expired", "pending"]
    assert [alarms[i].rung_at for i in ids] == [
        NOW + 1,
        NOW + 1,
        NOW + 3,
        NOW + 7,
        None,
        None,
        None,
    ]
    assert {alarms[i].updated_at for i in ids[:6]} == {NOW + 9}


def test_a_ring_batch_is_freed_when_it_ends_without_waiting_for_the_garbage_collector(
    store: AlarmStore,
):
    """Held by a reference cycle, every batch's thousand rows would wait for the collector,
    whose pass then pauses every thread of the engine for tens of milliseconds."""
    store.create_many([new(f"g{i}", target=NOW) for i in range(5)], NOW)
    claims_store = SqlClaimStore(store)
    claims = claims_store.load_due(NOW, 10)
    gc.collect()
    gc.disable()
    try:
        with claims_store.ring_transaction() as tx:
            live = tx.lock_live(claims)
            tx.mark_rung([(row.id, NOW) for row in live[:3]], NOW)
            tx.mark_dead([live[3].id], NOW, "not confirmed")
            tx.mark_expired([live[4].id], NOW)
        batch = weakref.ref(tx)
        del tx, live
        assert batch() is None
    finally:
        gc.enable()
    statuses = sorted(alarm.status for alarm in store.list("app", None, 10, None))
    assert statuses == ["dead", "expired", "rung", "rung", "rung"]


def test_list_pages_by_id_with_filters(store: AlarmStore):
    for i in range(7):
        store.create(new(f"b{i}"), NOW)
    store.create(new("x", application="other"), NOW)
    store.cancel("app", "b3", NOW, actor="app")
    page = store.list("app", None, 3, None)
    rest = store.list("app", None, 10, page[-1].id)
    assert [a.business_id for a in page + rest] == [f"b{i}" for i in range(7)]
    assert [a.business_id for a in store.list(None, "cancelled", 10, None)] == ["b3"]


def test_a_read_is_earliest_first_within_the_horizon_and_writes_nothing(store: AlarmStore):
    for i in range(40):
        store.create(new(f"b{i}", target=NOW + i * 100), NOW)
    before = store.list("app", None, 100, None)
    claims_store = SqlClaimStore(store)
    first = claims_store.load_due(NOW + 1_950, 10)
    assert [c.due_ms for c in first] == [NOW + i * 100 for i in range(10)]
    every = claims_store.load_due(NOW + 1_950, 100)
    assert [c.due_ms for c in every] == [NOW + i * 100 for i in range(20)]
    assert every[:10] == first  # read again, the same: nothing was taken
    assert store.list("app", None, 100, None) == before


def test_a_read_from_a_position_starts_just_after_it(store: AlarmStore):
    for i in range(6):
        store.create(new(f"b{i}", target=NOW + i * 100), NOW)
    tie, _ = store.create(new("tie", target=NOW + 300), NOW)  # due with b3, a later id
    claims_store = SqlClaimStore(store)
    b3 = store.get("app", "b3")
    taken = claims_store.load_due(NOW + 1_000, 10, after=(NOW + 300, b3.id))
    assert (taken[0].due_ms, taken[0].id) == (NOW + 300, tie.id)
    assert [c.due_ms for c in taken] == [NOW + 300, NOW + 400, NOW + 500]
    before = claims_store.load_due(NOW + 1_000, 10, after=(NOW + 199, 2**63 - 1))
    assert [c.due_ms for c in before] == [NOW + 200, NOW + 300, NOW + 300, NOW + 400, NOW + 500]


def test_a_read_for_one_application_takes_only_its_earliest_due(store: AlarmStore):
    for i in range(4):
        store.create(new(f"a{i}", target=NOW + i * 100, application="a"), NOW)
        store.create(new(f"b{i}", target=NOW + 50 + i * 100, application="b"), NOW)
    claims_store = SqlClaimStore(store)
    taken = claims_store.load_due(NOW + 250, 10, application="b")
    assert [(c.application, c.due_ms) for c in taken] == [
        ("b", NOW + 50), ("b", NOW + 150), ("b", NOW + 250)
    ]  # fmt: skip
    rest = claims_store.load_due(NOW + 250, 10)
    assert [c.application for c in rest] == ["a", "b", "a", "b", "a", "b"]


def test_due_applications_names_each_with_its_earliest_unclaimed_due(store: AlarmStore):
    a0, _ = store.create(new("a0", target=NOW + 100, application="a"), NOW)
    store.create(new("a1", target=NOW + 700, application="a"), NOW)
    store.create(new("b0", target=NOW + 300, application="b"), NOW)
    store.create(new("c0", target=NOW + 5_000, application="c"), NOW)  # not due by the horizon
    store.create(new("d0", target=NOW, application="d"), NOW)
    store.cancel("d", "d0", NOW, actor="d")  # finished rows do not count
    claims_store = SqlClaimStore(store)
    assert claims_store.due_applications(NOW + 1_000) == {"a": NOW + 100, "b": NOW + 300}
    claims_store.load_due(NOW + 200, 10)  # a read changes nothing
    assert claims_store.due_applications(NOW + 1_000) == {"a": NOW + 100, "b": NOW + 300}
    claim_as_before_slots(store, [a0.id], owner=7, lease_until_ms=NOW + 30_000)
    assert claims_store.due_applications(NOW + 1_000) == {"a": NOW + 700, "b": NOW + 300}


def test_defer_makes_alarms_due_later_and_moves_their_version(store: AlarmStore):
    alarm, _ = store.create(new(target=NOW + 500), NOW)
    claims_store = SqlClaimStore(store)
    [claim] = claims_store.load_due(NOW + 1_000, 10)
    later = claim._replace(due_ms=NOW + 20_000)
    assert claims_store.defer([later], NOW) == 1
    assert claims_store.defer([later], NOW) == 0  # stale: its version moved
    assert store.get("app", "b1").next_try_time == NOW + 20_000
    assert claims_store.load_due(NOW + 1_000, 10) == []
    [again] = claims_store.load_due(NOW + 20_000, 10)
    assert (again.id, again.version) == (alarm.id, claim.version + 1)


def test_an_alarm_a_release_before_slots_claimed_is_read_at_its_leases_end(store: AlarmStore):
    """Its next_try_time is that lease's end: read in that order, it rings then unless that
    release rang it or gave it back first (its version moved)."""
    alarm, _ = store.create(new(target=NOW), NOW)
    store.create(new(business_id="b2", target=NOW + 5_000), NOW)
    claims = SqlClaimStore(store)
    [old] = claims.load_due(NOW, 10)
    claim_as_before_slots(store, [alarm.id], owner=7, lease_until_ms=NOW + 30_000)
    assert [c.due_ms for c in claims.load_due(NOW + 29_999, 10)] == [NOW + 5_000]
    ended = claims.load_due(NOW + 30_000, 10)
    assert [(c.id, c.due_ms) for c in ended][-1] == (alarm.id, NOW + 30_000)
    ids, found = claims.load_new(0, [], 10)
    assert alarm.id in ids and (alarm.id, NOW + 30_000) in [(c.id, c.due_ms) for c in found]
    with claims.ring_transaction() as tx:
        assert tx.lock_live([old]) == []  # its version moved with the claim
        assert alarm.id in [r.id for r in tx.lock_live(ended)]


def test_retry_bookkeeping(store: AlarmStore):
    store.create(new(target=NOW), NOW)
    claims_store = SqlClaimStore(store)
    claims = claims_store.load_due(NOW, 10)
    with claims_store.ring_transaction() as tx:
        tx.schedule_retries([(claims[0].id, NOW + 800)], NOW)
    alarm = store.get("app", "b1")
    assert (alarm.status, alarm.retry_times, alarm.next_try_time) == ("pending", 1, NOW + 800)


def test_count_overdue_sees_only_unclaimed_pending_alarms(store: AlarmStore):
    store.create(new("late", target=NOW - 10_000), NOW)
    store.create(new("claimed", target=NOW - 20_000), NOW)
    store.create(new("soon", target=NOW + 10_000), NOW)
    store.create(new("gone", target=NOW - 10_000), NOW)
    store.cancel("app", "gone", NOW, actor="app")
    claimed = store.get("app", "claimed")
    claim_as_before_slots(store, [claimed.id], owner=7, lease_until_ms=NOW + 30_000)
    assert store.count_overdue(NOW) == 1
