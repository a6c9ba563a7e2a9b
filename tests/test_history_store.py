"""Each alarm's history in the store: every kind of event, written in the transaction of its
change, and deleted with its alarm. On SQLite and MariaDB."""

from __future__ import annotations

import pytest
from sqlalchemy import event as sa_event
from sqlalchemy import func, select

from clock_server.engine.maintenance import RetentionPurge
from clock_server.errors import Conflict, NotFound
from clock_server.metrics import Metrics
from clock_server.model import NOT_CONFIRMED, AlarmChanges, NewAlarm
from clock_server.store.alarms import AlarmStore
from clock_server.store.claims import SqlClaimStore
from clock_server.store.events import redriven, write_events
from clock_server.store.history import AlarmHistory
from clock_server.store.purge import SqlFinishedAlarmPurger, SqlJobLease
from clock_server.store.schema import event_table
from clock_server.testing import SettableClock

NOW = 1_700_000_000_000
DAY = 86_400_000


def new(business_id: str, target: int = NOW + 1_000, **kw) -> NewAlarm:  # type: ignore[no-untyped-def]
    values = {"latest_ring_at": None, "created_by": "app", **kw}
    return NewAlarm("app", business_id, "p", target, **values)


def story(store: AlarmStore, business_id: str, application: str = "app") -> list[tuple]:
    """(kind, actor, at, detail) of each event, oldest first."""
    events = AlarmHistory(store).events(application, business_id)
    return [(e.kind, e.actor, e.at, e.detail) for e in events]


def stored_events(store: AlarmStore) -> int:
    with store.db.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(event_table)).scalar_one())


def test_created_is_read_from_the_row_with_who_created_it(store: AlarmStore):
    store.create(new("one", latest_ring_at=NOW + 5_000), NOW)
    store.create_many([new("b1", created_by="admin"), new("b2", created_by="anonymous")], NOW + 1)
    store.create(new("old", created_by=None), NOW)
    assert story(store, "one") == [
        ("created", "app", NOW, {"target_ring_at": NOW + 1_000, "latest_ring_at": NOW + 5_000})
    ]
    assert [event[:3] for event in story(store, "b1") + story(store, "b2")] == [
        ("created", "admin", NOW + 1),
        ("created", "anonymous", NOW + 1),
    ]
    assert story(store, "old")[0][1] == "unknown"
    assert stored_events(store) == 0  # nothing written for a creation


def test_a_patch_records_what_it_changed_and_who(store: AlarmStore):
    store.create(new("m"), NOW)
    store.update("app", "m", AlarmChanges(target_ring_at=NOW + 9_000), NOW + 1, actor="admin")
    store.update("app", "m", AlarmChanges(target_ring_at=NOW + 9_000), NOW + 2, actor="app")
    store.update(
        "app",
        "m",
        AlarmChanges(payload="q", set_latest_ring_at=True, latest_ring_at=NOW + 20_000),
        NOW + 3,
        actor="app",
    )
    store.update("app", "m", AlarmChanges(payload="q"), NOW + 4, actor="app")  # no change
    store.update(
        "app",
        "m",
        AlarmChanges(target_ring_at=NOW + 7_000, set_latest_ring_at=True),
        NOW + 5,
        actor="app",
    )
    assert story(store, "m") == [
        ("created", "app", NOW, {"target_ring_at": NOW + 1_000, "latest_ring_at": None}),
        ("moved", "admin", NOW + 1, {"from": NOW + 1_000, "to": NOW + 9_000}),
        (
            "changed",
            "app",
            NOW + 3,
            {
                "latest_ring_at_from": None,
                "latest_ring_at_to": NOW + 20_000,
                "payload_changed": True,
            },
        ),
        (
            "moved",
            "app",
            NOW + 5,
            {
                "from": NOW + 9_000,
                "to": NOW + 7_000,
                "latest_ring_at_from": NOW + 20_000,
                "latest_ring_at_to": None,
            },
        ),
    ]


def test_a_cancel_is_recorded_once(store: AlarmStore):
    store.create(new("c"), NOW)
    store.cancel("app", "c", NOW + 1, actor="admin")
    store.cancel("app", "c", NOW + 2, actor="app")  # a repeat changes nothing
    assert [event[:3] for event in story(store, "c")] == [
        ("created", "app", NOW),
        ("cancelled", "admin", NOW + 1),
    ]


def test_a_rejected_change_records_nothing(store: AlarmStore):
    store.create(new("r", target=NOW), NOW)
    store.cancel("app", "r", NOW, actor="app")
    with pytest.raises(Conflict):
        store.update("app", "r", AlarmChanges(target_ring_at=NOW + 1), NOW, actor="app")
    assert [event[0] for event in story(store, "r")] == ["created", "cancelled"]


def test_each_outcome_of_a_ring_batch_is_an_event(store: AlarmStore):
    store.create_many(
        [
            new("rung", target=NOW),
            new("retried", target=NOW),
            new("dead", target=NOW),
            new("expired", target=NOW, latest_ring_at=NOW + 5),
        ],
        NOW - 1_000,
    )
    claims_store = SqlClaimStore(store)
    claims = claims_store.load_due(NOW, 10)
    ids = {alarm.business_id: alarm.id for alarm in store.list("app", None, 10, None)}
    with claims_store.ring_transaction() as tx:
        assert len(tx.lock_live(claims)) == 4
        tx.mark_expired([ids["expired"]], NOW + 10)
        tx.mark_rung([(ids["rung"], NOW + 1)], NOW + 20)
        tx.mark_dead([ids["dead"]], NOW + 20, "publisher unavailable")
        tx.schedule_retries([(ids["retried"], NOW + 900)], NOW + 20)
    assert story(store, "rung")[1:] == [("rung", "clock", NOW + 1, {"attempt": 1})]
    assert story(store, "retried")[1:] == [
        (
            "attempt_failed",
            "clock",
            NOW + 20,
            {"attempt": 1, "error": NOT_CONFIRMED, "retry_at": NOW + 900},
        )
    ]
    assert story(store, "dead")[1:] == [
        ("attempt_failed", "clock", NOW + 20, {"attempt": 1, "error": "publisher unavailable"}),
        ("dead", "clock", NOW + 20, {"attempts": 1, "error": "publisher unavailable"}),
    ]
    assert story(store, "expired")[1:] == [
        ("expired", "clock", NOW + 10, {"latest_ring_at": NOW + 5, "attempts": 0})
    ]
    assert stored_events(store) == 4  # the ring itself is read from the row


def test_a_ring_after_failed_attempts_tells_its_attempt(store: AlarmStore):
    store.create(new("late", target=NOW), NOW - 1_000)
    claims_store = SqlClaimStore(store)
    for attempt in (1, 2):
        claims = claims_store.load_due(NOW + attempt * 1_000, 10)
        with claims_store.ring_transaction() as tx:
            [row] = tx.lock_live(claims)
            assert row.retry_times == attempt - 1
            tx.schedule_retries([(row.id, NOW + attempt * 1_000)], NOW + attempt)
    claims = claims_store.load_due(NOW + 3_000, 10)
    with claims_store.ring_transaction() as tx:
        [row] = tx.lock_live(claims)
        tx.mark_rung([(row.id, NOW + 2_000)], NOW + 2_001)
    assert [(kind, detail.get("attempt")) for kind, _, _, detail in story(store, "late")] == [
        ("created", None),
        ("attempt_failed", 1),
        ("attempt_failed", 2),
        ("rung", 3),
    ]


def test_a_redrive_is_written_with_who_did_it(store: AlarmStore):
    alarm, _ = store.create(new("again", target=NOW), NOW - 1_000)
    with store.db.begin() as conn:
        write_events(conn, [redriven(alarm.id, NOW + 5, "admin", "dead", NOW + 60_000)])
    assert story(store, "again")[1:] == [
        ("redriven", "admin", NOW + 5, {"from_status": "dead", "due_at": NOW + 60_000})
    ]


def test_the_history_of_an_unknown_alarm_is_not_found(store: AlarmStore):
    with pytest.raises(NotFound):
        AlarmHistory(store).events("app", "missing")


def test_a_ring_batch_writes_its_events_in_one_statement(store: AlarmStore):
    """Two failed attempts, a death and an expiry cost one multi-row INSERT; a batch that
    only rings writes none."""
    store.create_many([new(f"f{i}", target=NOW, latest_ring_at=NOW + 5) for i in range(4)], NOW)
    claims_store = SqlClaimStore(store)
    statements: list[tuple[str, bool, int]] = []

    def record(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        statements.append((statement, executemany, len(parameters) if executemany else 1))

    sa_event.listen(store.db, "before_cursor_execute", record)
    try:
        claims = claims_store.load_due(NOW, 10)
        ids = [claim.id for claim in claims]
        statements.clear()
        with claims_store.ring_transaction() as tx:
            tx.lock_live(claims)
            tx.mark_expired([ids[0]], NOW + 10)
            tx.mark_rung([], NOW + 10)
            tx.mark_dead([ids[1]], NOW + 10)
            tx.schedule_retries([(ids[2], NOW + 900), (ids[3], NOW + 900)], NOW + 10)
        with_failures = list(statements)
        store.create_many([new(f"ok{i}", target=NOW + 1) for i in range(3)], NOW)
        claims = claims_store.load_due(NOW + 1, 10)
        statements.clear()
        with claims_store.ring_transaction() as tx:
            tx.lock_live(claims)
            tx.mark_expired([], NOW + 10)
            tx.mark_rung([(claim.id, NOW + 1) for claim in claims], NOW + 10)
        only_rung = list(statements)
    finally:
        sa_event.remove(store.db, "before_cursor_execute", record)
    writes = [entry for entry in with_failures if "clock_event" in entry[0]]
    assert [(executemany, rows) for _, executemany, rows in writes] == [(True, 5)]
    assert [entry for entry in only_rung if "clock_event" in entry[0]] == []
    if store.db.dialect.name in ("mysql", "mariadb"):
        from pymysql.cursors import RE_INSERT_VALUES

        # What makes PyMySQL send the rows as one multi-row INSERT.
        assert RE_INSERT_VALUES.match(writes[0][0])


def test_the_purge_deletes_events_with_their_alarm(store: AlarmStore):
    old = NOW - 40 * DAY
    for key in ("gone", "kept"):
        store.create(new(key, target=old), old - 1_000)
        store.update("app", key, AlarmChanges(payload="q"), old - 500, actor="app")
    store.create(new("pending", target=NOW + DAY), old)
    store.update("app", "pending", AlarmChanges(payload="q"), old, actor="app")
    store.cancel("app", "gone", old, actor="app")
    store.cancel("app", "kept", NOW - DAY, actor="app")
    store.create(new("newest", target=NOW + DAY), NOW)  # SQLite keeps its newest alarm
    clock = SettableClock(NOW)
    purge = RetentionPurge(
        SqlFinishedAlarmPurger(store),
        SqlJobLease(store),
        clock,
        Metrics(),
        owner="server-a",
        retention_days=30.0,
        interval_s=60.0,
        batch=1_000,
        rest_ratio=0.0,
    )
    assert purge.run() == 1
    with pytest.raises(NotFound):
        store.get("app", "gone")
    assert [event[0] for event in story(store, "kept")] == ["created", "changed", "cancelled"]
    assert [event[0] for event in story(store, "pending")] == ["created", "changed"]
    assert stored_events(store) == 3
