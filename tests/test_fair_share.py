"""Many applications on one engine, stepped with the fake clock on SQLite and MariaDB: a
backlog is shared between applications, each application's delivery rate holds back (never
drops) its alarms, and its own retry policy applies."""

from __future__ import annotations

import json

import pytest

from clock_server.engine.alarm_engine import AlarmEngine
from clock_server.model import ApplicationPolicy
from clock_server.store.alarms import AlarmStore
from clock_server.store.applications import SqlApplicationRegistry
from clock_server.testing import InMemoryPublisher, SettableClock

from .harness import HoldingPublisher, create, engine_on, preload
from .support import drive, eventually, metric_value, settle


@pytest.fixture
def make_engine(store: AlarmStore, fake_clock: SettableClock, publisher: InMemoryPublisher):
    def make(**overrides) -> AlarmEngine:
        return engine_on(store, fake_clock, publisher, **overrides)

    return make


def sent(publisher: InMemoryPublisher) -> list[dict]:
    return [json.loads(message.body) for message in publisher.published]


def test_a_backlog_does_not_hold_back_another_applications_alarms(
    store, fake_clock, publisher, make_engine
):
    engine = make_engine(ring_batch=100, ring_lanes=1, ring_lead_ms=0)
    now = fake_clock.now_ms()
    create(store, now, "burst", [now + 1_000] * 1_000)
    quiet = create(store, now, "quiet", [now + 1_050, now + 1_200, now + 5_000])
    preload(engine)
    fake_clock.set(now + 1_300)  # 1,000 due at once, and two of quiet's since
    engine.ringer.run_once()  # one lane: this rings one batch of 100, synchronously
    first = sent(publisher)
    assert len(first) == 100
    assert [m["id"] for m in first if m["application"] == "quiet"] == quiet[:2]
    assert all(m["published_at"] >= m["target_ring_at"] for m in first)
    drive(engine, fake_clock, now + 5_000)
    bodies = sent(publisher)
    assert sorted(m["id"] for m in bodies if m["application"] == "quiet") == quiet
    assert sum(m["application"] == "burst" for m in bodies) == 1_000
    assert all(m["published_at"] >= m["target_ring_at"] for m in bodies)


def burst_filling_the_heap(
    store: AlarmStore, clock: SettableClock, make_engine, quiet_after_ms: list[int]
) -> tuple[AlarmEngine, int, list[int]]:
    """An engine whose heap of 100 is full of burst's 500 alarms due at now + 1 s, and quiet's
    alarms due `quiet_after_ms` after now, still in the database."""
    engine = make_engine(heap_size=100, claim_batch=50, ring_batch=100, ring_lanes=1,
                         ring_lead_ms=0)  # fmt: skip
    now = clock.now_ms()
    create(store, now, "burst", [now + 1_000] * 500)
    quiet = create(store, now, "quiet", [now + after for after in quiet_after_ms])
    preload(engine)
    assert engine.heap.held_per_application() == {"burst": 100}
    return engine, now, quiet


def test_a_backlog_larger_than_the_heap_leaves_room_for_another_application(
    store, fake_clock, publisher, make_engine
):
    engine, now, quiet = burst_filling_the_heap(
        store, fake_clock, make_engine, [1_050 + 50 * i for i in range(5)]
    )
    fake_clock.set(now + 1_300)  # the heap's head is overdue: a backlog
    engine.preloader.run_once()
    assert engine.heap.held_per_application() == {"burst": 95, "quiet": 5}
    engine.ringer.run_once()  # one batch of 100: all five of quiet (due by now) among them
    first = sent(publisher)
    assert [m["id"] for m in first if m["application"] == "quiet"] == quiet
    drive_with_preloads(engine, fake_clock, now + 3_000)
    bodies = sent(publisher)
    assert sorted(m["id"] for m in bodies if m["application"] == "quiet") == quiet
    assert sum(m["application"] == "burst" for m in bodies) == 500
    assert all(m["published_at"] >= m["target_ring_at"] for m in bodies)


def test_a_full_heap_claims_the_others_alarms_as_soon_as_its_backlog_begins(
    store, fake_clock, publisher, make_engine
):
    """quiet's alarms, due after the latest of burst's that fill the heap, are claimed when
    the head is `tuning.backlog_ms` overdue, not at the next interval: they would be late
    by then."""
    engine, now, quiet = burst_filling_the_heap(
        store, fake_clock, make_engine, [1_150 + 10 * i for i in range(5)]
    )
    fake_clock.set(now + 1_000)  # the head is due, not yet a backlog
    assert engine.preloader.run_once() == pytest.approx((engine.tuning.backlog_ms + 1) / 1000)
    fake_clock.set(now + 1_000 + engine.tuning.backlog_ms + 1)
    engine.preloader.run_once()
    assert engine.heap.held_per_application() == {"burst": 95, "quiet": 5}
    drive_with_preloads(engine, fake_clock, now + 3_000)
    bodies = sent(publisher)
    lateness = [m["published_at"] - m["target_ring_at"] for m in bodies
                if m["application"] == "quiet"]  # fmt: skip
    assert len(lateness) == len(quiet) and all(0 <= late < 50 for late in lateness)


def drive_with_preloads(engine: AlarmEngine, clock: SettableClock, until_ms: int) -> None:
    while clock.now_ms() < until_ms:
        preload(engine)
        drive(engine, clock, clock.now_ms())
        clock.advance(10)


def test_with_every_lane_busy_an_application_with_few_due_rings_in_the_express_lane(
    mariadb_store, fake_clock
):
    """On MariaDB: SQLite has one writer, so its ring transactions take turns whatever the lanes."""
    store = mariadb_store
    publisher = HoldingPublisher(held="burst")
    engine = engine_on(store, fake_clock, publisher, ring_batch=100, ring_lanes=2, ring_lead_ms=0)
    now = fake_clock.now_ms()
    create(store, now, "burst", [now + 1_000] * 1_000)
    quiet = create(store, now, "quiet", [now + 1_100, now + 1_200])
    preload(engine)
    fake_clock.set(now + 1_000)
    try:
        assert engine.ringer.run_once() == 0.0  # both lanes take a batch of burst, and hang
        assert engine.ringer.run_once() == 0.0
        assert engine.ringer.run_once() == pytest.approx(0.1)  # burst has many due: not express
        fake_clock.set(now + 1_100)
        assert engine.ringer.run_once() == 0.0  # quiet's first to an express lane
        eventually(lambda: len(publisher.published) == 1 and engine.ringer.in_flight == 2)
        assert engine.ringer.run_once() == pytest.approx(0.1)  # its second is due in 0.1 s
    finally:
        publisher.release.set()
    drive(engine, fake_clock, now + 2_000)
    bodies = sent(publisher)
    assert [m["id"] for m in bodies if m["application"] == "quiet"] == quiet
    assert bodies[0]["published_at"] == now + 1_100
    assert sum(m["application"] == "burst" for m in bodies) == 1_000
    assert all(m["published_at"] >= m["target_ring_at"] for m in bodies)


def test_an_express_batch_waiting_for_its_confirms_does_not_hold_the_next(
    mariadb_store, fake_clock
):
    store = mariadb_store
    publisher = HoldingPublisher(held="quiet")  # a slow confirm for each of quiet's batches
    engine = engine_on(store, fake_clock, publisher, ring_batch=100, ring_lanes=2, ring_lead_ms=0)
    now = fake_clock.now_ms()
    create(store, now, "burst", [now + 1_000] * 1_000)
    quiet = create(
        store, now, "quiet", [now + 1_000 + 100 * i for i in range(engine.tuning.express_lanes)]
    )
    preload(engine)
    try:
        for i in range(
            engine.tuning.express_lanes
        ):  # each falls due while the ones before still wait
            fake_clock.set(now + 1_000 + 100 * i)
            engine.ringer.run_once()
            eventually(lambda: publisher.holding == i + 1)  # noqa: B023 - waited on at once
    finally:
        publisher.release.set()
    drive(engine, fake_clock, now + 2_000)
    bodies = sent(publisher)
    published = {m["id"]: m["published_at"] for m in bodies if m["application"] == "quiet"}
    assert published == {alarm: now + 1_000 + 100 * i for i, alarm in enumerate(quiet)}
    assert sum(m["application"] == "burst" for m in bodies) == 1_000


def test_beside_a_backlog_few_due_go_to_the_express_lane_even_with_a_lane_free(
    mariadb_store, fake_clock
):
    store = mariadb_store
    publisher = HoldingPublisher(held="burst")
    engine = engine_on(store, fake_clock, publisher, ring_batch=100, ring_lanes=2, ring_lead_ms=0)
    now = fake_clock.now_ms()
    create(store, now, "burst", [now + 1_000] * 300)
    quiet = create(store, now, "quiet", [now + 1_000] * 2)
    preload(engine)
    fake_clock.set(now + 1_000)
    try:
        assert engine.ringer.run_once() == 0.0  # quiet's two express, a batch of burst in a lane
        eventually(lambda: len(publisher.published) == 2 and engine.ringer.in_flight == 1)
        assert [m["id"] for m in sent(publisher)] == quiet
    finally:
        publisher.release.set()
    drive(engine, fake_clock, now + 2_000)
    assert sum(m["application"] == "burst" for m in sent(publisher)) == 300
    assert all(len({m.application for m in batch}) == 1 for batch in publisher.batches)


def test_beside_a_backlog_few_due_wait_for_an_express_lane_not_in_a_backlogs_batch(
    mariadb_store, fake_clock
):
    """A backlog's batch locks and waits for a thousand rows: the few alarms of another
    application taken with it were as late as that (finding 64)."""
    store = mariadb_store
    publisher = HoldingPublisher(held="quiet")  # every express lane held by quiet's batches
    engine = engine_on(store, fake_clock, publisher, ring_batch=100, ring_lanes=2, ring_lead_ms=0)
    now = fake_clock.now_ms()
    create(store, now, "burst", [now + 1_000] * 1_000)
    quiet = create(
        store, now, "quiet", [now + 1_000 + 100 * i for i in range(engine.tuning.express_lanes + 1)]
    )
    preload(engine)
    try:
        for i in range(engine.tuning.express_lanes):
            fake_clock.set(now + 1_000 + 100 * i)
            engine.ringer.run_once()
            eventually(lambda: publisher.holding == i + 1)  # noqa: B023 - waited on at once
        fake_clock.set(
            now + 1_000 + 100 * engine.tuning.express_lanes
        )  # quiet's last due, no express lane

        def burst_rang() -> bool:  # the lanes ring burst meanwhile
            engine.ringer.run_once()
            return len(publisher.published_for("burst")) >= 300

        eventually(burst_rang, interval_s=0.001, message="the lanes never rang burst")
        assert publisher.published_for("quiet") == []
        assert engine.heap.held_per_application()["quiet"] == 1
    finally:
        publisher.release.set()
    drive(engine, fake_clock, now + 2_000)
    bodies = sent(publisher)
    assert sorted(m["id"] for m in bodies if m["application"] == "quiet") == quiet
    assert sum(m["application"] == "burst" for m in bodies) == 1_000
    assert all(len({m.application for m in batch}) == 1 for batch in publisher.batches)


def test_a_backlogs_batch_publishes_the_few_of_others_on_the_express_connection(
    store, fake_clock, publisher
):
    """On the backlog's connection the broker would read them after all of its messages."""
    express = InMemoryPublisher()
    engine = engine_on(store, fake_clock, publisher, ring_batch=100, ring_lanes=1,
                       ring_lead_ms=0, express_publisher=express)  # fmt: skip
    now = fake_clock.now_ms()
    create(store, now, "burst", [now + 1_000] * 300)
    quiet = create(store, now, "quiet", [now + 1_000, now + 1_050])
    preload(engine)
    fake_clock.set(now + 1_100)
    engine.ringer.run_once()  # one lane: one batch of 100, quiet's two in it
    assert [json.loads(m.body)["id"] for m in express.published] == quiet
    assert {m.application for m in publisher.published} == {"burst"}
    assert len(publisher.published) == 98
    drive(engine, fake_clock, now + 2_000)
    assert len(publisher.published_for("burst")) == 300
    assert express.published_for("burst") == []
    assert all(m["published_at"] >= m["target_ring_at"] for m in sent(publisher) + sent(express))


def test_without_a_backlog_one_batch_stays_on_one_connection(store, fake_clock, publisher):
    express = InMemoryPublisher()
    engine = engine_on(store, fake_clock, publisher, ring_batch=100, ring_lanes=1,
                       ring_lead_ms=0, express_publisher=express)  # fmt: skip
    now = fake_clock.now_ms()
    create(store, now, "a", [now + 1_000] * 40)
    create(store, now, "b", [now + 1_000] * 3)
    preload(engine)
    fake_clock.set(now + 1_000)
    engine.ringer.run_once()
    assert len(publisher.published) == 43 and express.published == []


@pytest.mark.parametrize("beside", [False, True])
def test_beside_other_applications_a_backlog_rings_in_fewer_lanes_at_once(
    mariadb_store, fake_clock, beside
):
    store = mariadb_store
    publisher = HoldingPublisher(held="burst")
    engine = engine_on(store, fake_clock, publisher, ring_batch=100, ring_lanes=4, ring_lead_ms=0)
    now = fake_clock.now_ms()
    create(store, now, "burst", [now + 1_000] * 1_000)
    if beside:
        create(store, now, "quiet", [now + 5_000])  # held in the heap, not due yet
    preload(engine)
    fake_clock.set(now + 1_000)
    try:
        for _ in range(6):
            engine.ringer.run_once()
        busy = engine.tuning.beside_backlog_lanes if beside else 4
        assert engine.ringer.in_flight == busy
    finally:
        publisher.release.set()
    drive(engine, fake_clock, now + 6_000)
    assert len(publisher.published_for("burst")) == 1_000
    assert len(publisher.published_for("quiet")) == int(beside)


def test_without_a_backlog_alarms_ring_earliest_first(store, fake_clock, publisher, make_engine):
    engine = make_engine(ring_batch=1_000, ring_lanes=1, ring_lead_ms=0)
    now = fake_clock.now_ms()
    create(store, now, "a", [now + 100 + 2 * i for i in range(20)])
    create(store, now, "b", [now + 101 + 2 * i for i in range(20)])
    preload(engine)
    drive(engine, fake_clock, now + 200)
    targets = [m["target_ring_at"] for m in sent(publisher)]
    assert targets == sorted(targets) and len(targets) == 40
    assert all(m["published_at"] == m["target_ring_at"] for m in sent(publisher))


def test_a_delivery_rate_holds_alarms_back_and_never_drops_them(
    store, fake_clock, publisher, make_engine
):
    now = fake_clock.now_ms()
    registry = SqlApplicationRegistry(store)
    registry.put(ApplicationPolicy("slow", ring_rate_per_s=10, ring_burst=5), now)
    engine = make_engine(ring_lanes=1, ring_lead_ms=0)
    slow = create(store, now, "slow", [now + 1_000] * 25)
    other = create(store, now, "other", [now + 1_000] * 25)
    preload(engine)
    fake_clock.set(now + 1_000)
    settle(engine, fake_clock)
    first = sent(publisher)
    assert sorted(m["id"] for m in first if m["application"] == "other") == other  # on time
    assert sum(m["application"] == "slow" for m in first) == 5  # the burst
    drive(engine, fake_clock, now + 2_000)  # 10 a second after the burst
    slow_sent = [m for m in sent(publisher) if m["application"] == "slow"]
    assert 14 <= len(slow_sent) <= 16
    drive(engine, fake_clock, now + 4_000)
    slow_sent = [m for m in sent(publisher) if m["application"] == "slow"]
    assert sorted(m["id"] for m in slow_sent) == slow  # every one, once
    times = sorted(m["published_at"] for m in slow_sent)
    window = [t for t in times if now + 1_000 <= t < now + 2_000]
    assert len(window) <= 5 + 10  # never more than the burst and the rate
    assert metric_value(engine.metrics, "clock_ring_throttled_total", {"application": "slow"}) >= 20
    assert metric_value(engine.metrics, "clock_ring_throttle_delay_seconds_sum") > 0
    assert {a.status for a in store.list("slow", None, 100, None)} == {"rung"}


def test_a_held_alarm_past_its_cutoff_expires_unpublished(
    store, fake_clock, publisher, make_engine
):
    now = fake_clock.now_ms()
    SqlApplicationRegistry(store).put(ApplicationPolicy("slow", ring_rate_per_s=1), now)
    engine = make_engine(ring_lanes=1, ring_lead_ms=0)
    ids = create(store, now, "slow", [now + 1_000] * 3, latest=now + 1_500)
    preload(engine)
    drive(engine, fake_clock, now + 4_000)
    assert [m["id"] for m in sent(publisher)] == ids[:1]
    statuses = {a.id: a.status for a in store.list("slow", None, 10, None)}
    assert statuses == {ids[0]: "rung", ids[1]: "expired", ids[2]: "expired"}


def test_an_application_retry_policy_overrides_the_servers(
    store, fake_clock, publisher, make_engine
):
    now = fake_clock.now_ms()
    SqlApplicationRegistry(store).put(ApplicationPolicy("fragile", retry_max=0), now)
    engine = make_engine(ring_lanes=1, ring_lead_ms=0)
    publisher.unroutable.add("fragile")
    publisher.unroutable.add("sturdy")
    fragile = create(store, now, "fragile", [now + 100])
    sturdy = create(store, now, "sturdy", [now + 100])
    preload(engine)
    drive(engine, fake_clock, now + 200)
    statuses = {a.id: (a.status, a.retry_times) for a in store.list(None, None, 10, None)}
    assert statuses[fragile[0]] == ("dead", 0)  # no retries of its own
    assert statuses[sturdy[0]] == ("pending", 1)  # the server's three
