"""The step loop's wait, stepped with a fake clock: a wake() ends it at once, a wake_by() by
the time it names, and neither is lost when it comes during the step."""

from __future__ import annotations

import threading

from clock_server.engine.loop import StepLoop, Waker
from clock_server.errors import ClockError
from clock_server.metrics import Metrics
from clock_server.testing import SettableClock
from tests.support import metric_value


def waiting(waker: Waker, clock: SettableClock, timeout_s: float) -> threading.Thread:
    thread = threading.Thread(target=waker.wait, args=(timeout_s,), daemon=True)
    thread.start()
    clock.wait_for_waiters(1)
    return thread


def ended(thread: threading.Thread) -> bool:
    thread.join(1.0)
    return not thread.is_alive()


def ends_after(thread: threading.Thread, clock: SettableClock, ms: int) -> bool:
    """Whether the wait in `thread` ends once the clock has moved `ms`, and not a ms sooner."""
    clock.advance(ms - 1)
    if ended(thread):
        return False
    clock.advance(1)
    return ended(thread)


def test_a_wait_ends_at_its_timeout(fake_clock):
    waker = Waker(fake_clock)
    thread = waiting(waker, fake_clock, 1.0)
    assert ends_after(thread, fake_clock, 1_000)


def test_wake_by_during_the_wait_ends_it_by_then_and_a_later_one_changes_nothing(fake_clock):
    waker = Waker(fake_clock)
    thread = waiting(waker, fake_clock, 1.0)
    now = fake_clock.now_ms()
    waker.wake_by(now + 300)
    waker.wake_by(now + 600)  # later: the wait still ends at +300
    assert ends_after(thread, fake_clock, 300)


def test_wake_by_a_time_already_past_ends_the_wait_at_once(fake_clock):
    waker = Waker(fake_clock)
    thread = waiting(waker, fake_clock, 1.0)
    waker.wake_by(fake_clock.now_ms() - 1)
    assert ended(thread)


def test_wake_by_during_the_step_shortens_the_next_wait_and_arm_forgets_it(fake_clock):
    waker = Waker(fake_clock)
    waker.arm()
    waker.wake_by(fake_clock.now_ms() + 200)  # during the step
    thread = waiting(waker, fake_clock, 1.0)
    fake_clock.advance(200)
    assert ended(thread)
    waker.arm()  # the next step does what it asked
    thread = waiting(waker, fake_clock, 1.0)
    assert ends_after(thread, fake_clock, 1_000)


def test_a_wake_during_the_step_skips_the_next_wait(fake_clock):
    waker = Waker(fake_clock)
    waker.arm()
    waker.wake()
    thread = threading.Thread(target=waker.wait, args=(1.0,), daemon=True)
    thread.start()
    assert ended(thread)  # with the fake clock standing still
    waker.arm()
    thread = waiting(waker, fake_clock, 1.0)
    waker.wake()
    assert ended(thread)


def test_a_loop_is_known_well_from_each_step_until_the_end_of_each_wait(fake_clock):
    in_step, leave_step = threading.Event(), threading.Event()
    waits = iter([2.5, None])

    def step() -> float | None:
        in_step.set()
        assert leave_step.wait(5)
        leave_step.clear()
        return next(waits, 0.0)

    loop = StepLoop("test-beat", step, Waker(fake_clock), idle_s=7.0)
    assert loop.beat_ms is None  # not started
    start = fake_clock.now_ms()
    loop.start()
    try:
        assert in_step.wait(5)
        assert loop.beat_ms == start  # in its first step
        fake_clock.advance(60_000)  # a long step leaves the beat behind
        assert loop.beat_ms == start
        in_step.clear()
        leave_step.set()
        fake_clock.wait_for_waiters(1)
        assert loop.beat_ms == start + 60_000 + 2_500  # the end of the wait it is in
        fake_clock.advance(2_500)
        assert in_step.wait(5)
        in_step.clear()
        leave_step.set()  # it returns None: it idles for idle_s
        fake_clock.wait_for_waiters(1)
        assert loop.beat_ms == start + 62_500 + 7_000
    finally:
        loop.stop()
        leave_step.set()
        assert loop.join(5)


def test_each_failed_step_is_told_and_the_loop_goes_on(fake_clock):
    metrics = Metrics()
    steps = iter([RuntimeError("bug"), ClockError("database away"), None])
    returned = threading.Event()

    def step() -> float | None:
        outcome = next(steps, None)
        if isinstance(outcome, Exception):
            raise outcome
        returned.set()
        return None

    def told() -> None:
        metrics.loop_error("ring")

    loop = StepLoop("test-errors", step, Waker(fake_clock), error_pause_s=0, on_error=told)
    loop.start()
    try:
        assert returned.wait(5)  # after the two failures, each told, no pause
        assert metric_value(metrics, "clock_loop_errors_total", {"loop": "ring"}) == 2
        assert metric_value(metrics, "clock_loop_errors_total", {"loop": "preload"}) == 0
    finally:
        loop.stop()
