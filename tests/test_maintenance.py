"""The backlog job sets the overdue gauge from the database; the retention purge is
scheduled beside it (its behaviour: tests/test_retention.py)."""

from __future__ import annotations

from clock_server.engine.maintenance import PURGE_JOB, Maintenance, RetentionPurge
from clock_server.metrics import Metrics
from clock_server.model import NewAlarm
from clock_server.runtime.build import build
from clock_server.settings import Settings
from clock_server.store.purge import SqlFinishedAlarmPurger, SqlJobLease
from clock_server.testing import SettableClock
from tests.support import metric_value


def test_measure_backlog_sets_the_gauge(store, fake_clock):
    now = fake_clock.now_ms()
    store.create(NewAlarm("app", "late", "p", now - 60_000, None), now)
    store.create(NewAlarm("app", "fresh", "p", now - 1_000, None), now)
    metrics = Metrics()
    maintenance = Maintenance(store, fake_clock, metrics)
    assert maintenance.measure_backlog() == 1
    assert metric_value(metrics, "clock_overdue_alarms") == 1


def test_the_scheduler_starts_and_stops(store, fake_clock):
    maintenance = Maintenance(store, fake_clock, Metrics(), interval_s=3600)
    maintenance.start()
    scheduler = maintenance._scheduler
    assert scheduler is not None and scheduler.running
    assert [job.id for job in scheduler.get_jobs()] == ["measure_backlog"]
    maintenance.stop()
    assert not scheduler.running and maintenance._scheduler is None
    maintenance.stop()  # a second stop is harmless


def test_the_retention_purge_is_scheduled_at_its_interval(store, fake_clock):
    metrics = Metrics()
    purge = RetentionPurge(
        SqlFinishedAlarmPurger(store),
        SqlJobLease(store),
        fake_clock,
        metrics,
        owner="server-a",
        retention_days=30,
        interval_s=1800,
        batch=500,
    )
    maintenance = Maintenance(store, fake_clock, metrics, interval_s=3600, purge=purge)
    maintenance.start()
    scheduler = maintenance._scheduler
    assert scheduler is not None
    jobs = {job.id: job for job in scheduler.get_jobs()}
    assert set(jobs) == {"measure_backlog", PURGE_JOB}
    assert jobs[PURGE_JOB].trigger.interval.total_seconds() == 1800
    assert jobs[PURGE_JOB].max_instances == 1
    maintenance.stop()
    assert purge._stopped.is_set()  # a run in progress ends after its batch


def test_build_wires_the_purge_from_the_settings(sqlite_url):
    settings = Settings(
        database_url=sqlite_url,
        run_engine=False,
        instance_id="host-1",
        retention_days=7,
        purge_interval_s=120,
        purge_batch=250,
    )
    runtime = build(settings, clock=SettableClock(), serve_http=False)
    try:
        purge = runtime.maintenance.purge
        assert purge is not None
        assert (purge.owner, purge.retention_days, purge.interval_s, purge.batch) == (
            "host-1",
            7,
            120,
            250,
        )
        assert purge.metrics is runtime.maintenance.metrics
        assert purge.lease_ms == 240_000 and purge.budget_ms == 96_000
    finally:
        runtime.store.close()
