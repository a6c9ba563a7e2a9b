"""When a ring lane wakes the ring loop, stepped with the fake clock: when the loop waits for a
lane, and when a batch puts claims back, but not after every batch (at a steady rate that would
be one more pass of the loop per alarm)."""

from __future__ import annotations

import threading

from clock_server.errors import Unavailable
from clock_server.store.claims import SqlClaimStore

from .harness import HoldingPublisher, create, engine_on, preload
from .support import eventually


class Wakes:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def test_a_batch_rung_with_a_lane_to_spare_does_not_wake_the_loop(store, fake_clock, publisher):
    engine = engine_on(store, fake_clock, publisher, ring_lanes=2, ring_lead_ms=0)
    engine.ringer.on_lane_free = wakes = Wakes()
    now = fake_clock.now_ms()
    create(store, now, "app", [now + 1_000, now + 2_000])
    preload(engine)
    fake_clock.set(now + 1_000)
    assert engine.ringer.run_once() == 0.0
    assert engine.ringer.run_once() == 1.0  # the loop sleeps until the next is due
    eventually(lambda: engine.ringer.in_flight == 0)
    assert len(publisher.published) == 1
    assert wakes.count == 0


def test_a_lane_coming_free_wakes_the_loop_that_waited_for_one(mariadb_store, fake_clock):
    """On MariaDB: SQLite has one writer, so its ring transactions take turns whatever the lanes."""
    publisher = HoldingPublisher(held="burst")
    engine = engine_on(mariadb_store, fake_clock, publisher, ring_batch=100, ring_lanes=2,
                       ring_lead_ms=0)  # fmt: skip
    engine.ringer.on_lane_free = wakes = Wakes()
    now = fake_clock.now_ms()
    create(mariadb_store, now, "burst", [now + 1_000] * 300)
    preload(engine)
    fake_clock.set(now + 1_000)
    try:
        assert engine.ringer.run_once() == 0.0  # both lanes take a batch, and hang
        assert engine.ringer.run_once() == 0.0
        eventually(lambda: publisher.holding == 2)
        assert engine.ringer.run_once() is None  # no lane: it waits for one to come free
    finally:
        publisher.release.set()
    eventually(lambda: engine.ringer.in_flight == 0)
    assert wakes.count >= 1


class FailingOnce(SqlClaimStore):
    """A database that is away for the first ring batch, which finds out once `fail` is set."""

    def __init__(self, store, error: Exception | None = None) -> None:  # type: ignore[no-untyped-def]
        super().__init__(store)
        self.fail = threading.Event()
        self.failed = False
        self.error = error or Unavailable("the database is away")

    def ring_transaction(self, owner=0):  # type: ignore[no-untyped-def]
        if not self.failed:
            self.failed = True
            assert self.fail.wait(5)
            raise self.error
        return super().ring_transaction(owner)


def test_claims_a_failed_batch_puts_back_wake_the_loop(store, fake_clock, publisher):
    engine = engine_on(store, fake_clock, publisher, ring_lanes=2, ring_lead_ms=0)
    engine.ringer.batches.claims = claims = FailingOnce(store)
    engine.ringer.batches.on_pushed_back = wakes = Wakes()
    now = fake_clock.now_ms()
    create(store, now, "app", [now + 1_000, now + 9_000])
    preload(engine)
    fake_clock.set(now + 1_000)
    assert engine.ringer.run_once() == 0.0
    assert engine.ringer.run_once() == 8.0  # asleep until the second, 8 s away
    claims.fail.set()
    eventually(lambda: engine.ringer.in_flight == 0)
    assert wakes.count == 1  # the first is back in the heap, due again in a second
    assert engine.heap.next_due_ms() == now + 2_000


def test_a_batch_that_failed_unexpectedly_rings_its_alarms_shortly_after(
    store, fake_clock, publisher
):
    """Not a database error but a fault of any kind: the alarms it had taken from the heap
    go back to it, or nothing would read them again before the next reading from the start."""
    engine = engine_on(store, fake_clock, publisher, ring_lanes=2, ring_lead_ms=0)
    engine.ringer.batches.claims = claims = FailingOnce(store, RuntimeError("a fault"))
    claims.fail.set()
    now = fake_clock.now_ms()
    create(store, now, "app", [now + 1_000])
    preload(engine)
    fake_clock.set(now + 1_000)
    engine.ringer.run_once()
    eventually(lambda: engine.ringer.in_flight == 0)
    assert publisher.published == [] and len(engine.heap) == 1
    fake_clock.set(now + 1_000 + engine.ringer.batches.tuning.db_retry_ms)
    engine.ringer.run_once()
    eventually(lambda: engine.ringer.in_flight == 0)
    assert len(publisher.published) == 1
    assert store.get("app", "app-0").status == "rung"
