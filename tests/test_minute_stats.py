"""The per-minute statistics: the percentile of merged buckets, the in-memory tally, its writer
and the purge on the fake clock against SQLite and MariaDB, two writers adding up, and the
engine and the API counting what they do."""

from __future__ import annotations

import pytest

from clock_server.engine.stats_purge import STATS_PURGE_JOB, StatsPurge
from clock_server.engine.stats_writer import StatsWriter
from clock_server.errors import ConfigError, Unavailable
from clock_server.minute_stats import (
    BUCKETS,
    MINUTE_MS,
    Key,
    MinuteCounts,
    MinuteTally,
    RingTally,
    bucket_of,
    quantile,
)
from clock_server.runtime.build import build
from clock_server.settings import Settings
from clock_server.store.alarms import AlarmStore
from clock_server.store.db import open_database
from clock_server.store.minute_stats import SqlMinuteStats
from clock_server.store.purge import SqlJobLease
from clock_server.testing import SettableClock
from tests.harness import ServiceHarness

MINUTE = 1_764_300_000_000
DAY_MS = 86_400_000


def histogram(**by_bucket: int) -> list[int]:
    """Counts per bucket, named by index: histogram(b3=2) counts 2 in the fourth bucket."""
    counts = [0] * BUCKETS
    for name, count in by_bucket.items():
        counts[int(name[1:])] = count
    return counts


@pytest.mark.parametrize(
    ("q", "counts", "expected"),
    [
        (0.5, histogram(), None),  # nothing counted
        (0.5, histogram(b0=10), 0.0),  # exactly 0 ms
        (0.5, histogram(b1=10), 0.5),  # (0, 1]: linear from 0
        (0.99, histogram(b1=100), 0.99),
        (0.5, histogram(b4=4), 7.5),  # (5, 10], half-way
        (0.25, histogram(b4=4), 6.25),
        (1.0, histogram(b4=4), 10.0),
        (0.5, histogram(b1=1, b10=1), 1.0),  # the rank falls at the end of the first bucket
        (0.75, histogram(b1=1, b10=1), 750.0),  # (500, 1000], half-way
        (0.5, histogram(b18=2), 2_250_000.0),  # (15 min, 1 h], half-way
        (0.5, histogram(b21=3), 86_400_000.0),  # the unbounded bucket: its lower bound
        (0.99, histogram(b3=99, b21=1), 5.0),
    ],
)
def test_the_quantile_is_linear_within_its_bucket(q: float, counts: list[int], expected):
    assert quantile(q, counts) == expected


@pytest.mark.parametrize(
    ("lateness_ms", "bucket"),
    [
        (0, 0),
        (1, 1),
        (2, 2),
        (3, 3),
        (10, 4),
        (11, 5),
        (300_001, 17),
        (3 * DAY_MS, 21),
    ],
)
def test_a_lateness_counts_in_the_bucket_of_its_upper_bound(lateness_ms: int, bucket: int):
    assert bucket_of(lateness_ms) == bucket


def test_the_tally_adds_by_minute_and_application_and_starts_over_when_taken():
    tally = MinuteTally()
    tally.created(MINUTE + 5, {"a": 2, "b": 0})
    tally.created(MINUTE + MINUTE_MS - 1, {"a": 1})
    tally.rang(MINUTE + MINUTE_MS, {"a": RingTally(2, 1, [3, 700]), "b": RingTally(0, 4, [])})
    taken = tally.take()
    assert sorted(taken) == [(MINUTE, "a"), (MINUTE + MINUTE_MS, "a"), (MINUTE + MINUTE_MS, "b")]
    assert taken[MINUTE, "a"].created == 3
    late = taken[MINUTE + MINUTE_MS, "a"]
    assert (late.rung, late.failed, late.lateness_sum_ms) == (2, 1, 703)
    assert late.lateness == histogram(b3=1, b10=1)
    assert taken[MINUTE + MINUTE_MS, "b"].failed == 4
    assert tally.take() == {}


def test_what_a_failed_write_gives_back_is_kept_bounded_oldest_dropped_first():
    tally = MinuteTally(max_keys=2)
    tally.created(MINUTE, {"a": 1})
    taken = tally.take()
    tally.created(MINUTE, {"a": 2})
    tally.created(MINUTE + MINUTE_MS, {"a": 5})
    tally.created(MINUTE + 2 * MINUTE_MS, {"a": 7})
    assert tally.give_back(taken) == 1
    kept = tally.take()
    assert {key: one.created for key, one in kept.items()} == {
        (MINUTE + MINUTE_MS, "a"): 5,
        (MINUTE + 2 * MINUTE_MS, "a"): 7,
    }


def rows_of(store: AlarmStore, applications=None) -> dict[Key, MinuteCounts]:
    rows = SqlMinuteStats(store).read(MINUTE - DAY_MS * 30, MINUTE + DAY_MS, applications)
    return {(row.minute, row.application): row.counts for row in rows}


def test_two_writers_add_up_in_the_shared_rows(store: AlarmStore, db_url: str):
    clock = SettableClock(MINUTE + 1_000)
    other = AlarmStore(open_database(db_url))
    try:
        first, second = MinuteTally(), MinuteTally()
        first.created(clock.now_ms(), {"a": 3})
        first.rang(clock.now_ms(), {"a": RingTally(2, 0, [4, 40])})
        second.created(clock.now_ms(), {"a": 4, "b": 1})
        second.rang(clock.now_ms(), {"a": RingTally(1, 2, [4])})
        StatsWriter(first, SqlMinuteStats(store), clock).run_once()
        StatsWriter(second, SqlMinuteStats(other), clock).run_once()
        StatsWriter(first, SqlMinuteStats(store), clock).run_once()  # nothing new: no change
        found = rows_of(store)
    finally:
        other.close()
    a = found[MINUTE, "a"]
    assert (a.created, a.rung, a.failed, a.lateness_sum_ms) == (7, 3, 2, 48)
    assert a.lateness == histogram(b3=2, b6=1)
    assert found[MINUTE, "b"].created == 1
    assert set(rows_of(store, ["b"])) == {(MINUTE, "b")}


class RefusingSink:
    def __init__(self) -> None:
        self.refuse = True
        self.added: list[dict[Key, MinuteCounts]] = []

    def add(self, counts) -> None:
        if self.refuse:
            raise Unavailable("database unavailable: down")
        self.added.append(dict(counts))

    def purge_before(self, minute_ms: int, batch: int) -> int:
        return 0


def test_a_refused_write_keeps_its_counts_for_the_next():
    clock = SettableClock(MINUTE)
    tally, sink = MinuteTally(), RefusingSink()
    writer = StatsWriter(tally, sink, clock, interval_s=5)
    tally.created(clock.now_ms(), {"a": 3})
    assert writer.run_once() == 5
    clock.advance(5_000)
    tally.created(clock.now_ms(), {"a": 1})
    sink.refuse = False
    writer.run_once()
    assert [{key: one.created for key, one in added.items()} for added in sink.added] == [
        {(MINUTE, "a"): 4}
    ]


def test_the_writer_writes_what_is_left_when_stopped(store: AlarmStore):
    clock = SettableClock(MINUTE)
    tally = MinuteTally()
    writer = StatsWriter(tally, SqlMinuteStats(store), clock, interval_s=3600)
    writer.start()
    tally.created(clock.now_ms(), {"late": 2})
    writer.stop()
    assert rows_of(store)[MINUTE, "late"].created == 2


def test_the_purge_deletes_minutes_past_the_retention_under_its_lease(store: AlarmStore):
    clock = SettableClock(MINUTE + 30_000)
    stats = SqlMinuteStats(store)
    old, edge, kept = MINUTE - 15 * DAY_MS, MINUTE - 14 * DAY_MS, MINUTE - 14 * DAY_MS + MINUTE_MS
    stats.add(
        {
            (old, "a"): MinuteCounts(created=1),
            (old, "b"): MinuteCounts(created=1),
            (old + MINUTE_MS, "a"): MinuteCounts(created=1),
            (edge, "a"): MinuteCounts(created=1),
            (kept, "a"): MinuteCounts(created=1),
            (MINUTE, "a"): MinuteCounts(created=1),
        }
    )

    def purge(owner: str) -> StatsPurge:
        return StatsPurge(
            stats,
            SqlJobLease(store),
            clock,
            owner=owner,
            retention_days=14,
            interval_s=60,
            batch=1,
        )

    assert purge("server-a").run() == 3  # one row a transaction, a minute going whole
    assert sorted(rows_of(store)) == [(edge, "a"), (kept, "a"), (MINUTE, "a")]
    assert SqlJobLease(store).holder(STATS_PURGE_JOB) == ("server-a", clock.now_ms() + 120_000)
    assert purge("server-b").run() is None  # another server holds the lease
    clock.advance(DAY_MS)
    assert purge("server-b").run() == 2
    assert sorted(rows_of(store)) == [(MINUTE, "a")]


def test_the_engine_and_the_api_count_creates_rings_failures_and_lateness(
    store: AlarmStore, fake_clock: SettableClock
):
    fake_clock.set(MINUTE + 1_000)
    harness = ServiceHarness(store, fake_clock, tokens="")
    body = {"application": "shop", "target_ring_at": MINUTE + 2_000, "payload": "p"}
    assert (
        harness.call("POST", "/v1/alarms", json={**body, "business_id": "one"}).status_code == 201
    )
    batch = {"alarms": [{**body, "business_id": f"b{n}"} for n in range(3)]}
    assert harness.call("POST", "/v1/alarms/batch", json=batch).status_code == 200
    expiring = {**body, "business_id": "late", "latest_ring_at": MINUTE + 2_000}
    assert harness.call("POST", "/v1/alarms", json=expiring).status_code == 201
    fake_clock.set(MINUTE + 2_000 + 5_000)  # past the cutoff of "late"; 5 s late for the rest
    harness.step()
    harness.runtime.stats.run_once()
    found = rows_of(store)[MINUTE, "shop"]
    assert (found.created, found.rung, found.failed) == (5, 4, 1)
    assert found.lateness == histogram(b12=4)  # (2000, 5000] ms
    assert found.lateness_sum_ms == 4 * 5_000
    assert (
        harness.call("POST", "/v1/alarms", json={**body, "business_id": "one"}).status_code == 200
    )
    harness.runtime.stats.run_once()
    assert rows_of(store)[MINUTE, "shop"].created == 5  # a repeated create creates nothing


def test_the_statistics_retention_is_a_positive_setting():
    assert Settings.from_env({}).stats_retention_days == 14
    assert Settings.from_env({"CLOCK_STATS_RETENTION_DAYS": "2.5"}).stats_retention_days == 2.5
    for bad in ("0", "-1", "soon"):
        with pytest.raises(ConfigError) as refused:
            Settings.from_env({"CLOCK_STATS_RETENTION_DAYS": bad})
        assert refused.value.field == "stats_retention_days"


def test_the_maintenance_schedules_the_statistics_purge_from_the_settings(sqlite_url: str):
    settings = Settings(
        database_url=sqlite_url,
        run_engine=False,
        instance_id="host-1",
        stats_retention_days=3,
        purge_interval_s=120,
    )
    runtime = build(settings, clock=SettableClock(), serve_http=False)
    try:
        purge = runtime.maintenance.stats_purge
        assert purge is not None
        assert (purge.owner, purge.retention_ms, purge.interval_s) == ("host-1", 3 * DAY_MS, 120)
        runtime.maintenance.start()
        scheduler = runtime.maintenance._scheduler
        assert scheduler is not None
        assert STATS_PURGE_JOB in {job.id for job in scheduler.get_jobs()}
    finally:
        runtime.maintenance.stop()
        runtime.store.close()
