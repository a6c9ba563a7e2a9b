"""The backlog job sets the overdue gauge from the database."""

from __future__ import annotations

from clock_server.engine.maintenance import Maintenance
from clock_server.metrics import Metrics
from clock_server.model import NewAlarm


def test_measure_backlog_sets_the_gauge(store, fake_clock):
    now = fake_clock.now_ms()
    store.create(NewAlarm("app", "late", "p", now - 60_000, None), now)
    store.create(NewAlarm("app", "fresh", "p", now - 1_000, None), now)
    metrics = Metrics()
    maintenance = Maintenance(store, fake_clock, metrics)
    assert maintenance.measure_backlog() == 1
    assert metrics.overdue._value.get() == 1


def test_the_scheduler_starts_and_stops(store, fake_clock):
    maintenance = Maintenance(store, fake_clock, Metrics(), interval_s=3600)
    maintenance.start()
    scheduler = maintenance._scheduler
    assert scheduler is not None and scheduler.running
    assert [job.id for job in scheduler.get_jobs()] == ["measure_backlog"]
    maintenance.stop()
    assert not scheduler.running and maintenance._scheduler is None
    maintenance.stop()  # a second stop is harmless
