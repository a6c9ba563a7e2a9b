"""The probes on the fake clock: /livez asks only whether the engine's loops step (never the
database or the broker), /readyz whether the database answers, /healthz how each part is; a
broker outage makes /healthz "degraded" with 200, and only a database outage is a 503."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from clock_server.api import create_app
from clock_server.api.health_routes import loop_states
from clock_server.deadline import Deadline
from clock_server.engine.alarm_engine import AlarmEngine
from clock_server.engine.loop import StepLoop, Waker
from clock_server.metrics import Metrics
from clock_server.model import AMQP, PULL, WEBHOOK, ApplicationPolicy
from clock_server.runtime.build_api import build_services
from clock_server.runtime.build_engine import build_engine
from clock_server.runtime.ipc import STATUS_LOOP, EngineStatusFile
from clock_server.settings import Settings
from clock_server.slot_space import ALL_SLOTS, SlotRange
from clock_server.store.alarms import AlarmStore
from clock_server.store.applications import SqlApplicationRegistry
from clock_server.store.db import open_database
from clock_server.store.engine_registry import SqlEngineRegistry
from clock_server.testing import InMemoryPublisher, SettableClock
from tests.support import eventually

STALL_MS = Settings().loop_stall_ms  # 60 s
ENGINE_LOOPS = {
    "clock-preload",
    "clock-ring",
    "clock-liveness",
    "clock-dead-letters",
    "clock-webhook-answers",
}


class LoopSet:
    """The loops a test runs by themselves, as /livez sees an engine's."""

    def __init__(self, *loops: StepLoop) -> None:
        self.loops = loops

    def loop_beats(self) -> dict[str, int | None]:
        return {loop.name: loop.beat_ms for loop in self.loops}


def probe_client(
    store: AlarmStore,
    clock: SettableClock,
    publisher: InMemoryPublisher | EngineStatusFile | None = None,
    loops: LoopSet | AlarmEngine | EngineStatusFile | None = None,
) -> FlaskClient:
    services = build_services(Settings(), store, clock, Metrics(), publisher=publisher, loops=loops)
    return create_app(services).test_client()


def settled(source: LoopSet | AlarmEngine, clock: SettableClock, but: str = "") -> bool:
    """Every loop (but the one named) has done its step at the clock's present time, if it
    had one to do, and waits past it."""
    now_ms = clock.now_ms()
    beats = source.loop_beats()
    return all(beat is not None and beat > now_ms for name, beat in beats.items() if name != but)


@pytest.fixture
def unreachable_store() -> Iterator[AlarmStore]:
    """A store whose database refuses every connection."""
    store = AlarmStore(open_database("mysql+pymysql://root@127.0.0.1:1/none", pool_size=1))
    yield store
    store.close()


# --- /livez ----------------------------------------------------------------------------------


def test_a_loop_is_stalled_only_past_the_bound_or_never_seen() -> None:
    now = 1_000_000
    beats: dict[str, int | None] = {
        "at-the-bound": now - STALL_MS,
        "past-it": now - STALL_MS - 1,
        "waiting-ahead": now + 3_600_000,  # a wait that ends in an hour
        "never": None,
    }
    assert loop_states(beats, now, STALL_MS) == {
        "at-the-bound": "ok",
        "past-it": "stalled",
        "waiting-ahead": "ok",
        "never": "stalled",
    }


def test_a_process_with_no_engine_is_alive_when_it_answers(unreachable_store, fake_clock) -> None:
    response = probe_client(unreachable_store, fake_clock).get("/livez")
    assert response.status_code == 200
    assert response.get_json() == {"status": "ok", "loops": {}, "stalled": []}


def test_livez_asks_neither_the_database_nor_the_broker(unreachable_store, fake_clock) -> None:
    publisher = InMemoryPublisher()
    publisher.healthy = False
    loops = LoopSet(StepLoop("clock-idle", lambda: None, Waker(fake_clock)))
    loops.loops[0].start()
    try:
        client = probe_client(unreachable_store, fake_clock, publisher, loops)
        assert client.get("/livez").status_code == 200
        assert client.get("/readyz").status_code == 503
        assert client.get("/healthz").status_code == 503
    finally:
        loops.loops[0].stop()
        assert loops.loops[0].join(5)


def test_a_loop_that_sleeps_long_while_nothing_is_due_is_alive(
    unreachable_store, fake_clock
) -> None:
    """A wait has a known end: until then the loop counts as well, however long it is."""
    hour_s = 3600.0
    sleeper = StepLoop("clock-sleeper", lambda: hour_s, Waker(fake_clock))
    loops = LoopSet(sleeper)
    client = probe_client(unreachable_store, fake_clock, loops=loops)
    sleeper.start()
    try:
        eventually(lambda: settled(loops, fake_clock))
        for _ in range(3):  # three hours, STALL_MS short of each wait's end at a time
            fake_clock.advance(int(hour_s * 1000) + STALL_MS)
            assert client.get("/livez").status_code == 200
            eventually(lambda: settled(loops, fake_clock))
        assert client.get("/livez").status_code == 200
    finally:
        sleeper.stop()
        assert sleeper.join(5)


def test_a_loop_stuck_in_its_step_is_named_once_past_the_bound(
    unreachable_store, fake_clock
) -> None:
    entered, release = threading.Event(), threading.Event()

    def stuck() -> None:
        entered.set()
        release.wait(10)

    stuck_loop = StepLoop("clock-stuck", stuck, Waker(fake_clock))
    idle_loop = StepLoop("clock-idle", lambda: None, Waker(fake_clock))
    loops = LoopSet(stuck_loop, idle_loop)
    client = probe_client(unreachable_store, fake_clock, loops=loops)
    for loop in loops.loops:
        loop.start()
    try:
        assert entered.wait(5)
        fake_clock.advance(STALL_MS)
        assert client.get("/livez").status_code == 200  # at the bound
        fake_clock.advance(1)
        response = client.get("/livez")
        assert response.status_code == 503
        assert response.get_json() == {
            "status": "stalled",
            "loops": {"clock-stuck": "stalled", "clock-idle": "ok"},
            "stalled": ["clock-stuck"],
        }
        release.set()  # the step returns: the loop waits, and is well again
        eventually(lambda: settled(loops, fake_clock))
        assert client.get("/livez").status_code == 200
    finally:
        release.set()
        for loop in loops.loops:
            loop.stop()
            assert loop.join(5)


class HangingRegistry(SqlEngineRegistry):
    """The registry, whose heartbeat write hangs while `hang` is set (a database that stopped
    answering one connection)."""

    def __init__(self, store: AlarmStore) -> None:
        super().__init__(store)
        self.hang = threading.Event()
        self.hanging = threading.Event()
        self.release = threading.Event()

    def heartbeat(self, engine_id: int, now_ms: int, slots: SlotRange = ALL_SLOTS) -> bool:
        if self.hang.is_set():
            self.hanging.set()
            self.release.wait(10)
        return super().heartbeat(engine_id, now_ms, slots)


@pytest.fixture
def engine_with_registry(
    store: AlarmStore, fake_clock: SettableClock
) -> Iterator[tuple[AlarmEngine, HangingRegistry]]:
    registry = HangingRegistry(store)
    engine = build_engine(
        Settings(instance_id="probed", ring_lanes=1),
        store,
        InMemoryPublisher(),
        fake_clock,
        registry=registry,
    )
    try:
        yield engine, registry
    finally:
        registry.release.set()
        engine.stop(Deadline(5))


def test_an_idle_engine_stays_alive_however_long_nothing_is_due(
    store, fake_clock, engine_with_registry
) -> None:
    engine, _ = engine_with_registry
    client = probe_client(store, fake_clock, loops=engine)
    assert engine.loop_beats() == {}  # not started
    engine.start()
    eventually(lambda: settled(engine, fake_clock))
    response = client.get("/livez")
    assert response.status_code == 200
    assert response.get_json()["loops"] == dict.fromkeys(ENGINE_LOOPS, "ok")
    for _ in range(10):  # over three times the bound, in steps shorter than it
        fake_clock.advance(STALL_MS // 3)
        assert client.get("/livez").status_code == 200
        eventually(lambda: settled(engine, fake_clock))
        assert client.get("/livez").status_code == 200
    engine.stop(Deadline(5))
    assert engine.loop_beats() == {}


def test_a_heartbeat_that_hangs_past_the_bound_names_the_liveness_loop(
    store, fake_clock, engine_with_registry
) -> None:
    engine, registry = engine_with_registry
    client = probe_client(store, fake_clock, loops=engine)
    engine.start()
    eventually(lambda: settled(engine, fake_clock))
    registry.hang.set()
    fake_clock.advance(int(engine.settings.heartbeat_s * 1000))
    assert registry.hanging.wait(5)
    hung_at = fake_clock.now_ms()
    for _ in range(3):  # the other loops go on stepping meanwhile
        fake_clock.advance(STALL_MS // 3)
        eventually(lambda: settled(engine, fake_clock, but="clock-liveness"))
    assert fake_clock.now_ms() == hung_at + STALL_MS
    assert client.get("/livez").status_code == 200  # at the bound
    fake_clock.advance(1)
    response = client.get("/livez")
    assert response.status_code == 503
    assert response.get_json()["stalled"] == ["clock-liveness"]
    registry.hang.clear()
    registry.release.set()
    eventually(lambda: settled(engine, fake_clock))
    assert client.get("/livez").status_code == 200


def test_a_web_process_sees_the_engine_process_through_its_status_file(
    store, fake_clock, tmp_path: Path
) -> None:
    status = EngineStatusFile(tmp_path / "status", fake_clock)
    client = probe_client(store, fake_clock, publisher=status, loops=status)
    response = client.get("/livez")
    assert response.status_code == 503  # no status written yet
    assert response.get_json()["stalled"] == [STATUS_LOOP]
    now = fake_clock.now_ms()
    status.write(True, {"clock-preload": now + 1_000, "clock-ring": now - STALL_MS - 1})
    response = client.get("/livez")
    assert response.status_code == 503
    assert response.get_json()["loops"] == {
        STATUS_LOOP: "ok", "clock-preload": "ok", "clock-ring": "stalled"}  # fmt: skip
    status.write(True, {"clock-preload": now + 1_000, "clock-ring": now})
    assert client.get("/livez").status_code == 200
    fake_clock.advance(1_000 + STALL_MS)  # the engine process stopped writing
    response = client.get("/livez")
    assert response.status_code == 503
    assert STATUS_LOOP in response.get_json()["stalled"]


# --- /readyz ---------------------------------------------------------------------------------


def test_readyz_is_200_while_the_database_answers(store, fake_clock) -> None:
    publisher = InMemoryPublisher()
    publisher.healthy = False  # the broker does not matter for taking alarms
    response = probe_client(store, fake_clock, publisher).get("/readyz")
    assert response.status_code == 200
    assert response.get_json() == {"status": "ok", "database": "ok"}


def test_readyz_is_503_while_the_database_is_down(unreachable_store, fake_clock) -> None:
    response = probe_client(unreachable_store, fake_clock, InMemoryPublisher()).get("/readyz")
    assert response.status_code == 503
    assert response.get_json() == {"status": "unavailable", "database": "down"}


# --- /healthz --------------------------------------------------------------------------------


def register(store: AlarmStore, clock: SettableClock, channels: Mapping[str, str]) -> None:
    registry = SqlApplicationRegistry(store)
    for name, channel in channels.items():
        url = "https://hooks.example.com/clock" if channel == WEBHOOK else None
        registry.put(ApplicationPolicy(name, channel=channel, webhook_url=url), clock.now_ms())


def test_healthz_names_each_channel_in_use(store, fake_clock) -> None:
    register(store, fake_clock, {"orders": AMQP, "hooks": WEBHOOK, "pulls": PULL})
    response = probe_client(store, fake_clock, InMemoryPublisher()).get("/healthz")
    assert response.status_code == 200
    assert response.get_json() == {
        "status": "ok",
        "database": "ok",
        "broker": "ok",
        "channels": {"amqp": "ok", "webhook": "ok", "pull": "ok"},
    }


@pytest.mark.parametrize(
    ("channels", "in_use"),
    [
        ({"orders": AMQP, "hooks": WEBHOOK}, {"amqp": "down", "webhook": "ok"}),
        ({"hooks": WEBHOOK, "pulls": PULL}, {"webhook": "ok", "pull": "ok"}),
        ({}, {}),
    ],
)
def test_a_broker_outage_is_degraded_never_503(store, fake_clock, channels, in_use) -> None:
    register(store, fake_clock, channels)
    publisher = InMemoryPublisher()
    publisher.healthy = False
    response = probe_client(store, fake_clock, publisher).get("/healthz")
    assert response.status_code == 200
    assert response.get_json() == {
        "status": "degraded", "database": "ok", "broker": "down", "channels": in_use}  # fmt: skip


def test_a_database_outage_is_unavailable(unreachable_store, fake_clock) -> None:
    response = probe_client(unreachable_store, fake_clock, InMemoryPublisher()).get("/healthz")
    assert response.status_code == 503
    assert response.get_json() == {
        "status": "unavailable", "database": "down", "broker": "ok", "channels": {}}  # fmt: skip


def test_a_process_without_an_engine_has_no_broker_of_its_own(store, fake_clock) -> None:
    register(store, fake_clock, {"orders": AMQP})
    response = probe_client(store, fake_clock).get("/healthz")
    assert response.status_code == 200
    assert response.get_json() == {
        "status": "ok",
        "database": "ok",
        "broker": "disabled",
        "channels": {"amqp": "disabled"},
    }


def test_a_web_process_reads_the_broker_from_the_status_file(
    store, fake_clock, tmp_path: Path
) -> None:
    status = EngineStatusFile(tmp_path / "status", fake_clock)
    client = probe_client(store, fake_clock, publisher=status, loops=status)
    status.write(False, {})
    assert client.get("/healthz").get_json()["status"] == "degraded"
    status.write(True, {})
    assert client.get("/healthz").get_json()["status"] == "ok"
    fake_clock.advance(60_000)  # a status this old says nothing of the broker now
    assert client.get("/healthz").get_json()["broker"] == "down"
