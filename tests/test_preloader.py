"""The preloader's reading, stepped with a fake clock on SQLite and the real MariaDB.

It reads each alarm once, in (due time, id) order from where it got to, and writes nothing.
An alarm that appears before that point reaches the heap all the same: a new one by its id,
one another process moved sooner by the mark the move left on this engine's row, claims a
full heap displaced by reading again from the earliest of them, and everything by reading
from the start: a lease after an id among the new ones was given up on, else once in ten."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import text

from clock_server.engine.alarm_engine import WAKE_MARGIN_MS, AlarmEngine
from clock_server.engine.loop import StepLoop
from clock_server.engine.new_rows import UNSEEN
from clock_server.engine.preloader import (
    FIRST,
    FULL_READING_LEASES,
    GAP_TTL_MS,
    GAVE_UP,
    ROUTINE,
    SHARE_MOVED,
    SLOW_GAP_LOOK_MS,
    reads_from_start,
)
from clock_server.engine.slot_groups import split
from clock_server.model import AlarmChanges, Claim, NewAlarm
from clock_server.runtime.build_engine import build_engine
from clock_server.settings import Settings
from clock_server.slot_space import ALL_SLOTS, SlotRange
from clock_server.store.alarms import AlarmStore
from clock_server.store.claims import SqlClaimStore
from clock_server.store.ports import Position
from clock_server.testing import InMemoryPublisher, SettableClock
from tests.support import eventually, metric_value

INTERVAL_MS = 1_000
LEASE_MS = 30_000


class RecordingClaims(SqlClaimStore):
    """The real claim store, remembering where each read of due alarms started, of which
    slots, on which thread, and what it read. With `together`, each read waits until that
    many are in flight at once."""

    def __init__(self, store: AlarmStore, together: int = 1) -> None:
        super().__init__(store)
        self.positions: list[Position | None] = []
        self.reads: list[tuple[SlotRange, str, list[int]]] = []
        self._together = threading.Barrier(together, timeout=5) if together > 1 else None
        self._lock = threading.Lock()

    def load_due(self, *args: Any, **kwargs: Any) -> list[Claim]:
        if kwargs.get("application") is not None:
            return super().load_due(*args, **kwargs)
        if self._together is not None:
            self._together.wait()
        loaded = super().load_due(*args, **kwargs)
        with self._lock:
            self.positions.append(kwargs.get("after"))
            name = threading.current_thread().name
            self.reads.append((kwargs.get("slots", ALL_SLOTS), name, [c.id for c in loaded]))
        return loaded


def make(store: AlarmStore, clock: SettableClock, **settings: Any) -> AlarmEngine:
    together = settings.pop("together", 1)
    chosen = Settings(
        **{
            "claim_batch": 3,
            "preload_interval_s": INTERVAL_MS / 1000,
            "preload_window_s": 10,
            "ring_lanes": 1,
            "ring_lead_ms": 0,
            "preload_read_groups": 1,  # one reading, in order; `groups` tests read four
            **settings,
        }
    )
    built = build_engine(chosen, store, InMemoryPublisher(), clock)
    assert built.liveness.lease_ms == LEASE_MS  # the default
    built.preloader.claims = RecordingClaims(store, together)
    built.liveness.run_once()  # joins, and owns every slot
    built.preloader.run_once()  # its first look at the newest id
    return built


@pytest.fixture
def engine(store: AlarmStore, fake_clock: SettableClock) -> AlarmEngine:
    return make(store, fake_clock)


def positions(engine: AlarmEngine) -> list[Position | None]:
    claims = engine.preloader.claims
    assert isinstance(claims, RecordingClaims)
    return claims.positions


def positions_and_reads(engine: AlarmEngine) -> list[tuple[SlotRange, str, list[int]]]:
    claims = engine.preloader.claims
    assert isinstance(claims, RecordingClaims)
    return claims.reads


def add_due(store: AlarmStore, clock: SettableClock, count: int, first_in_ms: int) -> list[int]:
    """`count` alarms due 100 ms apart from `first_in_ms` on."""
    now = clock.now_ms()
    items = [NewAlarm("app", f"a{first_in_ms}-{i}", "p", now + first_in_ms + i * 100, None)
             for i in range(count)]  # fmt: skip
    return [alarm.id for alarm, _ in store.create_many(items, now)]


def held_ids(engine: AlarmEngine) -> set[int]:
    return {claim.id for claim in engine.heap.drain()}


def test_full_reads_are_followed_from_where_the_last_one_stopped(store, fake_clock):
    start = fake_clock.now_ms()
    ids = add_due(store, fake_clock, 10, 1_000)
    engine = make(store, fake_clock)  # its first pass reads the first 3
    waits = [engine.preloader.run_once() for _ in range(4)]
    assert waits == [0.0, 0.0, INTERVAL_MS / 1000, INTERVAL_MS / 1000]
    # 3 + 3 + 3 + 1 read; after the short read, from the end of the window
    assert positions(engine) == [
        None,
        (start + 1_200, ids[2]),
        (start + 1_500, ids[5]),
        (start + 1_800, ids[8]),
        (start + 10_000, 2**63 - 1),
    ]
    assert held_ids(engine) == set(ids)


def test_reading_writes_nothing(store, fake_clock, engine):
    add_due(store, fake_clock, 5, 1_000)
    before = {alarm.id: alarm for alarm in store.list("app", None, 10, None)}
    engine.preloader.run_once()
    assert len(engine.heap) == 5
    after = {alarm.id: alarm for alarm in store.list("app", None, 10, None)}
    assert after == before


GROUPS = pytest.mark.parametrize("groups", [1, 4])  # four groups read side by side on MariaDB


@GROUPS
def test_an_alarm_inserted_before_the_position_is_read_by_its_id(store, fake_clock, groups):
    add_due(store, fake_clock, 30, 2_000)
    engine = make(store, fake_clock, preload_read_groups=groups)  # part way through them
    [sooner] = add_due(store, fake_clock, 1, 500)
    engine.preloader.run_once()
    assert sooner in held_ids(engine)


@GROUPS
def test_an_alarm_another_process_moved_sooner_is_read_by_the_mark_it_left(
    store, fake_clock, groups
):
    engine = make(store, fake_clock, preload_read_groups=groups)
    [later] = add_due(store, fake_clock, 1, 5_000)
    while engine.preloader.run_once() == 0.0:
        pass
    engine.heap.drain()  # as if it had been read and let go, the position past it
    alarm = next(a for a in store.list("app", None, 10, None) if a.id == later)
    store.update("app", alarm.business_id, AlarmChanges(target_ring_at=fake_clock.now_ms() + 800),
                 fake_clock.now_ms(), actor="app")  # fmt: skip
    engine.preloader.run_once()
    held = engine.heap.drain()
    assert [(c.id, c.due_ms) for c in held] == [(later, fake_clock.now_ms() + 800)]
    assert engine.preloader.registry.moves_of(engine.liveness.engine_id or 0)[1] is None


@GROUPS
def test_claims_a_full_heap_displaced_are_read_again_when_there_is_room(store, fake_clock, groups):
    engine = make(store, fake_clock, heap_size=4, preload_read_groups=groups)
    first = add_due(store, fake_clock, 6, 3_000)
    while engine.preloader.run_once() == 0.0:
        pass
    assert len(engine.heap) == 4
    sooner = add_due(store, fake_clock, 3, 1_000)  # displace three of those held
    engine.preloader.run_once()
    assert {c.id for c in engine.heap.pop_due(fake_clock.now_ms() + 10_000, 10)} == {
        *sooner,
        first[0],
    }
    while engine.preloader.run_once() == 0.0:
        pass
    assert held_ids(engine) == set(first[1:5])  # the displaced, read again, and the next


def test_the_groups_of_the_slots_are_read_side_by_side_each_from_where_it_got_to(
    mariadb_store, fake_clock
):
    ids = add_due(mariadb_store, fake_clock, 40, 1_000)
    # Each read waits until all four are in flight: read one after another, they would not be.
    engine = make(mariadb_store, fake_clock, preload_read_groups=4, claim_batch=8, together=4)
    while engine.preloader.run_once() == 0.0:
        pass
    assert held_ids(engine) == set(ids)
    claims = engine.preloader.claims
    assert isinstance(claims, RecordingClaims)
    assert {slots for slots, _, _ in claims.reads} == set(split(ALL_SLOTS, 4))
    assert all(name.startswith("clock-preload-read") for _, name, _ in claims.reads)
    # Each group went on from where it had got to: no alarm was read twice.
    read = [alarm_id for _, _, loaded in claims.reads for alarm_id in loaded]
    assert sorted(read) == sorted(ids)
    engine.preloader.close()


def test_four_groups_are_read_side_by_side_on_a_server_and_in_one_scan_on_sqlite(store, fake_clock):
    engine = make(store, fake_clock, preload_read_groups=4)  # it has made its first pass
    read = {slots for slots, _, _ in positions_and_reads(engine)}
    assert read == (set(split(ALL_SLOTS, 4)) if store.caps.row_locks else {ALL_SLOTS})
    engine.preloader.close()


TEN_LEASES_MS = FULL_READING_LEASES * LEASE_MS


@pytest.mark.parametrize(
    ("rule", "since_ms", "gave_up", "share_moved", "reason"),
    [
        ("the first pass reads from the start", None, False, False, FIRST),
        ("nothing given up: not within ten leases", TEN_LEASES_MS - 1, False, False, None),
        ("nothing given up: once in ten leases", TEN_LEASES_MS, False, False, ROUTINE),
        ("an id given up: not within a lease", LEASE_MS - 1, True, False, None),
        ("an id given up: a lease after the last reading", LEASE_MS, True, False, GAVE_UP),
        ("an id given up, ten leases on: for the id", TEN_LEASES_MS, True, False, GAVE_UP),
        ("a share that moved: at once", 0, False, True, SHARE_MOVED),
        ("a share that moved, an id given up: for the share", LEASE_MS, True, True, SHARE_MOVED),
    ],
)  # fmt: skip
def test_when_the_reading_starts_again(
    rule: str, since_ms: int | None, gave_up: bool, share_moved: bool, reason: str | None
):
    assert reads_from_start(since_ms, gave_up, share_moved, LEASE_MS) == reason, rule


def counted(engine: AlarmEngine, name: str, reason: str) -> float:
    return metric_value(engine.preloader.metrics, f"{name}_total", {"reason": reason})


def test_everything_is_read_again_from_the_start_once_in_ten_leases(store, fake_clock, engine):
    add_due(store, fake_clock, 2, 20_000)
    engine.preloader.run_once()
    fake_clock.advance(LEASE_MS - 1)
    positions(engine).clear()
    engine.preloader.run_once()
    assert positions(engine)[0] is not None  # not within a lease, whatever was given up
    fake_clock.advance(TEN_LEASES_MS - LEASE_MS + 1)
    engine.preloader.run_once()
    assert positions(engine)[-1] is None  # from the start
    assert engine.preloader.position == (fake_clock.now_ms() + 10_000, 2**63 - 1)


def set_id(store: AlarmStore, alarm_id: int, new_id: int) -> None:
    with store.db.begin() as conn:
        conn.execute(text(f"UPDATE clock SET id = {new_id} WHERE id = {alarm_id}"))


def leave_gaps(store: AlarmStore, clock: SettableClock, groups: int) -> tuple[AlarmEngine, int]:
    """An engine that has seen an alarm `first`, then a later id before the four ids below
    it: first+1 to first+4 are gaps from now."""
    # Before the engine, which starts from the newest id: an empty table's is 0, and the ids
    # of the tests before may have gone past the jump the engine walks.
    [first] = add_due(store, clock, 1, 20_000)
    engine = make(store, clock, preload_read_groups=groups)
    [later] = add_due(store, clock, 1, 20_001)
    set_id(store, later, first + 5)
    engine.preloader.run_once()
    return engine, first


def commit_late(store: AlarmStore, clock: SettableClock, alarm_id: int, due_in_ms: int) -> None:
    """The row of a create whose transaction committed only now, due before the position."""
    [slow] = add_due(store, clock, 1, due_in_ms)
    set_id(store, slow, alarm_id)


@GROUPS
def test_a_create_that_commits_seconds_after_a_later_id_is_held_within_a_second(
    store, fake_clock, groups
):
    """A gap is looked at at every pass for GAP_TTL_MS, then once a second for a lease: the
    commit the database held longer than that is found a second after it, at most."""
    engine, first = leave_gaps(store, fake_clock, groups)
    fake_clock.advance(GAP_TTL_MS + 1)
    engine.preloader.run_once()  # a slow look, and none found: not given up
    commit_late(store, fake_clock, first + 2, 3_000)
    fake_clock.advance(SLOW_GAP_LOOK_MS - 1)
    engine.preloader.run_once()  # within a second of the last slow look: not looked at
    assert first + 2 not in held_ids(engine)
    fake_clock.advance(1)
    engine.preloader.run_once()
    assert first + 2 in held_ids(engine)
    assert counted(engine, "clock_preload_ids_given_up", UNSEEN) == 0
    assert counted(engine, "clock_preload_readings_from_start", GAVE_UP) == 0


@GROUPS
def test_an_id_given_up_on_has_the_reading_start_again_a_lease_later(store, fake_clock, groups):
    """A row whose insert committed over a lease after a later id's is found all the same."""
    engine, first = leave_gaps(store, fake_clock, groups)
    for _ in range(LEASE_MS // SLOW_GAP_LOOK_MS + 1):
        fake_clock.advance(SLOW_GAP_LOOK_MS)
        engine.preloader.run_once()  # at the last, a lease since the gaps: given up
    # first+1 to first+4, and on MariaDB any ids its auto-increment skipped after `later`
    assert counted(engine, "clock_preload_ids_given_up", UNSEEN) >= 4
    commit_late(store, fake_clock, first + 2, 2_000)
    fake_clock.advance(SLOW_GAP_LOOK_MS)
    engine.preloader.run_once()  # a lease since the first reading from the start
    assert first + 2 in held_ids(engine)
    assert counted(engine, "clock_preload_readings_from_start", GAVE_UP) == 1
    assert counted(engine, "clock_preload_readings_from_start", FIRST) == 1


def test_alarms_announced_due_soon_share_one_pass_by_the_margin_before_the_first(
    store, fake_clock, engine
):
    loop = StepLoop("test-preload", engine.preloader.run_once, engine.preload_waker)
    loop.start()
    try:
        fake_clock.wait_for_waiters(1)  # the first pass is done; the loop waits an interval
        passes = len(positions(engine))
        first_in_ms = WAKE_MARGIN_MS + 300
        ids = add_due(store, fake_clock, 2, first_in_ms)  # due at +800 and +900: under a batch
        for i in range(2):
            engine.notify_due(fake_clock.now_ms() + first_in_ms + i * 100)
        fake_clock.advance(299)
        # not one pass per alarm: none yet (a loop woken at once would pass within 0.5 s)
        with pytest.raises(AssertionError):
            eventually(lambda: len(positions(engine)) > passes, 0.5)
        fake_clock.advance(1)  # the margin before the first is due
        fake_clock.wait_for_waiters(1)
        eventually(lambda: len(positions(engine)) == passes + 1)
        # Read by their ids: they are due before where the reading had got to.
        eventually(lambda: len(engine.heap) >= len(ids))
        assert set(ids) <= held_ids(engine)
    finally:
        loop.stop()
        assert loop.join(5)
