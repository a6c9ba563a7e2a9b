"""The preloader's scan floor, stepped with a fake clock on SQLite and the real MariaDB.

Passes that follow a full batch start their scan where the last one stopped; anything that
can appear below that point is found by a scan from the start: at once when the engine is
told of a new or moved alarm, or when claims are given back, and otherwise within one
preload interval."""

from __future__ import annotations

import pytest

from clock_server.engine.alarm_engine import WAKE_MARGIN_MS, AlarmEngine
from clock_server.engine.loop import StepLoop
from clock_server.model import Claim, NewAlarm
from clock_server.runtime.build_engine import build_engine
from clock_server.settings import Settings
from clock_server.slot_space import ALL_SLOTS, SlotRange
from clock_server.store.alarms import AlarmStore
from clock_server.store.claims import SqlClaimStore
from clock_server.testing import InMemoryPublisher, SettableClock
from tests.support import eventually

INTERVAL_MS = 1_000


class RecordingClaims(SqlClaimStore):
    """The real claim store, remembering the floor each pass scanned from."""

    def __init__(self, store: AlarmStore) -> None:
        super().__init__(store)
        self.floors: list[int | None] = []

    def claim_due(
        self,
        horizon_ms: int,
        lease_until_ms: int,
        limit: int,
        *,
        now_ms: int,
        from_ms: int | None = None,
        owner: int = 0,
        application: str | None = None,
        slots: SlotRange = ALL_SLOTS,
    ) -> list[Claim]:
        self.floors.append(from_ms)
        return super().claim_due(
            horizon_ms,
            lease_until_ms,
            limit,
            now_ms=now_ms,
            from_ms=from_ms,
            owner=owner,
            application=application,
            slots=slots,
        )


@pytest.fixture
def engine(store: AlarmStore, fake_clock: SettableClock) -> AlarmEngine:
    settings = Settings(
        claim_batch=3,
        preload_interval_s=INTERVAL_MS / 1000,
        preload_window_s=10,
        ring_lanes=1,
        ring_lead_ms=0,
    )
    built = build_engine(settings, store, InMemoryPublisher(), fake_clock)
    built.preloader.claims = RecordingClaims(store)
    return built


def floors(engine: AlarmEngine) -> list[int | None]:
    claims = engine.preloader.claims
    assert isinstance(claims, RecordingClaims)
    return claims.floors


def add_due(store: AlarmStore, clock: SettableClock, count: int, first_in_ms: int) -> list[int]:
    """`count` alarms due 100 ms apart from `first_in_ms` on."""
    now = clock.now_ms()
    items = [NewAlarm("app", f"a{first_in_ms}-{i}", "p", now + first_in_ms + i * 100, None)
             for i in range(count)]  # fmt: skip
    return [alarm.id for alarm, _ in store.create_many(items, now)]


def held_ids(engine: AlarmEngine) -> set[int]:
    return {claim.id for claim in engine.heap.drain()}


def test_full_batches_are_followed_from_where_the_last_one_stopped(store, fake_clock, engine):
    start = fake_clock.now_ms()
    ids = add_due(store, fake_clock, 10, 1_000)
    waits = []
    for _ in range(5):
        waits.append(engine.preloader.run_once())
    assert waits == [0.0, 0.0, 0.0, INTERVAL_MS / 1000, INTERVAL_MS / 1000]
    # 3 + 3 + 3 + 1 claimed; the pass after the short batch scans from the start again
    assert floors(engine) == [None, start + 1_200, start + 1_500, start + 1_800, None]
    assert held_ids(engine) == set(ids)


def test_an_alarm_written_below_the_floor_is_claimed_at_once_when_the_engine_is_told(
    store, fake_clock, engine
):
    add_due(store, fake_clock, 30, 2_000)
    assert engine.preloader.run_once() == 0.0  # a chain has begun
    [sooner] = add_due(store, fake_clock, 1, 500)
    engine.notify_due(fake_clock.now_ms() + 500)
    engine.preloader.run_once()
    assert floors(engine)[-1] is None
    assert sooner in held_ids(engine)


def test_an_alarm_below_the_floor_that_nobody_announced_waits_at_most_one_interval(
    store, fake_clock, engine
):
    add_due(store, fake_clock, 30, 2_000)
    engine.preloader.run_once()
    [unannounced] = add_due(store, fake_clock, 1, 1_500)
    engine.preloader.run_once()
    engine.preloader.run_once()
    assert unannounced not in {claim.id for claim in engine.heap.drain()}
    fake_clock.advance(INTERVAL_MS - 1)
    engine.preloader.run_once()
    assert floors(engine)[-1] is not None  # still the same chain
    fake_clock.advance(1)
    engine.preloader.run_once()
    assert floors(engine)[-1] is None
    assert unannounced in held_ids(engine)


def test_claims_given_back_by_a_full_heap_are_looked_for_from_the_start(store, fake_clock):
    settings = Settings(claim_batch=3, heap_size=4, ring_lanes=1, ring_lead_ms=0)
    engine = build_engine(settings, store, InMemoryPublisher(), fake_clock)
    engine.preloader.claims = RecordingClaims(store)
    add_due(store, fake_clock, 6, 3_000)
    while engine.preloader.run_once() == 0.0:
        pass
    assert len(engine.heap) == 4
    add_due(store, fake_clock, 3, 1_000)  # sooner: they displace three held claims
    engine.notify_due(fake_clock.now_ms() + 1_000)
    assert engine.preloader.run_once() == 0.0
    engine.preloader.run_once()
    assert floors(engine)[-1] is None


def test_alarms_announced_due_soon_share_one_pass_by_the_margin_before_the_first(
    store, fake_clock, engine
):
    loop = StepLoop("test-preload", engine.preloader.run_once, engine.preload_waker)
    loop.start()
    try:
        fake_clock.wait_for_waiters(1)  # the first pass is done; the loop waits an interval
        passes = len(floors(engine))
        first_in_ms = WAKE_MARGIN_MS + 300
        ids = add_due(store, fake_clock, 2, first_in_ms)  # due at +800 and +900: under a batch
        for i in range(2):
            engine.notify_due(fake_clock.now_ms() + first_in_ms + i * 100)
        fake_clock.advance(299)
        # not one pass per alarm: none yet (a loop woken at once would pass within 0.5 s)
        with pytest.raises(AssertionError):
            eventually(lambda: len(floors(engine)) > passes, 0.5)
        fake_clock.advance(1)  # the margin before the first is due
        fake_clock.wait_for_waiters(1)
        eventually(lambda: len(floors(engine)) == passes + 1)
        assert floors(engine)[-1] is None  # from the start: they may be below a floor
        # The pass records its floor before its claims reach the heap.
        eventually(lambda: len(engine.heap) >= len(ids))
        assert set(ids) <= held_ids(engine)
    finally:
        loop.stop()
        assert loop.join(5)
