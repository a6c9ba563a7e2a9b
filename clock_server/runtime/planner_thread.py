"""The schedules' planner in a web worker, on a thread of its own.

With CLOCK_WEB_PROCESSES > 1 the web workers plan the schedules, not the engine's process:
there a planner's pass (about 200 µs of the interpreter per occurrence) held the lock the
ring path's threads need, and at 1,667 occurrences a second they rang several times as late
as one-off alarms at that rate. A worker runs niced, so the engine goes first when the
machine is full. The job's lease lets one at a time plan, across workers and servers alike;
the others ask for it once a second (engine.job_leases).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from clock_server.engine.schedule_planner import SchedulePlanner
from clock_server.timesource import Clock

log = logging.getLogger(__name__)


class PlannerThread:
    """Runs `planner` every `planner.interval_s` until stopped; a run missed while one was
    running is not made up."""

    def __init__(
        self, planner: SchedulePlanner, clock: Clock, on_error: Callable[[], None] | None = None
    ) -> None:
        self.planner = planner
        self.clock = clock
        self.on_error = on_error  # counts the failure in clock_loop_errors
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="clock-schedule-planner",
                                        daemon=True)  # fmt: skip
        self._thread.start()

    def stop(self, timeout_s: float) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def is_running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def run_once(self) -> None:
        try:
            self.planner.run()
        except Exception:  # the next run tries again; a worker's API keeps serving
            log.exception("the schedule planner failed", extra={"action": "maintenance_error"})
            if self.on_error is not None:
                self.on_error()

    def _run(self) -> None:
        interval_ms = int(self.planner.interval_s * 1000)
        while not self._stop.is_set():
            started_ms = self.clock.now_ms()
            self.run_once()
            left_ms = interval_ms - (self.clock.now_ms() - started_ms)
            if left_ms > 0 and self.clock.wait(self._stop, left_ms):
                return
