"""A web worker's planner thread: a run that raises is counted and the next one runs."""

from __future__ import annotations

import threading

from clock_server.engine.schedule_planner import SchedulePlanner
from clock_server.runtime.planner_thread import PlannerThread
from clock_server.store.ports import Planned
from clock_server.timesource import SystemClock
from tests.support import eventually


class _Lease:
    def take(self, name: str, owner: str, now_ms: int, until_ms: int) -> bool:
        return True


class _Planner:
    def __init__(self, fail_first: int) -> None:
        self.calls = 0
        self.fail_first = fail_first

    def plan(self, now_ms: int, ahead_ms: int, limit: int = 200) -> Planned:
        self.calls += 1
        if self.calls <= self.fail_first:
            raise RuntimeError("the database went away")
        return Planned(0, None, 0, {})


def test_a_failed_run_is_counted_and_the_next_run_goes_on():
    plans = _Planner(fail_first=1)
    planner = SchedulePlanner(plans, _Lease(), SystemClock(), owner="w", ahead_ms=30_000,
                              interval_s=0.01)  # fmt: skip
    errors = threading.Semaphore(0)
    thread = PlannerThread(planner, SystemClock(), on_error=errors.release)
    thread.start()
    try:
        eventually(lambda: plans.calls >= 3, 5)
    finally:
        thread.stop(5)
    assert errors.acquire(blocking=False) and not errors.acquire(blocking=False)
    calls = plans.calls
    assert not thread.is_running()
    assert plans.calls == calls
