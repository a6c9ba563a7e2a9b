"""Engine logic, stepped by hand with a fake clock, on SQLite and the real MariaDB.

The engine runs with the default settings (four ring lanes, rows locked 5 ms ahead) unless a
test says otherwise, except that a ring batch gathers nothing beyond the lead (tests of
gathering say so): a lane that locked its rows ahead sleeps on the fake clock until they are
due, so `settle` waits for each lane to finish or fall asleep, and a test moves the clock on."""

from __future__ import annotations

import json
import threading
import time

import pytest

from clock_server.deadline import Deadline
from clock_server.engine.alarm_engine import AlarmEngine, wake_horizon_ms
from clock_server.errors import Conflict
from clock_server.model import AlarmChanges, NewAlarm
from clock_server.runtime.build_engine import build_engine
from clock_server.settings import Settings
from clock_server.store.alarms import AlarmStore
from clock_server.store.db import open_ahead, open_database
from clock_server.testing import InMemoryPublisher, SettableClock

from .support import eventually, metric_value, settle

WINDOW_MS = 10_000
LEASE_MS = 30_000
APP = {"application": "app"}  # a metric's labels for the alarms of application "app"


@pytest.fixture
def make_engine(store: AlarmStore, fake_clock: SettableClock, publisher: InMemoryPublisher):
    def make(owner: str = "e1", **overrides) -> AlarmEngine:
        values = dict(
            preload_window_s=WINDOW_MS / 1000,
            lease_s=LEASE_MS / 1000,
            retry_base_s=1,
            retry_cap_s=8,
            retry_max=3,
            instance_id=owner,
            ring_gather_ms=0,
        )
        values.update(overrides)
        on = values.pop("publisher", publisher)
        return build_engine(Settings(**values), store, on, fake_clock)

    return make


def add(store: AlarmStore, clock: SettableClock, bid: str, in_ms: int, **kw) -> int:
    target = clock.now_ms() + in_ms
    alarm, _ = store.create(
        NewAlarm("app", bid, kw.pop("payload", "p"), target, kw.pop("latest", None)), clock.now_ms()
    )
    return alarm.id


def step(engine: AlarmEngine) -> None:
    engine.preloader.run_once()
    settle(engine, engine.clock)  # type: ignore[arg-type]


def published_ids(publisher: InMemoryPublisher) -> list[int]:
    return [int(m.message_id) for m in publisher.published]


def test_never_early_and_rung_exactly_at_the_target(store, fake_clock, publisher, make_engine):
    engine = make_engine()
    alarm_id = add(store, fake_clock, "b", 5_000)
    target = fake_clock.now_ms() + 5_000
    step(engine)
    assert len(engine.heap) == 1 and publisher.published == []
    fake_clock.set(target - 6)
    assert engine.ringer.run_once() == pytest.approx(0.001)  # lock 5 ms ahead: in 1 ms
    fake_clock.set(target - 5)
    settle(engine, fake_clock)
    assert len(engine.heap) == 0 and fake_clock.sleepers == 1  # locked, waiting for the moment
    fake_clock.set(target - 1)
    settle(engine, fake_clock)
    assert publisher.published == [] and fake_clock.sleepers == 1
    fake_clock.set(target)
    settle(engine, fake_clock)
    assert published_ids(publisher) == [alarm_id]
    rung = store.get("app", "b")
    assert rung.status == "rung" and rung.rung_at == target
    body = json.loads(publisher.published[0].body)
    assert body == {
        "id": alarm_id,
        "application": "app",
        "business_id": "b",
        "payload": "p",
        "target_ring_at": target,
        "attempt": 1,
        "published_at": target,
    }


def test_alarms_beyond_the_window_wait_in_the_database(store, fake_clock, make_engine):
    engine = make_engine()
    add(store, fake_clock, "far", WINDOW_MS + 1)
    add(store, fake_clock, "edge", WINDOW_MS)
    step(engine)
    assert len(engine.heap) == 1
    assert store.get("app", "far").next_try_time == fake_clock.now_ms() + WINDOW_MS + 1


def test_a_past_target_rings_at_once(store, fake_clock, publisher, make_engine):
    engine = make_engine()
    alarm_id = add(store, fake_clock, "late", -60_000)
    step(engine)
    assert published_ids(publisher) == [alarm_id]


def test_patch_of_a_preloaded_alarm_rings_at_the_new_time_only(
    store, fake_clock, publisher, make_engine
):
    engine = make_engine()
    start = fake_clock.now_ms()
    alarm_id = add(store, fake_clock, "moved", 1_000)
    step(engine)
    store.update("app", "moved", AlarmChanges(target_ring_at=start + 4_000), start, actor="app")
    fake_clock.set(start + 1_000)
    step(engine)  # the old entry is stale; the preloader claims the new time
    assert publisher.published == []
    fake_clock.set(start + 3_999)
    step(engine)
    assert publisher.published == []
    fake_clock.set(start + 4_000)
    step(engine)
    assert published_ids(publisher) == [alarm_id]
    assert store.get("app", "moved").rung_at == start + 4_000


def test_patch_earlier_inside_the_window(store, fake_clock, publisher, make_engine):
    engine = make_engine()
    start = fake_clock.now_ms()
    alarm_id = add(store, fake_clock, "sooner", 8_000)
    step(engine)
    store.update("app", "sooner", AlarmChanges(target_ring_at=start + 300), start, actor="app")
    fake_clock.set(start + 300)
    step(engine)
    assert published_ids(publisher) == [alarm_id]


def test_cancel_of_a_preloaded_alarm_is_never_rung(store, fake_clock, publisher, make_engine):
    engine = make_engine()
    add(store, fake_clock, "c", 1_000)
    step(engine)
    store.cancel("app", "c", fake_clock.now_ms(), actor="app")
    fake_clock.advance(1_000)
    step(engine)
    assert publisher.published == []
    assert store.get("app", "c").status == "cancelled"


def test_failed_publishes_back_off_then_die(store, fake_clock, publisher, make_engine):
    engine = make_engine(retry_max=3, retry_base_s=1, retry_cap_s=8)
    add(store, fake_clock, "r", 0)
    publisher.fail_next(10**6)
    gaps = []
    for tries in range(1, 5):
        before = fake_clock.now_ms()
        step(engine)
        alarm = store.get("app", "r")
        if tries <= 3:
            assert (alarm.status, alarm.retry_times) == ("pending", tries)
            gaps.append(alarm.next_try_time - before)
            step(engine)  # not due yet: nothing happens
            assert store.get("app", "r").retry_times == tries
            fake_clock.set(alarm.next_try_time)
    assert store.get("app", "r").status == "dead"
    assert [500 <= gaps[0] <= 1_000, 1_000 <= gaps[1] <= 2_000, 2_000 <= gaps[2] <= 4_000] == [
        True
    ] * 3
    assert metric_value(engine.metrics, "clock_alarms_dead_total", APP) == 1


def test_a_retry_succeeds_with_the_same_message_id(store, fake_clock, publisher, make_engine):
    engine = make_engine()
    alarm_id = add(store, fake_clock, "r", 0)
    publisher.fail_next(1)
    step(engine)
    fake_clock.set(store.get("app", "r").next_try_time)
    step(engine)
    assert published_ids(publisher) == [alarm_id]
    assert json.loads(publisher.published[0].body)["attempt"] == 2
    assert store.get("app", "r").retry_times == 1


def test_while_the_broker_is_out_of_reach_alarms_wait_with_their_attempts_untouched(
    store, fake_clock, publisher, make_engine
):
    """A budget of one retry, and an outage longer than it and than the claims' lease: the
    alarms stay pending, those past their cutoff expire, and the rest ring on their first
    attempt once the broker is back."""
    engine = make_engine(retry_max=1, retry_base_s=0.1, retry_cap_s=0.1)
    start = fake_clock.now_ms()
    waiting = add(store, fake_clock, "wait", 0)
    add(store, fake_clock, "cut", 500, latest=start + 2_500)
    publisher.healthy = False
    for _ in range(LEASE_MS // 1_000 + 15):
        step(engine)
        alarm = store.get("app", "wait")
        assert (alarm.status, alarm.retry_times) == ("pending", 0)
        fake_clock.advance(1_000)
    cut = store.get("app", "cut")
    assert (cut.status, cut.retry_times) == ("expired", 0)
    assert publisher.published == []
    assert metric_value(engine.metrics, "clock_alarms_held_total", APP) >= LEASE_MS // 1_000
    publisher.healthy = True
    step(engine)
    assert published_ids(publisher) == [waiting]
    assert json.loads(publisher.published[0].body)["attempt"] == 1
    alarm = store.get("app", "wait")
    assert (alarm.status, alarm.retry_times) == ("rung", 0)


class _UnsettledPublisher(InMemoryPublisher):
    """Takes every batch and never settles it while `settling` is off: a connection lost
    before the confirms, or a broker that never answered."""

    def __init__(self) -> None:
        super().__init__()
        self.settling = False

    def start_batch(self, messages):
        if self.settling:
            return super().start_batch(messages)
        return _Unsettled(len(messages))


class _Unsettled:
    def __init__(self, size: int) -> None:
        self.size = size
        self.refused: list[int] = []

    def wait(self, timeout_s: float) -> list[bool]:
        return [False] * self.size


def test_publishes_the_broker_never_settled_spend_no_attempt(store, fake_clock, make_engine):
    publisher = _UnsettledPublisher()
    engine = make_engine(publisher=publisher, retry_max=0)
    add(store, fake_clock, "u", 0)
    for _ in range(3):
        step(engine)
        alarm = store.get("app", "u")
        assert (alarm.status, alarm.retry_times) == ("pending", 0)
        fake_clock.advance(1_000)
    publisher.settling = True
    step(engine)
    alarm = store.get("app", "u")
    assert (alarm.status, alarm.retry_times) == ("rung", 0)
    assert json.loads(publisher.published[0].body)["attempt"] == 1


def test_a_refusal_spends_an_attempt_and_the_last_one_dies(
    store, fake_clock, publisher, make_engine
):
    engine = make_engine(retry_max=0)
    add(store, fake_clock, "nack", 0)
    publisher.unroutable.add("app")
    step(engine)
    alarm = store.get("app", "nack")
    assert (alarm.status, alarm.retry_times) == ("dead", 0)


def test_a_retry_due_after_its_cutoff_expires_only_once_the_cutoff_has_passed(
    store, fake_clock, publisher, make_engine
):
    engine = make_engine(retry_base_s=0.2, ring_lead_ms=400, ring_lead_max_ms=400)
    start = fake_clock.now_ms()
    cutoff = start + 50
    add(store, fake_clock, "late", 0, latest=cutoff)
    publisher.fail_next(1)
    # The first try fails: a retry 100-200 ms on, after the cutoff, which goes back to the
    # heap and is locked ahead at once (the lead is 400 ms), before the cutoff.
    step(engine)
    assert engine.ringer.in_flight == 1
    retry_at = fake_clock.next_wake_ms()
    assert retry_at is not None and cutoff < start + 100 <= retry_at <= start + 200
    fake_clock.set(retry_at)
    assert engine.ringer.close(Deadline(5)) == 0
    alarm = store.get("app", "late")
    assert alarm.status == "expired" and alarm.updated_at >= retry_at
    assert publisher.published == []


def test_past_the_cutoff_an_alarm_expires_unpublished(store, fake_clock, publisher, make_engine):
    engine = make_engine()
    start = fake_clock.now_ms()
    add(store, fake_clock, "cut", 1_000, latest=start + 1_100)
    add(store, fake_clock, "edge", 1_000, latest=start + 1_200)
    step(engine)
    fake_clock.set(start + 1_200)
    settle(engine, fake_clock)
    assert [json.loads(m.body)["business_id"] for m in publisher.published] == ["edge"]
    assert store.get("app", "cut").status == "expired"


def test_the_heap_stays_bounded_and_holds_the_earliest(store, fake_clock, publisher, make_engine):
    engine = make_engine(heap_size=5, claim_batch=3)
    start = fake_clock.now_ms()
    for i in range(20):
        add(store, fake_clock, f"b{i:02}", 1_000 + i * 100)
    while engine.preloader.run_once() == 0:
        pass
    assert len(engine.heap) == 5
    sooner = add(store, fake_clock, "sooner", 500)
    while engine.preloader.run_once() == 0:
        pass
    assert len(engine.heap) == 5 and engine.heap.next_due_ms() == start + 500
    displaced = store.get("app", "b04")
    assert displaced.next_try_time == displaced.target_ring_at  # its claim was given back
    fake_clock.set(start + 10_000)
    for _ in range(10):
        step(engine)
        assert len(engine.heap) <= 5
    assert sorted(published_ids(publisher)) == sorted(
        [sooner] + [a.id for a in store.list("app", "rung", 100, None) if a.id != sooner]
    )
    assert len(publisher.published) == 21


def test_an_alarm_an_engine_of_the_release_before_claimed_waits_for_its_lease(
    store, fake_clock, publisher, make_engine
):
    """A release before slots claimed alarms under a lease (`claimed_by`, next_try_time the
    lease's end); through a rolling upgrade this one leaves them to it until that end."""
    engine = make_engine("new")
    start = fake_clock.now_ms()
    alarm_id = add(store, fake_clock, "b", 100)
    with store.db.begin() as conn:
        conn.exec_driver_sql(
            f"UPDATE clock SET claimed_by = 99, next_try_time = {start + LEASE_MS},"
            f" version = version + 1 WHERE id = {alarm_id}"
        )
    engine.preloader.restart()  # read again: the claim moved it to the lease's end
    fake_clock.set(start + LEASE_MS - 1)
    step(engine)  # the lease's end is within the window: held, but not rung before it
    assert publisher.published == []
    fake_clock.set(start + LEASE_MS)
    step(engine)  # the lease has ended: rung
    assert published_ids(publisher) == [alarm_id]


def test_two_engines_share_one_database_without_double_rings(
    store, fake_clock, publisher, make_engine
):
    # One lane rings in the stepping thread itself, which cannot sleep on the fake clock.
    engines = [
        make_engine(name, claim_batch=100, ring_lanes=1, ring_lead_ms=0) for name in ("a", "b")
    ]
    _share_without_double_rings(engines, store, fake_clock, publisher)


@pytest.mark.mariadb
def test_two_engines_with_default_lanes_share_mariadb_without_double_rings(
    mariadb_store, fake_clock, publisher
):
    """Lanes lock rows ahead and sleep on the fake clock holding them; on SQLite, where a lock
    takes the whole file, the other engine's lanes would wait for a clock nobody moves."""
    engines = [
        build_engine(
            Settings(instance_id=name, claim_batch=100), mariadb_store, publisher, fake_clock
        )
        for name in ("a", "b")
    ]
    _share_without_double_rings(engines, mariadb_store, fake_clock, publisher)


def _share_without_double_rings(engines, store, fake_clock, publisher) -> None:
    start = fake_clock.now_ms()
    items = [NewAlarm("app", f"b{i}", "p", start + (i % 5_000), None) for i in range(2_000)]
    store.create_many(items, start)
    for _ in range(2):  # each joins, then sees the other: half of the slots each
        for engine in engines:
            engine.liveness.run_once()
    for now in range(start, start + 5_001, 250):
        fake_clock.set(now)
        for engine in engines:
            engine.preloader.run_once()
        for engine in engines:
            settle(engine, fake_clock)
    for engine in engines:
        assert engine.ringer.close(Deadline(5)) == 0
    ids = published_ids(publisher)
    assert len(ids) == len(set(ids)) == 2_000
    assert all(metric_value(e.metrics, "clock_alarms_rung_total", APP) > 0 for e in engines)
    assert store.list("app", "pending", 10, None) == []


def test_cancel_and_ring_are_linearizable(store, fake_clock, make_engine):
    slow = _SlowPublisher()
    engine = build_engine(
        Settings(instance_id="e", ring_batch=25, ring_lanes=1, ring_lead_ms=0),
        store,
        slow,
        fake_clock,
    )
    items = [NewAlarm("app", f"b{i}", "p", fake_clock.now_ms(), None) for i in range(200)]
    store.create_many(items, fake_clock.now_ms())
    engine.preloader.run_once()
    cancelled: dict[str, bool] = {}

    def cancel_all() -> None:
        slow.first_publish.wait(10)  # the first batch holds its row locks now
        for i in reversed(range(200)):  # meet the ring thread halfway
            try:
                store.cancel("app", f"b{i}", fake_clock.now_ms(), actor="app")
                cancelled[f"b{i}"] = True
            except Conflict as error:
                assert error.status == "rung"
                cancelled[f"b{i}"] = False

    canceller = threading.Thread(target=cancel_all)
    canceller.start()
    while engine.ringer.run_once() == 0:
        # Between two batches the canceller takes at least one more alarm (on SQLite it waits
        # for the whole database, which the ring thread would take again at once).
        done = len(cancelled)
        eventually(lambda done=done: len(cancelled) > done or not canceller.is_alive(), 10)
    canceller.join(30)
    rung = {json.loads(m.body)["business_id"] for m in slow.published}
    assert rung and any(cancelled.values())
    for bid, ok in cancelled.items():
        assert (bid in rung) != ok, bid
        assert store.get("app", bid).status == ("cancelled" if ok else "rung")


def test_stop_gives_every_claim_back(store, fake_clock, make_engine):
    engine = make_engine()
    now = fake_clock.now_ms()
    store.create_many([NewAlarm("app", f"b{i}", "p", now + 5_000, None) for i in range(50)], now)
    engine.start()
    fake_clock.wait_for_waiters(len(engine.loop_beats()))  # every loop waits for its next pass
    assert len(engine.heap) == 50
    engine.stop(Deadline(5))
    pending = store.list("app", "pending", 100, None)
    assert len(pending) == 50
    assert all(a.next_try_time == a.target_ring_at for a in pending)


class _SlowPublisher(InMemoryPublisher):
    """Holds each batch for a moment so cancels pile up on the row locks."""

    def __init__(self) -> None:
        super().__init__()
        self.first_publish = threading.Event()

    def start_batch(self, messages):
        self.first_publish.set()
        time.sleep(0.01)
        return super().start_batch(messages)


class _HoldingPublisher(InMemoryPublisher):
    """Holds every batch with a message of application "held" until `release` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.holding = 0

    def publish_batch(self, messages, timeout_s):
        if any(message.application == "held" for message in messages):
            with self._lock:
                self.holding += 1
            assert self.release.wait(10), "the held batches were never released"
        return super().publish_batch(messages, timeout_s)


@pytest.mark.mariadb
@pytest.mark.parametrize(("busy", "gathered"), [(2, 2), (3, 1)])
def test_a_batch_gathers_only_while_a_lane_stays_free_beside_it(
    mariadb_store, fake_clock, busy, gathered
):
    store = mariadb_store  # on SQLite a lane's locks hold the whole database: one at a time
    publisher = _HoldingPublisher()
    settings = Settings(instance_id="g", ring_gather_ms=20)
    engine = build_engine(settings, store, publisher, fake_clock)
    now = fake_clock.now_ms()
    held = [now + 100 * i for i in range(busy)]
    store.create_many([NewAlarm("held", f"h{i}", "p", t, None) for i, t in enumerate(held)], now)
    targets = [now + 1_000, now + 1_010]  # the second 5 ms past the first's lead
    store.create_many([NewAlarm("app", f"g{i}", "p", t, None) for i, t in enumerate(targets)], now)
    engine.preloader.run_once()
    try:
        for count, moment in enumerate(held, 1):  # a lane each, held by the broker
            fake_clock.set(moment)
            while engine.ringer.run_once() == 0.0:
                pass
            eventually(lambda count=count: publisher.holding == count, 5, 0.001)
        fake_clock.set(targets[0] - 5)
        while engine.ringer.run_once() == 0.0:
            pass
        assert len(engine.heap) == len(targets) - gathered
    finally:
        publisher.release.set()
        fake_clock.set(targets[-1])
        assert engine.ringer.close(Deadline(5)) == 0


@pytest.mark.mariadb
@pytest.mark.parametrize(("gather_ms", "left"), [(50, 1), (0, 3)])
def test_an_express_batch_gathers_an_applications_next_few_alarms(
    mariadb_store, fake_clock, gather_ms, left
):
    store = mariadb_store
    publisher = _HoldingPublisher()
    settings = Settings(instance_id="x", ring_gather_ms=gather_ms)
    engine = build_engine(settings, store, publisher, fake_clock)
    now = fake_clock.now_ms()
    held = [now + 100 * i for i in range(settings.ring_lanes)]
    store.create_many([NewAlarm("held", f"h{i}", "p", t, None) for i, t in enumerate(held)], now)
    # The third past a lane's 50 ms, the last past an express batch's four spans of 50
    targets = [now + 1_000 + offset for offset in (0, 30, 120, 210)]
    store.create_many([NewAlarm("app", f"x{i}", "p", t, None) for i, t in enumerate(targets)], now)
    engine.preloader.run_once()
    try:
        for count, moment in enumerate(held, 1):  # every lane held by the broker
            fake_clock.set(moment)
            while engine.ringer.run_once() == 0.0:
                pass
            eventually(lambda count=count: publisher.holding == count, 5, 0.001)
        # One lead before the first (the held lanes' waits grew it): an express lane takes it.
        assert engine.ringer.lead.ms <= 50
        fake_clock.set(targets[0] - engine.ringer.lead.ms)
        engine.ringer.run_once()
        assert engine.ringer.in_flight == settings.ring_lanes + 1
        assert len(engine.heap) == left
        for rung, target in enumerate(targets[: len(targets) - left], 1):
            fake_clock.set(target)  # each at its own moment, not at the batch's first
            eventually(lambda rung=rung: len(_published_at(publisher, "app")) == rung, 5, 0.001)
            assert _published_at(publisher, "app")[-1] == target
    finally:
        publisher.release.set()
        fake_clock.set(targets[-1])
        assert engine.ringer.close(Deadline(5)) == 0


def test_a_batch_gathers_nothing_while_the_lead_is_longer_than_the_gathering(
    store, fake_clock, publisher, make_engine
):
    engine = make_engine(ring_gather_ms=20)
    lead_ms = engine.ringer.lead.observe(10)  # the database was slow to lock: 22 ms
    now = fake_clock.now_ms()
    targets = [now + 1_000, now + 1_010]  # the second 10 ms past the first's lead
    store.create_many([NewAlarm("app", f"g{i}", "p", t, None) for i, t in enumerate(targets)], now)
    engine.preloader.run_once()
    fake_clock.set(targets[0] - lead_ms)
    settle(engine, fake_clock)
    assert engine.ringer.in_flight == 1 and len(engine.heap) == 1
    fake_clock.set(targets[0])
    assert engine.ringer.close(Deadline(5)) == 0


def _step_to_each_target(
    clock: SettableClock, publisher: InMemoryPublisher, targets: list[int]
) -> None:
    """With one lane asleep until the first target: nothing is published 1 ms before each
    target, and one more alarm at each."""
    for rung, target in enumerate(targets):
        clock.wait_for_sleepers(1)
        assert len(publisher.published) == rung
        clock.set(target - 1)
        assert clock.sleepers == 1 and len(publisher.published) == rung
        clock.set(target)
        eventually(lambda rung=rung: len(publisher.published) == rung + 1, 5, 0.001)


def test_rows_locked_ahead_are_published_exactly_when_due(store, fake_clock, publisher):
    settings = Settings(instance_id="lead", ring_lead_ms=400)
    engine = build_engine(settings, store, publisher, fake_clock)
    now = fake_clock.now_ms()
    targets = [now + 150 + 7 * i for i in range(10)]
    store.create_many([NewAlarm("app", f"b{i}", "p", t, None) for i, t in enumerate(targets)], now)
    engine.preloader.run_once()
    settle(engine, fake_clock)  # one lane took all ten, 150+ ms ahead, and sleeps till the first
    assert len(engine.heap) == 0 and engine.ringer.in_flight == 1
    _step_to_each_target(fake_clock, publisher, targets)
    assert engine.ringer.close(Deadline(5)) == 0
    sent = [json.loads(message.body) for message in publisher.published]
    assert [body["published_at"] for body in sent] == targets
    assert [body["target_ring_at"] for body in sent] == targets
    assert {a.status for a in store.list("app", None, 100, None)} == {"rung"}


def test_a_batch_gathers_what_falls_due_just_after_and_rings_each_at_its_moment(
    store, fake_clock, publisher, make_engine
):
    engine = make_engine(ring_gather_ms=20)
    now = fake_clock.now_ms()
    targets = [now + 1_000 + 6 * i for i in range(4)] + [now + 1_040]
    store.create_many([NewAlarm("app", f"g{i}", "p", t, None) for i, t in enumerate(targets)], now)
    engine.preloader.run_once()
    fake_clock.set(targets[0] - 5)  # one lead before the first
    settle(engine, fake_clock)
    # Up to 20 ms past the lead in one transaction where it locks rows; on SQLite, where it
    # holds the whole database, only what the lead reaches.
    gathered = 4 if store.caps.row_locks else 1
    assert engine.ringer.in_flight == 1 and len(engine.heap) == len(targets) - gathered
    _step_to_each_target(fake_clock, publisher, targets[:gathered])
    assert engine.ringer.close(Deadline(5)) == 0
    bodies = [json.loads(m.body) for m in publisher.published]
    assert [b["published_at"] for b in bodies] == [b["target_ring_at"] for b in bodies]
    assert [store.get("app", f"g{i}").rung_at for i in range(gathered)] == targets[:gathered]


def _published_at(publisher: InMemoryPublisher, application: str) -> list[int]:
    return [
        json.loads(m.body)["published_at"]
        for m in list(publisher.published)
        if m.application == application
    ]


@pytest.mark.mariadb
def test_start_opens_a_connection_per_lane_ahead(mariadb_url, fake_clock, publisher):
    store = AlarmStore(open_database(mariadb_url, pool_size=20))
    engine = build_engine(Settings(instance_id="e", ring_lanes=4), store, publisher, fake_clock)
    try:
        pool = store.db.pool
        assert pool.checkedin() + pool.checkedout() == 0
        engine.start()
        # open, whether idle or already taken by the threads: four lanes, preloader, maintenance
        assert pool.checkedin() + pool.checkedout() >= 6
    finally:
        engine.stop(Deadline(5))
        store.close()


def test_start_goes_on_when_the_database_cannot_be_reached(fake_clock, publisher, caplog):
    unreachable = open_database("mysql+pymysql://root@127.0.0.1:1/none", pool_size=2)
    unreachable_store = AlarmStore(unreachable)
    engine = build_engine(Settings(instance_id="e"), unreachable_store, publisher, fake_clock)
    engine.start()
    try:
        assert "could not connect ahead" in caplog.text
    finally:
        engine.stop(Deadline(2))


def test_open_ahead_does_nothing_on_sqlite(sqlite_url):
    db = open_database(sqlite_url)
    open_ahead(db, 4)
    assert db.pool.checkedin() == 0
    db.dispose()


def test_the_wake_horizon_is_one_preload_interval_and_a_margin_within_the_window():
    assert wake_horizon_ms(Settings(preload_interval_s=1.0, preload_window_s=10.0)) == 1_500
    assert wake_horizon_ms(Settings(preload_interval_s=0.2, preload_window_s=10.0)) == 700
    assert wake_horizon_ms(Settings(preload_interval_s=1.0, preload_window_s=1.2)) == 1_200
