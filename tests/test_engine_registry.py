"""The registry of live engines and the takeover of a silent engine's claims, on SQLite and
the real MariaDB."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy import text

from clock_server.model import Claim, NewAlarm
from clock_server.store.alarms import AlarmStore
from clock_server.store.claims import SqlClaimStore
from clock_server.store.engine_registry import SqlEngineRegistry
from tests.support import claim_as_before_slots

NOW = 1_700_000_000_000
LEASE_MS = 30_000


def add(store: AlarmStore, count: int, due_ms: int, prefix: str = "b") -> list[int]:
    alarms = [NewAlarm("app", f"{prefix}{i}", "p", due_ms + i, None) for i in range(count)]
    return [alarm.id for alarm, _ in store.create_many(alarms, NOW)]


def declared_dead(registry: SqlEngineRegistry, silent_since_ms: int, now_ms: int) -> list:
    """The engines declare_dead marks dead, or had marked, without the live ones."""
    judged = registry.declare_dead(silent_since_ms, now_ms)
    return [record for record in judged if record.dead_at is not None]


def claimed(store: AlarmStore, ids: list[int], owner: int, now_ms: int) -> list[Claim]:
    """`ids` claimed by the engine `owner` under a lease from `now_ms`, as a release before
    slots claimed alarms and as an engine still holds a webhook call's: the claims as held."""
    claim_as_before_slots(store, ids, owner, now_ms + LEASE_MS)
    with store.db.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT next_try_time, id, version, application, slot FROM clock"
                f" WHERE id IN ({', '.join(str(i) for i in ids)}) ORDER BY id"
            )
        ).all()
    return [Claim._make(row) for row in rows]


def rows_by_id(store: AlarmStore) -> dict[int, object]:
    return {alarm.id: alarm for alarm in store.list("app", None, 1_000, None)}


def test_engines_join_beat_and_are_listed(store: AlarmStore):
    registry = SqlEngineRegistry(store)
    first = registry.register("a", LEASE_MS, NOW)
    second = registry.register("b", LEASE_MS, NOW + 5)
    assert first != second
    assert registry.heartbeat(first, NOW + 500)
    live = {record.instance_id: record for record in registry.live_engines()}
    assert live["a"].heartbeat_at == NOW + 500 and live["b"].heartbeat_at == NOW + 5
    assert live["a"].lease_ms == LEASE_MS and live["a"].dead_at is None


def test_only_a_silent_engine_is_declared_dead_and_its_heartbeat_then_fails(store: AlarmStore):
    registry = SqlEngineRegistry(store)
    silent = registry.register("silent", LEASE_MS, NOW)
    beating = registry.register("beating", LEASE_MS, NOW)
    registry.heartbeat(beating, NOW + 2_000)
    judged = registry.declare_dead(silent_since_ms=NOW + 1, now_ms=NOW + 2_001)
    assert [(record.id, record.dead_at) for record in judged] == [
        (silent, NOW + 2_001),
        (beating, None),
    ]
    assert not registry.heartbeat(silent, NOW + 2_100)
    assert registry.heartbeat(beating, NOW + 2_100)
    assert [record.id for record in registry.live_engines()] == [beating]
    # declared once: a later pass lists it again (until removed) but keeps its time of death
    again = registry.declare_dead(silent_since_ms=NOW + 2_100, now_ms=NOW + 3_001)
    assert [(record.id, record.dead_at) for record in again if record.dead_at] == [
        (silent, NOW + 2_001)
    ]
    registry.remove(silent)
    assert [record.id for record in registry.declare_dead(NOW + 1, NOW + 3_002)] == [beating]


def test_take_over_gives_back_only_the_dead_engines_claims(store: AlarmStore):
    registry, claims = SqlEngineRegistry(store), SqlClaimStore(store)
    dead_id = registry.register("dead", LEASE_MS, NOW)
    live_id = registry.register("live", LEASE_MS, NOW)
    dead_ids = add(store, 5, NOW + 1_000, "d")
    live_ids = add(store, 5, NOW + 1_100, "l")
    unclaimed = add(store, 3, NOW + 9_000, "u")
    held = claimed(store, dead_ids, dead_id, NOW)
    claimed(store, live_ids, live_id, NOW + 100)
    registry.heartbeat(live_id, NOW + 2_000)
    [record] = declared_dead(registry, NOW + 1, NOW + 2_100)

    taken = registry.take_over(record, NOW + 2_100)

    assert (taken.released, taken.held) == (5, 0)
    rows = rows_by_id(store)
    for alarm_id in dead_ids:  # due again at its own target, for anyone to claim
        assert rows[alarm_id].next_try_time == rows[alarm_id].target_ring_at
    for alarm_id in live_ids:  # still the live engine's, leased
        assert rows[alarm_id].next_try_time == NOW + 100 + LEASE_MS
    for alarm_id in unclaimed:
        assert rows[alarm_id].next_try_time == rows[alarm_id].target_ring_at
    # the dead engine's claims are stale now: its ring batch finds none of them live
    with claims.ring_transaction() as tx:
        assert tx.lock_live(held) == []
    # and a second pass finds nothing more to give back
    assert registry.take_over(record, NOW + 2_600) == (0, 0)


def test_a_retry_taken_over_is_due_at_once_and_a_released_claim_is_not_touched(
    store: AlarmStore,
):
    registry, claims = SqlEngineRegistry(store), SqlClaimStore(store)
    engine_id = registry.register("dead", LEASE_MS, NOW)
    retried, given_back = add(store, 2, NOW + 100)
    held = claimed(store, [retried, given_back], engine_id, NOW)
    with claims.ring_transaction() as tx:  # a failed publish: retry in 20 s
        tx.lock_live([c for c in held if c.id == retried])
        tx.schedule_retries([(retried, NOW + 20_000)], NOW + 150)
    claimed(store, [retried], engine_id, NOW + 150)  # and claimed again for it
    [back] = [c for c in held if c.id == given_back]
    claims.defer([back._replace(due_ms=NOW + 101)], NOW + 160)  # given back, due at its target
    [record] = declared_dead(registry, NOW + 1, NOW + 2_500)

    assert registry.take_over(record, NOW + 2_500) == (1, 0)

    rows = rows_by_id(store)
    assert rows[retried].next_try_time == NOW + 2_500  # its backoff already began before
    assert rows[given_back].next_try_time == rows[given_back].target_ring_at


@pytest.mark.mariadb
def test_take_over_skips_a_ring_batch_in_flight_without_waiting_for_it(
    mariadb_store: AlarmStore,
):
    """Rows a stalled engine locked before its stall stay its own: it may have published
    them. The takeover leaves them, counts them as held, and does not wait on their locks."""
    registry, claims = SqlEngineRegistry(mariadb_store), SqlClaimStore(mariadb_store)
    engine_id = registry.register("stalled", LEASE_MS, NOW)
    ids = add(mariadb_store, 4, NOW + 100)
    held = claimed(mariadb_store, ids, engine_id, NOW)
    [record] = declared_dead(registry, NOW + 1, NOW + 2_500)
    locked = threading.Event()
    finish = threading.Event()

    def ring_batch_in_flight() -> None:
        with claims.ring_transaction() as tx:
            assert len(tx.lock_live(held[:1])) == 1
            locked.set()
            finish.wait(10)

    batch = threading.Thread(target=ring_batch_in_flight)
    batch.start()
    try:
        assert locked.wait(5)
        started = time.monotonic()
        taken = registry.take_over(record, NOW + 2_500)
        waited_s = time.monotonic() - started
    finally:
        finish.set()
        batch.join(10)
    assert (taken.released, taken.held) == (3, 1)
    assert waited_s < 5, "the takeover waited for the ring batch's lock"
    # the batch ended without an outcome: the next pass takes that row over too
    assert registry.take_over(record, NOW + 3_000) == (1, 0)
