"""A webhook call's timeout is a deadline: the watchdog that ends calls at their deadlines
(delivery.call_deadline)."""

from __future__ import annotations

import threading
import time

from clock_server.delivery.call_deadline import CLOSED, DEADLINE, CallDeadlines

# --- the watchdog on its own ---------------------------------------------------------------


class _Held:
    def __init__(self) -> None:
        self.interrupted = threading.Event()

    def interrupt(self) -> None:
        self.interrupted.set()


def test_the_watchdog_interrupts_what_a_call_holds_at_its_deadline():
    deadlines = CallDeadlines("test-deadlines")
    try:
        late, early, let_go, finished = _Held(), _Held(), _Held(), _Held()
        started = time.monotonic()
        calls = [deadlines.start(timeout_s) for timeout_s in (0.3, 0.1, 0.1, 0.1)]
        for call, held in zip(calls, (late, early, let_go, finished), strict=True):
            call.hold(held)
        calls[2].let_go(let_go)
        calls[3].finish()
        assert early.interrupted.wait(1) and time.monotonic() - started < 0.2
        assert late.interrupted.wait(1) and time.monotonic() - started < 0.4
        assert [call.ended_by for call in calls] == [DEADLINE, DEADLINE, DEADLINE, None]
        assert not let_go.interrupted.is_set() and not finished.interrupted.is_set()
        after = _Held()
        calls[0].hold(after)  # held past the deadline: interrupted at once
        assert after.interrupted.is_set()
    finally:
        deadlines.close()


def test_a_closed_watchdog_ends_its_calls_and_every_later_one():
    deadlines = CallDeadlines("test-deadlines")
    held = _Held()
    deadlines.start(60).hold(held)
    deadlines.close()
    assert held.interrupted.is_set()
    assert deadlines.start(60).ended_by == CLOSED
    assert "test-deadlines" not in [thread.name for thread in threading.enumerate()]
