"""Alarms in slots and engines that own them, on SQLite and the real MariaDB: each engine
claims its own slots' alarms, and when an engine joins the claims of its slots move to it,
stepped with the fake clock."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import text

from clock_server.engine.alarm_engine import AlarmEngine
from clock_server.engine.slot_shares import shares
from clock_server.model import AlarmChanges, Claim, NewAlarm
from clock_server.runtime.build_engine import build_engine
from clock_server.settings import Settings
from clock_server.slot_space import ALL_SLOTS, SlotRange, slot_of
from clock_server.store.alarms import AlarmStore
from clock_server.store.claims import SqlClaimStore
from clock_server.store.engine_registry import SqlEngineRegistry
from clock_server.testing import InMemoryPublisher, SettableClock

from .support import drive, metric_value

NOW = 1_700_000_000_000
LEASE_MS = 30_000
UPPER = SlotRange(512, 1024)


def add(store: AlarmStore, count: int, due_ms: int, prefix: str = "s") -> dict[int, int]:
    """`count` alarms due from `due_ms` on; each id with the slot its key gives."""
    alarms = [NewAlarm("app", f"{prefix}{i}", "p", due_ms + i, None) for i in range(count)]
    created = store.create_many(alarms, NOW)
    return {alarm.id: slot_of("app", alarm.business_id) for alarm, _ in created}


def stored_slots(store: AlarmStore) -> dict[int, int]:
    with store.db.connect() as conn:
        return dict(conn.execute(text("SELECT id, slot FROM clock")).all())  # type: ignore[arg-type]


def test_an_alarm_takes_its_slot_from_its_key_when_it_is_inserted(store: AlarmStore):
    alarm, _ = store.create(NewAlarm("app", "one", "p", NOW + 1_000, None), NOW)
    slots = add(store, 50, NOW + 1_000)
    assert stored_slots(store) == {alarm.id: slot_of("app", "one"), **slots}
    assert len(set(slots.values())) > 40  # spread, not one slot


def test_a_read_takes_only_the_alarms_of_the_slots_asked_for(store: AlarmStore):
    slots = add(store, 200, NOW + 1_000)
    claims = SqlClaimStore(store)
    upper = claims.load_due(NOW + 10_000, 1_000, slots=UPPER)
    expected = {alarm_id for alarm_id, slot in slots.items() if UPPER.holds(slot)}
    assert {claim.id for claim in upper} == expected and 60 < len(expected) < 140
    assert all(claim.slot == slots[claim.id] for claim in upper)
    assert claims.due_applications(NOW + 10_000, SlotRange(0, 512)) == {
        "app": min(NOW + 1_000 + i for i, a in enumerate(sorted(slots)) if slots[a] < 512)
    }
    every = claims.load_due(NOW + 10_000, 1_000)
    assert {claim.id for claim in every} == set(slots)  # all slots asked


def test_an_engine_beats_with_its_slots_and_the_registry_lists_them(store: AlarmStore):
    registry = SqlEngineRegistry(store)
    engine_id = registry.register("a", LEASE_MS, NOW)
    assert registry.heartbeat(engine_id, NOW + 500, SlotRange(0, 341))
    (record,) = registry.live_engines()
    assert (record.slot_from, record.slot_to) == (0, 341)
    assert registry.heartbeat(engine_id, NOW + 1_000)  # a beat without slots: all of them
    (record,) = registry.live_engines()
    assert (record.slot_from, record.slot_to) == (ALL_SLOTS.start, ALL_SLOTS.stop)


def test_a_move_into_an_engines_slots_marks_that_engine_alone(store: AlarmStore):
    registry = SqlEngineRegistry(store)
    lower = registry.register("lower", LEASE_MS, NOW, SlotRange(0, 512))
    upper = registry.register("upper", LEASE_MS, NOW, UPPER)
    slots = add(store, 40, NOW + 5_000)
    [(moved_id, _)] = [(a, slot) for a, slot in slots.items() if UPPER.holds(slot)][:1]
    key = next(a.business_id for a in store.list("app", None, 100, None) if a.id == moved_id)
    store.update("app", key, AlarmChanges(target_ring_at=NOW + 800), NOW, actor="app")
    assert registry.moves_of(lower) == (0, None)
    assert registry.moves_of(upper) == (1, NOW + 800)
    store.update("app", key, AlarmChanges(target_ring_at=NOW + 900), NOW, actor="app")
    assert registry.moves_of(upper) == (2, NOW + 800)  # the earliest stays
    assert not registry.clear_moves(upper, 1)  # read before the second: not cleared
    assert registry.clear_moves(upper, 2)
    assert registry.moves_of(upper) == (2, None)


def make(store: AlarmStore, clock: SettableClock, name: str) -> AlarmEngine:
    settings = Settings(instance_id=name, ring_lanes=1, ring_lead_ms=0, claim_batch=1_000)
    return build_engine(settings, store, InMemoryPublisher(), clock)


def sent_ids(engine: AlarmEngine) -> set[int]:
    publisher = engine.publisher
    assert isinstance(publisher, InMemoryPublisher)
    return {int(message.message_id) for message in publisher.published}


def test_when_an_engine_joins_the_claims_of_its_slots_move_to_it_and_each_alarm_rings_once(
    store: AlarmStore, fake_clock: SettableClock
):
    start = fake_clock.now_ms()
    alarms = [NewAlarm("app", f"j{i}", "p", start + 5_000 + i * 10, None) for i in range(300)]
    slot_by_id = {a.id: slot_of("app", a.business_id) for a, _ in store.create_many(alarms, start)}
    first = make(store, fake_clock, "first")
    first.liveness.run_once()
    first.preloader.run_once()
    assert len(first.heap) == 300  # alone, it owns every slot

    second = make(store, fake_clock, "second")
    second.liveness.run_once()  # joins, owns the upper half, takes its claims there
    second.preloader.run_once()
    ids = sorted(slot_by_id)
    engine_ids = [first.liveness.engine_id, second.liveness.engine_id]
    assert None not in engine_ids
    share = shares(engine_ids)[second.liveness.engine_id]  # type: ignore[arg-type,index]
    assert share == UPPER
    theirs = {a for a in ids if share.holds(slot_by_id[a])}
    assert len(second.heap) == len(theirs) and 100 < len(theirs) < 200
    assert metric_value(second.metrics, "clock_engine_slots") == 512

    fake_clock.set(start + 500)
    first.liveness.run_once()  # sees the newcomer: drops what moved
    assert len(first.heap) == 300 - len(theirs)
    assert metric_value(first.metrics, "clock_engine_slots") == 512

    for alarm in alarms:  # both engines, moment by moment
        for engine in (first, second):
            drive(engine, fake_clock, alarm.target_ring_at)
    assert sent_ids(second) == theirs
    assert sent_ids(first) == set(ids) - theirs
    rung = store.list("app", "rung", 1_000, None)
    assert len(rung) == 300 and all(a.rung_at == a.target_ring_at for a in rung)


class ShareMovesMidPass(SqlClaimStore):
    """The claim store, running `during` once, after a claim and before the preloader holds
    what it claimed: the engine's share moves in that moment."""

    def __init__(self, store: AlarmStore, during: Callable[[], object]) -> None:
        super().__init__(store)
        self.during: Callable[[], object] | None = during

    def load_due(self, *args: Any, **kwargs: Any) -> list[Claim]:
        claimed = super().load_due(*args, **kwargs)
        if self.during is not None:
            during, self.during = self.during, None
            during()
        return claimed


def test_alarms_read_from_a_share_that_moved_meanwhile_are_not_held(
    store: AlarmStore, fake_clock: SettableClock
):
    start = fake_clock.now_ms()
    alarms = [NewAlarm("app", f"m{i}", "p", start + 5_000 + i, None) for i in range(300)]
    slot_by_id = {a.id: slot_of("app", a.business_id) for a, _ in store.create_many(alarms, start)}
    engine = make(store, fake_clock, "first")
    engine.liveness.run_once()
    SqlEngineRegistry(store).register("second", LEASE_MS, start)  # owns the upper half
    engine.preloader.claims = ShareMovesMidPass(store, engine.liveness.run_once)
    engine.preloader.run_once()

    assert engine.liveness.share.current() == SlotRange(0, 512)
    held = {claim.id for claim in engine.heap.drain()}
    assert held == {a for a, slot in slot_by_id.items() if slot < 512}
    rows = store.list("app", None, 1_000, None)
    left = [a for a in rows if a.id not in held]
    assert left and all(a.next_try_time == a.target_ring_at for a in left)  # untouched
