"""Heartbeats and takeover, stepped with the fake clock against SQLite and the real MariaDB:
a survivor rings a silent engine's claims seconds after it fell silent, and the silent engine,
if it was only stalled, rings none of them when it comes back."""

from __future__ import annotations

import pytest

from clock_server.deadline import Deadline
from clock_server.engine.alarm_engine import AlarmEngine
from clock_server.errors import Unavailable
from clock_server.model import NewAlarm
from clock_server.runtime.build_engine import build_engine
from clock_server.settings import Settings
from clock_server.slot_space import ALL_SLOTS, SlotRange
from clock_server.store.alarms import AlarmStore
from clock_server.store.engine_registry import SqlEngineRegistry
from clock_server.testing import InMemoryPublisher, SettableClock

from .support import drive, metric_value

HEARTBEAT_MS = 500
DEAD_AFTER_MS = 2_000


def make(store: AlarmStore, clock: SettableClock, name: str) -> AlarmEngine:
    settings = Settings(instance_id=name, ring_lanes=1, ring_lead_ms=0, claim_batch=100)
    assert settings.heartbeat_s * 1000 == HEARTBEAT_MS  # the defaults are what is tested
    assert settings.engine_dead_after_s * 1000 == DEAD_AFTER_MS
    return build_engine(settings, store, InMemoryPublisher(), clock)


def sent_ids(engine: AlarmEngine) -> list[int]:
    publisher = engine.publisher
    assert isinstance(publisher, InMemoryPublisher)
    return [int(message.message_id) for message in publisher.published]


def test_a_survivor_rings_a_silent_engines_claims_on_time_and_the_stalled_one_rings_none(
    store: AlarmStore, fake_clock: SettableClock
):
    start = fake_clock.now_ms()
    alarms = [NewAlarm("app", f"b{i}", "p", start + 3_000 + i, None) for i in range(50)]
    ids = [alarm.id for alarm, _ in store.create_many(alarms, start)]
    stalled, survivor = make(store, fake_clock, "stalled"), make(store, fake_clock, "survivor")
    stalled.liveness.run_once()
    wait_s = survivor.liveness.run_once()
    stalled.preloader.run_once()
    survivor.preloader.run_once()
    # the stalled one joined alone: it holds them all; the survivor, its half of the slots
    ours = len(survivor.heap)
    assert len(stalled.heap) == 50 and 10 < ours < 40

    taken_at, now = None, start
    while taken_at is None and now < start + 2_900:  # each step when the last one asked
        now += round(wait_s * 1000)
        fake_clock.set(now)
        wait_s = survivor.liveness.run_once()
        survivor.preloader.run_once()
        if len(survivor.heap) > ours:
            taken_at = now
    # judged the moment its silence passed the limit, not at the next beat after it
    assert taken_at == start + DEAD_AFTER_MS + 1
    assert len(survivor.heap) == 50 and survivor.liveness.share.current() == ALL_SLOTS
    assert metric_value(survivor.metrics, "clock_engines_declared_dead_total") == 1

    drive(survivor, fake_clock, start + 3_100)
    assert sorted(sent_ids(survivor)) == sorted(ids)
    rung = store.list("app", "rung", 100, None)
    assert len(rung) == 50 and all(alarm.rung_at == alarm.target_ring_at for alarm in rung)

    # The stalled engine comes back: its claims were taken over, so it rings none of them,
    # and its first beat tells it it was declared dead.
    old_id = stalled.liveness.engine_id
    drive(stalled, fake_clock, start + 3_200)
    assert sent_ids(stalled) == []
    stalled.liveness.run_once()
    assert metric_value(stalled.metrics, "clock_engine_fenced_total") == 1
    assert len(stalled.heap) == 0
    assert stalled.liveness.engine_id not in (None, old_id)
    live = {record.instance_id for record in SqlEngineRegistry(store).live_engines()}
    assert live == {"stalled", "survivor"}
    for engine in (stalled, survivor):
        assert engine.ringer.close(Deadline(5)) == 0


def test_a_fenced_engine_drops_what_it_held_and_reads_its_share_again(
    store: AlarmStore, fake_clock: SettableClock
):
    start = fake_clock.now_ms()
    alarms = [NewAlarm("app", f"f{i}", "p", start + 5_000 + i, None) for i in range(20)]
    store.create_many(alarms, start)
    fenced = make(store, fake_clock, "fenced")
    fenced.liveness.run_once()
    fenced.preloader.run_once()
    assert len(fenced.heap) == 20
    SqlEngineRegistry(store).declare_dead(start + 1, start + 2_001)  # by another engine
    fake_clock.set(start + 2_100)
    old_id = fenced.liveness.engine_id
    fenced.liveness.run_once()
    assert len(fenced.heap) == 0 and metric_value(fenced.metrics, "clock_engine_fenced_total") == 1
    assert fenced.liveness.engine_id not in (None, old_id)
    fenced.preloader.run_once()  # from the start: its position went with what it held
    assert len(fenced.heap) == 20
    drive(fenced, fake_clock, start + 5_100)
    assert len(sent_ids(fenced)) == 20


class CutOffRegistry(SqlEngineRegistry):
    """The real registry, cut off from this engine while `cut` is set (its beats fail as a
    lost database connection makes them fail)."""

    cut = False

    def heartbeat(self, engine_id: int, now_ms: int, slots: SlotRange = ALL_SLOTS) -> bool:
        if self.cut:
            raise Unavailable("database unavailable: cut off")
        return super().heartbeat(engine_id, now_ms, slots)


def test_an_engine_whose_beats_failed_gives_the_others_time_to_beat_before_judging(
    store: AlarmStore, fake_clock: SettableClock
):
    start = fake_clock.now_ms()
    registry = CutOffRegistry(store)
    judge = build_engine(
        Settings(instance_id="judge"), store, InMemoryPublisher(), fake_clock, registry=registry
    )
    judge.liveness.run_once()
    other = registry.register("other", 30_000, start)
    registry.cut = True  # both were cut off from the database for 5 s
    fake_clock.set(start + 5_000)
    with pytest.raises(Unavailable):
        judge.liveness.run_once()
    registry.cut = False
    for now in (start + 5_000, start + 5_000 + DEAD_AFTER_MS // 2 - 1):
        fake_clock.set(now)
        judge.liveness.run_once()
        assert other in {record.id for record in registry.live_engines()}
    fake_clock.set(start + 5_000 + DEAD_AFTER_MS // 2)
    judge.liveness.run_once()  # the other had a second to beat again, and did not
    assert other not in {record.id for record in registry.live_engines()}


@pytest.mark.parametrize(
    ("other", "next_step_ms"),
    [
        (None, HEARTBEAT_MS),  # alone: the next beat
        ((0, False), HEARTBEAT_MS),  # the other just beat
        ((-1_000, False), HEARTBEAT_MS),  # its silence passes the limit after our next beat
        ((-1_800, False), 201),  # before it: judged then
        ((-DEAD_AFTER_MS, False), 1),  # at the limit: judged a millisecond later
        ((-1_800, True), HEARTBEAT_MS),  # already declared dead: nothing to wait for
    ],
)
def test_the_next_step_comes_when_another_engines_silence_passes_the_limit(
    store: AlarmStore, fake_clock: SettableClock, other: tuple[int, bool] | None, next_step_ms: int
):
    registry = SqlEngineRegistry(store)
    now = fake_clock.now_ms()
    if other is not None:
        beat_ago, dead = other
        registry.register("other", 30_000, now + beat_ago)
        if dead:
            registry.declare_dead(now + beat_ago + 1, now)
    engine = make(store, fake_clock, "judge")
    assert round(engine.liveness.run_once() * 1000) == next_step_ms


def test_a_new_engine_judges_at_once(store: AlarmStore, fake_clock: SettableClock):
    """A process restarted after a crash takes its former self's claims over without delay."""
    registry = SqlEngineRegistry(store)
    former = registry.register("former", 30_000, fake_clock.now_ms() - DEAD_AFTER_MS - 1)
    make(store, fake_clock, "restarted").liveness.run_once()
    assert former not in {record.id for record in registry.live_engines()}


def test_an_engine_that_stops_leaves_the_registry(store: AlarmStore, fake_clock: SettableClock):
    engine = make(store, fake_clock, "leaving")
    engine.start()
    registry = SqlEngineRegistry(store)
    assert [record.instance_id for record in registry.live_engines()] == ["leaving"]
    engine.stop(Deadline(5))
    assert registry.live_engines() == []
