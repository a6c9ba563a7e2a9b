"""Making the schedules' occurrences alarms, by the server holding the job's lease, every
200 ms: each occurrence is in the table `ahead_ms` before it is due, so the engine claims
and rings it as it does any alarm. Every 200 ms and not every second, so that 1,667
occurrences a second are made a fifth at a time: made all at once, a second's worth held
a web worker's and MariaDB's share of the cores for about 230 ms, and the deliveries beside
it were later (docs/perf/findings.md, 2026-12-02)."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Mapping

from clock_server.engine.job_leases import LeaseKeeper
from clock_server.store.ports import JobLease, OccurrencePlanner, Planned
from clock_server.timesource import Clock

log = logging.getLogger(__name__)

PLAN_JOB = "plan_schedules"
PLAN_INTERVAL_S = 0.2
# Kept by job_leases.LeaseKeeper: the holder writes its row once a second, not at every run,
# and another server asks once a second; a holder that died leaves the planning to another
# within about 3 s, while occurrences are made `plan_ahead_ms` (30 s and more) before due.
# Taken every run, the lease cost each idle web worker about 10 ms of CPU a second.
PLAN_LEASE_S = 2.0
# Schedules planned in one transaction; a pass that read as many goes on at once.
SCHEDULES_PER_PASS = 200
# Passes one run makes at most; what is left goes with the next run.
MAX_PASSES = 50


class SchedulePlanner:
    """A run that holds the job's lease (taken or renewed once a second) plans the schedules
    due within `ahead_ms`; `notify(due_ms)` wakes the engine for occurrences made inside its
    preloaded window, and `on_made(now_ms, by_application)` counts the occurrences as alarms
    created."""

    def __init__(
        self,
        planner: OccurrencePlanner,
        lease: JobLease,
        clock: Clock,
        *,
        owner: str,
        ahead_ms: int,
        notify: Callable[[int], None] | None = None,
        on_made: Callable[[int, Mapping[str, int]], None] | None = None,
        interval_s: float = PLAN_INTERVAL_S,
        lease_s: float = PLAN_LEASE_S,
    ) -> None:
        self.planner = planner
        self.clock = clock
        self.ahead_ms = ahead_ms
        self.notify = notify
        self.on_made = on_made
        self.interval_s = interval_s
        self._lease = LeaseKeeper(lease, PLAN_JOB, owner, int(lease_s * 1000))

    def run(self) -> Planned | None:
        """What this run made; None when another server holds the lease."""
        now_ms = self.clock.now_ms()
        if not self._lease.holds(now_ms):
            return None
        made, earliest, schedules, by_application = 0, None, 0, Counter[str]()
        for _ in range(MAX_PASSES):
            step = self.planner.plan(self.clock.now_ms(), self.ahead_ms, SCHEDULES_PER_PASS)
            made += step.made
            schedules += step.schedules
            by_application.update(step.by_application)
            if step.earliest is not None:
                earliest = step.earliest if earliest is None else min(earliest, step.earliest)
                if self.notify is not None:
                    self.notify(step.earliest)
            if step.schedules < SCHEDULES_PER_PASS:
                break
        if made:
            log.debug("made %d occurrences of %d schedules", made, schedules,
                      extra={"action": "occurrences_made", "made": made})  # fmt: skip
            if self.on_made is not None:
                self.on_made(now_ms, by_application)
        return Planned(made, earliest, schedules, by_application)
