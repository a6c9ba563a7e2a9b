"""The ring lanes' lock-ahead: how far ahead of due time rows are locked, and why."""

from __future__ import annotations

import contextlib
import json

from clock_server.deadline import Deadline
from clock_server.engine.lead import LockLead
from clock_server.model import NewAlarm
from clock_server.runtime.build_engine import build_engine
from clock_server.settings import Settings
from clock_server.testing import InMemoryPublisher, SettableClock

from .support import drive, metric_value, settle


def test_the_lead_stays_at_its_floor_while_locks_come_quickly():
    lead = LockLead(5, 50)
    for wait in (0, 1, 1, 0):
        lead.observe(wait)
    assert lead.ms == 5


def test_a_slow_lock_raises_the_lead_to_twice_the_wait_up_to_the_ceiling():
    lead = LockLead(5, 50)
    lead.observe(15)
    assert lead.ms == 2 * 15 + lead.margin_ms
    lead.observe(4)  # the slowest of the recent waits still counts
    assert lead.ms == 2 * 15 + lead.margin_ms
    lead.observe(400)
    assert lead.ms == 50


def test_the_lead_falls_back_once_the_slow_locks_are_out_of_the_window():
    lead = LockLead(5, 50, window=10)
    lead.observe(20)
    for _ in range(9):
        lead.observe(1)
    assert lead.ms == 2 * 20 + lead.margin_ms
    lead.observe(1)
    assert lead.ms == 5


def test_a_floor_of_zero_keeps_locking_ahead_off():
    lead = LockLead(0, 50)
    lead.observe(30)
    assert lead.ms == 0


class _SlowLocks:
    """The real claim store, with each ring batch's row locks taking `delay_ms` of the fake
    clock's time, as they do when the database is busy with other work."""

    def __init__(self, claims, clock: SettableClock, delay_ms: int) -> None:
        self._claims = claims
        self._clock = clock
        self._delay_ms = delay_ms

    def __getattr__(self, name):
        return getattr(self._claims, name)

    @contextlib.contextmanager
    def ring_transaction(self, owner=0):
        with self._claims.ring_transaction(owner) as tx:
            lock_live = tx.lock_live

            def slow_lock_live(due):
                self._clock.advance(self._delay_ms)
                return lock_live(due)

            tx.lock_live = slow_lock_live
            yield tx


def _ring_after_a_slow_lock(store, clock: SettableClock, lead_max_ms: int) -> list[int]:
    """Lateness (ms) of alarms rung after one batch found the row locks 30 ms slow, stepped
    with the fake clock: the ring loop is asked to run when it said, each lock takes 30 ms,
    and a lane that locked ahead publishes when the clock reaches the alarm's moment."""
    publisher = InMemoryPublisher()
    settings = Settings(instance_id="slow", ring_lead_ms=5, ring_lead_max_ms=lead_max_ms)
    engine = build_engine(settings, store, publisher, clock)
    engine.ringer.batches.claims = _SlowLocks(engine.ringer.batches.claims, clock, 30)
    now = clock.now_ms()
    store.create_many([NewAlarm("app", f"first{lead_max_ms}", "p", now, None)], now)
    engine.preloader.run_once()
    settle(engine, clock)  # rings the first, and learns how long its lock took
    now = clock.now_ms()
    # One batch each, far enough apart that no two lanes lock at once: a lock's 30 ms move
    # the one fake clock that every lane reads.
    targets = [now + 200 + 200 * i for i in range(5)]
    store.create_many(
        [NewAlarm("app", f"next{lead_max_ms}-{i}", "p", t, None) for i, t in enumerate(targets)],
        now,
    )
    engine.preloader.run_once()
    drive(engine, clock, until_ms=targets[-1] + 100)
    assert engine.ringer.close(Deadline(5)) == 0
    lateness = []
    for message in publisher.published:
        body = json.loads(message.body)
        if body["business_id"].startswith("next"):
            lateness.append(body["published_at"] - body["target_ring_at"])
    return lateness


def test_a_slow_lock_makes_the_next_batches_lock_earlier_and_ring_on_time(store, fake_clock):
    lateness = _ring_after_a_slow_lock(store, fake_clock, lead_max_ms=50)
    assert lateness == [0] * 5, f"the 30 ms lock was not taken ahead of time: {lateness}"


def test_with_the_lead_held_at_its_floor_a_slow_lock_makes_alarms_late(store, fake_clock):
    lateness = _ring_after_a_slow_lock(store, fake_clock, lead_max_ms=5)
    assert lateness == [25] * 5, f"the lock did not cost what the other test saves: {lateness}"


def test_a_ring_thread_woken_late_raises_the_lead_as_a_slow_lock_does(store, fake_clock, publisher):
    settings = Settings(instance_id="late", ring_lanes=1, ring_lead_ms=5, ring_lead_max_ms=50)
    engine = build_engine(settings, store, publisher, fake_clock)
    assert metric_value(engine.metrics, "clock_ring_lead_ms") == 5
    now = fake_clock.now_ms()
    store.create(NewAlarm("app", "late", "p", now + 1_000, None), now)
    engine.preloader.run_once()
    assert engine.ringer.run_once() == (1_000 - 5) / 1000  # wake 5 ms before it is due
    fake_clock.advance(995 + 20)  # ...but the thread got the CPU 20 ms after that
    assert engine.ringer.run_once() == 0.0
    assert len(publisher.published) == 1
    assert engine.ringer.lead.ms == 2 * 20 + engine.ringer.lead.margin_ms
    assert (
        metric_value(engine.metrics, "clock_ring_lead_ms") == 2 * 20 + engine.ringer.lead.margin_ms
    )
