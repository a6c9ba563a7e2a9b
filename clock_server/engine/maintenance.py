"""Periodic maintenance jobs on an APScheduler background scheduler."""

from __future__ import annotations

import logging

from apscheduler.schedulers.background import BackgroundScheduler

from clock_server.metrics import Metrics
from clock_server.store.ports import BacklogCounter
from clock_server.timesource import Clock

log = logging.getLogger(__name__)

OVERDUE_GRACE_MS = 5_000


class Maintenance:
    """Runs the housekeeping jobs; constructing it schedules nothing until start()."""

    def __init__(
        self, store: BacklogCounter, clock: Clock, metrics: Metrics, interval_s: float = 15.0
    ) -> None:
        self.store = store
        self.clock = clock
        self.metrics = metrics
        self.interval_s = interval_s
        self._scheduler: BackgroundScheduler | None = None

    def start(self) -> None:
        self._scheduler = BackgroundScheduler(daemon=True)
        self._scheduler.add_job(
            self.measure_backlog,
            "interval",
            seconds=self.interval_s,
            id="measure_backlog",
            max_instances=1,
            coalesce=True,
        )
        self._scheduler.start()

    def stop(self) -> None:
        """Stop scheduling; a measurement in progress is left to finish on its own."""
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=False)
            self._scheduler = None

    def measure_backlog(self) -> int:
        """Count pending alarms nobody has claimed although they were due a while ago."""
        try:
            overdue = self.store.count_overdue(self.clock.now_ms() - OVERDUE_GRACE_MS)
        except Exception:
            log.exception("could not measure the backlog", extra={"action": "maintenance_error"})
            return -1
        self.metrics.overdue.set(overdue)
        if overdue:
            log.warning(
                "%d alarms are overdue and unclaimed", overdue, extra={"action": "alarms_overdue"}
            )
        return overdue
