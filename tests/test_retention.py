"""Retention: finished alarms are deleted once past their application's retention, in short
batches, by one server at a time; the key is free again afterwards. On SQLite and MariaDB."""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterator

import pytest
from sqlalchemy import delete, event

from clock_server.engine.maintenance import FINISHED, PURGE_JOB, Maintenance, RetentionPurge
from clock_server.metrics import Metrics
from clock_server.model import ApplicationPolicy, NewAlarm
from clock_server.store.alarms import AlarmStore
from clock_server.store.applications import SqlApplicationRegistry
from clock_server.store.claims import SqlClaimStore
from clock_server.store.purge import SqlFinishedAlarmPurger, SqlJobLease
from clock_server.store.schema import alarm_table, application_table, job_lease_table
from clock_server.testing import SettableClock
from tests.support import metric_value

NOW = 1_700_000_000_000
DAY = 86_400_000
HOUR = 3_600_000
_OFFSETS = itertools.count(1_000)  # each alarm its own target, so a claim takes it alone


@pytest.fixture
def db(store: AlarmStore) -> Iterator[AlarmStore]:
    """The store with no registered application and no job lease, before and after."""

    def clean() -> None:
        with store.db.begin() as conn:
            conn.execute(delete(job_lease_table))
            conn.execute(delete(application_table))

    clean()
    yield store
    clean()


def finish(store: AlarmStore, key: str, status: str, at_ms: int, application: str = "app") -> int:
    """Create an alarm and finish it with `status` at `at_ms` through the code that does it
    in service (the ring transaction, or a cancel); returns its id."""
    target = at_ms - next(_OFFSETS)
    alarm, _ = store.create(NewAlarm(application, key, "p", target, None), target - 1_000)
    if status == "cancelled":
        store.cancel(application, key, at_ms, actor=application)
    else:
        claims = SqlClaimStore(store)
        [claim] = claims.load_due(target, 10, after=(target - 1, 2**63 - 1))
        with claims.ring_transaction() as tx:
            [row] = tx.lock_live([claim])
            if status == "rung":
                tx.mark_rung([(row.id, at_ms)], at_ms)
            elif status == "expired":
                tx.mark_expired([row.id], at_ms)
            else:
                tx.mark_dead([row.id], at_ms)
    finished = store.get(application, key)
    assert (finished.status, finished.next_try_time) == (status, at_ms)
    return alarm.id


def purger(
    store: AlarmStore, clock: SettableClock, owner: str = "server-a", **options: object
) -> RetentionPurge:
    settings: dict[str, object] = {
        "retention_days": 30.0,
        "interval_s": 60.0,
        "batch": 1_000,
        "rest_ratio": 0.0,
        **options,
    }
    return RetentionPurge(
        SqlFinishedAlarmPurger(store),
        SqlJobLease(store),
        clock,
        Metrics(),
        owner=owner,
        **settings,  # type: ignore[arg-type]
    )


def seal(store: AlarmStore) -> None:
    """A pending alarm newer than every other: on SQLite the newest alarm is never deleted
    (see test_the_newest_alarm_keeps_its_id_taken_on_sqlite)."""
    store.create(NewAlarm("app", "newest", "p", NOW + 365 * DAY, None), NOW)


def keys(store: AlarmStore) -> set[str]:
    return {a.business_id for a in store.list(None, None, 1_000, None)} - {"newest"}


def set_retention(store: AlarmStore, application: str, days: float | None) -> None:
    policy = ApplicationPolicy(name=application, retention_days=days)
    SqlApplicationRegistry(store).put(policy, NOW)


@pytest.mark.parametrize("batch", [1_000, 2])
def test_only_finished_alarms_past_their_retention_are_deleted(
    db: AlarmStore, fake_clock: SettableClock, batch: int
):
    set_retention(db, "long", 90)
    set_retention(db, "short", 1)
    set_retention(db, "registered", None)  # the default, like an application not registered
    for status in FINISHED:
        finish(db, f"old-{status}", status, NOW - 31 * DAY)
        finish(db, f"new-{status}", status, NOW - 29 * DAY)
        finish(db, f"reg-old-{status}", status, NOW - 30 * DAY - 1, application="registered")
        finish(db, f"reg-new-{status}", status, NOW - 30 * DAY + 1, application="registered")
        finish(db, f"long-31-{status}", status, NOW - 31 * DAY, application="long")
        finish(db, f"long-91-{status}", status, NOW - 91 * DAY, application="long")
        finish(db, f"short-2-{status}", status, NOW - 2 * DAY, application="short")
        finish(db, f"short-12h-{status}", status, NOW - 12 * HOUR, application="short")
    # Pending alarms are never deleted, however long overdue.
    db.create(NewAlarm("app", "pending-old", "p", NOW - 400 * DAY, None), NOW - 401 * DAY)
    db.create(NewAlarm("short", "pending-short", "p", NOW - 9 * DAY, None), NOW - 10 * DAY)
    db.create(NewAlarm("app", "pending-future", "p", NOW + DAY, None), NOW)

    purge = purger(db, fake_clock, batch=batch)
    fake_clock.set(NOW)
    deleted = purge.run()

    gone = {"old", "reg-old", "long-91", "short-2"}
    kept = {"new", "reg-new", "long-31", "short-12h"}
    assert deleted == len(gone) * len(FINISHED)
    assert metric_value(purge.metrics, "clock_alarms_purged_total") == deleted
    assert keys(db) == {f"{prefix}-{status}" for prefix in kept for status in FINISHED} | {
        "pending-old",
        "pending-short",
        "pending-future",
    }
    assert purge.run() == 0  # nothing more to do


def test_a_run_deletes_in_transactions_of_at_most_the_batch(
    db: AlarmStore, fake_clock: SettableClock
):
    for index in range(10):
        finish(db, f"r{index}", "rung", NOW - 40 * DAY + index)
    finish(db, "kept", "rung", NOW - DAY)
    statements: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany):  # type: ignore[no-untyped-def]
        statements.append(statement)

    def committed(conn) -> None:  # type: ignore[no-untyped-def]
        statements.append("<commit>")

    event.listen(db.db, "before_cursor_execute", record)
    event.listen(db.db, "commit", committed)
    try:
        fake_clock.set(NOW)
        assert purger(db, fake_clock, batch=3).run() == 10
    finally:
        event.remove(db.db, "before_cursor_execute", record)
        event.remove(db.db, "commit", committed)

    deletes = [i for i, s in enumerate(statements) if s.startswith("DELETE FROM clock ")]
    assert all("FOR UPDATE" not in s and "LOCK" not in s for s in statements)
    sizes = [len(statements[i].split("IN (")[1].split(")")[0].split(",")) for i in deletes]
    assert sizes == [3, 3, 3, 1]
    for index in deletes:  # each delete, then what is kept with its alarms, is a transaction
        assert statements[index + 1].startswith("DELETE FROM clock_event ")
        assert statements[index + 2].startswith("DELETE FROM clock_count_increment ")
        assert statements[index + 3] == "<commit>"
    reads = [s for s in statements if "FROM clock" in s and "GROUP_CONCAT" in s]
    assert reads and all("ORDER BY next_try_time, id LIMIT 3)" in s for s in reads)
    assert keys(db) == {"kept"}


def test_a_purge_keeps_rows_changed_since_it_read_them(db: AlarmStore):
    """The delete checks status and finish time again: a row that no longer matches what
    the read found stays."""
    ids = [finish(db, f"r{index}", "rung", NOW - 40 * DAY + index) for index in range(3)]
    seal(db)
    store = SqlFinishedAlarmPurger(db)
    delete_now = store._delete

    def changed_meanwhile(*args):  # type: ignore[no-untyped-def]
        with db.db.begin() as conn:  # as if r0 had changed between the read and the delete
            conn.execute(
                alarm_table.update().where(alarm_table.c.id == ids[0]).values(status="pending")
            )
            conn.execute(
                alarm_table.update().where(alarm_table.c.id == ids[1]).values(next_try_time=NOW)
            )
        return delete_now(*args)

    store._delete = changed_meanwhile  # type: ignore[method-assign]
    cutoff = NOW - 30 * DAY
    batch = store.purge_batch("rung", (-1, 0), cutoff, 10, {}, cutoff)
    assert (batch.read, batch.deleted) == (3, 1)
    assert batch.last == (NOW - 40 * DAY + 2, ids[2])
    assert keys(db) == {"r0", "r1"}
    with pytest.raises(ValueError):
        store.purge_batch("pending", (-1, 0), cutoff, 10, {}, cutoff)
    with pytest.raises(ValueError):
        store.purge_batch("rung", (-1, 0), cutoff, 1_001, {}, cutoff)


def test_a_batch_deletes_by_each_applications_cutoff(db: AlarmStore):
    """One read may hold alarms of applications with different retentions: each goes by
    its own cutoff."""
    finish(db, "a", "dead", NOW - 10 * DAY, application="a")
    finish(db, "b", "dead", NOW - 10 * DAY, application="b")
    finish(db, "c", "dead", NOW - 10 * DAY, application="c")
    seal(db)
    store = SqlFinishedAlarmPurger(db)
    cutoffs = {"a": NOW - 5 * DAY, "b": NOW - 20 * DAY}
    batch = store.purge_batch("dead", (-1, 0), NOW, 10, cutoffs, NOW - 30 * DAY)
    assert (batch.read, batch.deleted) == (3, 1)
    assert keys(db) == {"b", "c"}


def test_a_run_stops_when_its_budget_is_spent_and_the_next_goes_on(
    db: AlarmStore, fake_clock: SettableClock
):
    for index in range(9):
        finish(db, f"r{index}", "rung", NOW - 40 * DAY + index)
    seal(db)
    fake_clock.set(NOW)
    purge = purger(db, fake_clock, batch=2, budget_s=2.5)
    read = purge.purger.purge_batch

    def slow_read(status, *args, **kwargs):  # type: ignore[no-untyped-def]
        if status == "rung":
            fake_clock.advance(1_000)  # each batch of rung alarms takes a second
        return read(status, *args, **kwargs)

    purge.purger.purge_batch = slow_read  # type: ignore[method-assign]
    assert purge.run() == 6  # three reads of two in 2.5 s, then the budget is spent
    assert len(keys(db)) == 3
    assert purge.run() == 3
    assert keys(db) == set()


def test_a_shortened_retention_reaches_rows_already_read_past(
    db: AlarmStore, fake_clock: SettableClock
):
    set_retention(db, "short", 5)
    finish(db, "ten-days", "rung", NOW - 10 * DAY, application="app")
    seal(db)
    purge = purger(db, fake_clock)
    fake_clock.set(NOW)
    assert purge.run() == 0  # app keeps 30 days; the 5-day class read past the row
    set_retention(db, "app", 5)
    fake_clock.advance(60_000)
    assert purge.run() == 1
    assert keys(db) == set()


def test_a_longer_retention_keeps_rows_the_default_reads_past(
    db: AlarmStore, fake_clock: SettableClock
):
    set_retention(db, "long", 60)
    finish(db, "long", "dead", NOW - 45 * DAY, application="long")
    finish(db, "app", "dead", NOW - 45 * DAY, application="app")
    seal(db)
    purge = purger(db, fake_clock, batch=1)
    fake_clock.set(NOW)
    assert purge.run() == 1
    assert keys(db) == {"long"}
    fake_clock.set(NOW + 16 * DAY)
    assert purge.run() == 1
    assert keys(db) == set()


def test_one_server_at_a_time_runs_the_purge(db: AlarmStore, fake_clock: SettableClock):
    first = purger(db, fake_clock, owner="server-a")
    second = purger(db, fake_clock, owner="server-b")
    fake_clock.set(NOW)
    finish(db, "one", "rung", NOW - 40 * DAY)
    finish(db, "two", "expired", NOW - 30 * DAY + 30_000)  # past its retention in 30 s
    finish(db, "three", "cancelled", NOW - 30 * DAY + 150_000)
    seal(db)
    assert first.run() == 1
    assert second.run() is None  # held by server-a, which renews it on each run
    assert keys(db) == {"two", "three"}
    fake_clock.advance(60_000)
    assert first.run() == 1
    fake_clock.advance(first.lease_ms - 1)
    assert second.run() is None  # still held: server-a's last run renewed it
    assert SqlJobLease(db).holder(PURGE_JOB) == ("server-a", NOW + 60_000 + first.lease_ms)
    fake_clock.advance(2)  # server-a stopped running: its lease has lapsed
    assert second.run() == 1
    assert first.run() is None
    assert SqlJobLease(db).holder(PURGE_JOB) == ("server-b", fake_clock.now_ms() + 120_000)
    assert keys(db) == set()


def test_two_servers_taking_a_new_lease_at_once_get_one(db: AlarmStore):
    leases = SqlJobLease(db)
    assert leases.take("job", "server-a", NOW, NOW + 1_000)
    assert not leases.take("job", "server-b", NOW, NOW + 1_000)
    assert leases.take("job", "server-a", NOW + 500, NOW + 1_500)  # renewed by its holder
    assert not leases.take("job", "server-b", NOW + 1_500, NOW + 2_500)  # until_ms not past
    assert leases.take("job", "server-b", NOW + 1_501, NOW + 2_500)
    assert leases.holder("job") == ("server-b", NOW + 2_500)


def test_after_the_purge_the_key_is_free_again(api, fake_clock: SettableClock):
    with api.store.db.begin() as conn:
        conn.execute(delete(job_lease_table))
    alarm = {"application": "app", "business_id": "order-1", "payload": "p"}
    created = api.client.post("/v1/alarms", json={**alarm, "target_ring_at": NOW + 60_000})
    assert created.status_code == 201
    cancelled = api.client.delete("/v1/alarms/app/order-1")
    assert cancelled.status_code == 200 and cancelled.get_json()["status"] == "cancelled"
    again = api.client.post("/v1/alarms", json={**alarm, "target_ring_at": NOW + 90_000})
    assert again.status_code == 200 and again.get_json()["id"] == created.get_json()["id"]

    later = {**alarm, "business_id": "order-2", "target_ring_at": NOW + 40 * DAY}
    assert api.client.post("/v1/alarms", json=later).status_code == 201

    fake_clock.set(NOW + 31 * DAY)
    assert purger(api.store, fake_clock).run() == 1
    assert api.client.get("/v1/alarms/app/order-1").status_code == 404
    target = NOW + 31 * DAY + 60_000
    fresh = api.client.post("/v1/alarms", json={**alarm, "target_ring_at": target})
    assert fresh.status_code == 201, fresh.get_data(as_text=True)
    assert fresh.get_json()["id"] > created.get_json()["id"]  # an id is never given twice
    assert fresh.get_json()["status"] == "pending"


def test_the_scheduled_job_counts_and_logs_what_it_purged(
    db: AlarmStore, fake_clock: SettableClock, caplog: pytest.LogCaptureFixture
):
    finish(db, "old", "rung", NOW - 40 * DAY)
    seal(db)
    metrics = Metrics()
    purge = purger(db, fake_clock)
    purge.metrics = metrics
    maintenance = Maintenance(db, fake_clock, metrics, purge=purge)
    fake_clock.set(NOW)
    with caplog.at_level(logging.INFO, logger="clock_server.engine.maintenance"):
        assert maintenance.purge_finished() == 1
    [record] = [r for r in caplog.records if getattr(r, "action", None) == "alarms_purged"]
    assert record.purged == 1  # type: ignore[attr-defined]
    assert metric_value(metrics, "clock_alarms_purged_total") == 1


def test_a_failed_run_is_logged_and_the_next_one_goes_on(
    db: AlarmStore, fake_clock: SettableClock, caplog: pytest.LogCaptureFixture
):
    finish(db, "old", "rung", NOW - 40 * DAY)
    seal(db)
    purge = purger(db, fake_clock)
    maintenance = Maintenance(db, fake_clock, Metrics(), purge=purge)

    def broken() -> dict[str, float]:
        raise RuntimeError("database gone")

    real = purge.purger.retention_overrides
    purge.purger.retention_overrides = broken  # type: ignore[method-assign]
    fake_clock.set(NOW)
    with caplog.at_level(logging.ERROR, logger="clock_server.engine.maintenance"):
        assert maintenance.purge_finished() == -1
    assert [getattr(r, "action", None) for r in caplog.records] == ["maintenance_error"]
    purge.purger.retention_overrides = real  # type: ignore[method-assign]
    assert maintenance.purge_finished() == 1


def test_a_stopped_purge_ends_its_run(db: AlarmStore, fake_clock: SettableClock):
    finish(db, "old", "rung", NOW - 40 * DAY)
    purge = purger(db, fake_clock)
    purge.stop()
    fake_clock.set(NOW)
    assert purge.run() == 0
    assert keys(db) == {"old"}


def test_the_newest_alarm_keeps_its_id_taken_on_sqlite(db: AlarmStore, fake_clock: SettableClock):
    """SQLite numbers a new row after the largest id in the table: the alarm holding it
    stays, so that a new alarm never gets the id (the message_id) of a purged one."""
    older = finish(db, "older", "rung", NOW - 40 * DAY)
    newest = finish(db, "last", "rung", NOW - 40 * DAY)
    fake_clock.set(NOW)
    purge = purger(db, fake_clock)
    sqlite = db.db.dialect.name == "sqlite"
    assert purge.run() == (1 if sqlite else 2)
    assert keys(db) == ({"last"} if sqlite else set())
    created, _ = db.create(NewAlarm("app", "next", "p", NOW + DAY, None), NOW)
    assert created.id > newest > older
    if sqlite:  # no longer the newest: it goes on the next run that reads it
        fake_clock.advance(60_000)
        assert purger(db, fake_clock).run() == 1
