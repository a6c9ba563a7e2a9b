"""Periodic maintenance jobs on an APScheduler background scheduler: the backlog gauge, the
requeue of pull messages whose application left the pull channel, the sweep of pull messages
no puller will finish, the schedules' planner, the retention purge, and the per-minute
statistics' purge."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from apscheduler.schedulers.background import BackgroundScheduler

from clock_server.engine.pull_sweep import PULL_SWEEP_JOB, PullSweep
from clock_server.engine.schedule_planner import PLAN_JOB, SchedulePlanner
from clock_server.engine.stats_purge import STATS_PURGE_JOB, StatsPurge
from clock_server.metrics import Metrics
from clock_server.model import CANCELLED, DEAD, EXPIRED, RUNG
from clock_server.store.ports import (
    BacklogCounter,
    FinishedAlarmPurger,
    JobLease,
    Planned,
    PullRequeue,
    PullSwept,
)
from clock_server.timesource import Clock

log = logging.getLogger(__name__)

OVERDUE_GRACE_MS = 5_000
# How often the backlog gauge, the requeue and the sweep of pull messages run.
MAINTENANCE_INTERVAL_S = 15.0


class Maintenance:
    """Runs the housekeeping jobs; constructing it schedules nothing until start()."""

    def __init__(
        self,
        store: BacklogCounter,
        clock: Clock,
        metrics: Metrics,
        interval_s: float = MAINTENANCE_INTERVAL_S,
        purge: RetentionPurge | None = None,
        requeue: PullRequeue | None = None,
        stats_purge: StatsPurge | None = None,
        pull_sweep: PullSweep | None = None,
        planner: SchedulePlanner | None = None,
    ) -> None:
        self.store = store
        self.clock = clock
        self.metrics = metrics
        self.interval_s = interval_s
        self.purge = purge
        self.requeue = requeue
        self.stats_purge = stats_purge
        self.pull_sweep = pull_sweep
        self.planner = planner
        self._scheduler: BackgroundScheduler | None = None

    def start(self) -> None:
        self._scheduler = BackgroundScheduler(daemon=True)
        jobs: list[tuple[Callable[[], object], float, str]] = [
            (self.measure_backlog, self.interval_s, "measure_backlog")
        ]
        if self.requeue is not None:
            jobs.append((self.requeue_left_pull, self.interval_s, "requeue_left_pull"))
        if self.pull_sweep is not None:
            jobs.append((self.sweep_pulls, self.pull_sweep.interval_s, PULL_SWEEP_JOB))
        if self.planner is not None:
            jobs.append((self.plan_schedules, self.planner.interval_s, PLAN_JOB))
        if self.purge is not None:
            jobs.append((self.purge_finished, self.purge.interval_s, PURGE_JOB))
        if self.stats_purge is not None:
            jobs.append((self.purge_stats, self.stats_purge.interval_s, STATS_PURGE_JOB))
        for job, seconds, name in jobs:
            # One run at a time; runs missed while one was running are not made up.
            self._scheduler.add_job(
                job, "interval", seconds=seconds, id=name, max_instances=1, coalesce=True
            )
        self._scheduler.start()

    def stop(self) -> None:
        """Stop scheduling; a measurement in progress is left to finish on its own, a purge
        run after the batch in hand."""
        if self.purge is not None:
            self.purge.stop()
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=False)
            self._scheduler = None

    def measure_backlog(self) -> int:
        """Count pending alarms nobody has claimed although they were due a while ago."""
        try:
            overdue = self.store.count_overdue(self.clock.now_ms() - OVERDUE_GRACE_MS)
        except Exception:
            log.exception("could not measure the backlog", extra={"action": "maintenance_error"})
            self.metrics.loop_error("backlog")
            return -1
        self.metrics.overdue.set(overdue)
        if overdue:
            log.warning(
                "%d alarms are overdue and unclaimed", overdue, extra={"action": "alarms_overdue"}
            )
        return overdue

    def requeue_left_pull(self) -> dict[str, int]:
        """Send the pull messages of applications now on another channel back to pending, for
        the engine to ring on that channel; how many, by application."""
        assert self.requeue is not None
        try:
            requeued = self.requeue.requeue_left_pull(self.clock.now_ms())
        except Exception:
            log.exception("could not requeue pull messages", extra={"action": "maintenance_error"})
            self.metrics.loop_error("pull_requeue")
            return {}
        if requeued:
            log.warning(
                "requeued the pull messages of applications that left the pull channel: %s",
                requeued,
                extra={"action": "pull_messages_requeued"},
            )
        return requeued

    def sweep_pulls(self) -> PullSwept | None:
        """One run of the pull sweep: what it finished, None when another server holds its
        lease or the database failed under it."""
        assert self.pull_sweep is not None
        try:
            return self.pull_sweep.run()
        except Exception:
            log.exception("the pull sweep failed", extra={"action": "maintenance_error"})
            self.metrics.loop_error("pull_sweep")
            return None

    def plan_schedules(self) -> Planned | None:
        """One run of the schedule planner: what it made, None when another server holds its
        lease or the database failed under it."""
        assert self.planner is not None
        try:
            return self.planner.run()
        except Exception:
            log.exception("the schedule planner failed", extra={"action": "maintenance_error"})
            self.metrics.loop_error("schedule_planner")
            return None

    def purge_finished(self) -> int | None:
        """One run of the retention purge: how many alarms it deleted, None when another
        server holds the job's lease, -1 when the database failed under it."""
        assert self.purge is not None
        try:
            return self.purge.run()
        except Exception:
            log.exception("the retention purge failed", extra={"action": "maintenance_error"})
            self.metrics.loop_error("purge")
            return -1

    def purge_stats(self) -> int | None:
        """One run of the statistics' purge: rows deleted, None when another server holds
        its lease, -1 when the database failed under it."""
        assert self.stats_purge is not None
        try:
            return self.stats_purge.run()
        except Exception:
            log.exception("the statistics' purge failed", extra={"action": "maintenance_error"})
            self.metrics.loop_error("stats_purge")
            return -1


FINISHED = (RUNG, CANCELLED, EXPIRED, DEAD)
DAY_MS = 86_400_000
PURGE_JOB = "purge_finished_alarms"
# A run may work for this share of the interval, so that runs never overlap.
PURGE_BUDGET_SHARE = 0.8
# The lease outlives a run and the wait for the next one, when its holder renews it; a holder
# that died leaves the job to another server after at most this many intervals.
PURGE_LEASE_INTERVALS = 2.0
# After each batch the purge rests this many times as long as the batch took, so that it
# keeps the database busy a tenth of the time at most. Deleting a backlog of a million
# finished alarms beside 1,000 rings a second on the benchmark machine, resting as long as
# each batch took (about 13,000 deleted a second) doubled the rings' p99 lateness; at this
# pace (1,600-2,800 a second) it was 1.3-1.6 times that of the same run without the purge
# (docs/perf/findings.md, the sittings of "Retention purge").
PURGE_REST_RATIO = 9.0
_START = (-(2**62), 0)  # a position before every finish time

Position = tuple[int, int]  # (finish time, id): the purge has read every row up to here


class RetentionPurge:
    """Deletes finished alarms (rung, cancelled, expired, dead) once they finished longer ago
    than their application's retention (its `retention_days`, else the server's default).

    A run takes the job's lease first, so that of several servers one purges at a time, then
    works in batches of at most `batch` rows until nothing is left or its time budget is
    spent: each batch reads the next rows of one status from the (status, next_try_time)
    index (finish order, no locks) and deletes those past their retention by id in a
    transaction of its own. Between batches it rests, in proportion to the batch's time.

    What it reads. The retentions in use form classes: the default and each distinct
    `retention_days`. For each status, the classes run longest retention first; the class of
    R days reads the finished rows up to its cutoff (now - R) and deletes every row it meets
    whose own application's cutoff has passed. Each class remembers how far it has read (its
    watermark), and no row of an application with a retention of R or less is left below it,
    so the next run reads on from there: one interval's worth of finished rows per class.
    A class also starts no lower than where the longer class before it stopped in this run,
    since that one has deleted everything below its cutoff that any shorter class would.
    Within a run, each read starts where the last one stopped, so the rows a class keeps
    (those of longer-retention applications) are read once, not once per batch.
    - A longer retention than the default: the default class reads that application's rows
      from the default cutoff up to its own once each, when they cross the default cutoff;
      its own class reads beyond, where only rows of still longer retentions are left.
    - A shorter one: its class reads the rows between the default cutoff and its own, every
      application's, once each. On the first run of a process (or after it took the lease
      over) no watermark is known, and that whole range is read once, spread over runs by
      the budget; reading the application's own rows through the (application, status)
      index instead would avoid that, but read all its kept rows again on every run, in id
      order rather than finish order.
    - When an application's retention gets shorter, rows below the watermarks may now be due,
      so the watermarks are forgotten and the next run reads from the start.
    The watermarks live in this process: a server that takes the lease over starts from the
    start. A row finishing after a run is stamped after that run's cutoffs unless the clocks
    of two servers differ by more than the retention.
    """

    def __init__(
        self,
        purger: FinishedAlarmPurger,
        lease: JobLease,
        clock: Clock,
        metrics: Metrics,
        *,
        owner: str,
        retention_days: float,
        interval_s: float,
        batch: int,
        budget_s: float | None = None,
        rest_ratio: float = PURGE_REST_RATIO,
    ) -> None:
        self.purger = purger
        self.lease = lease
        self.clock = clock
        self.metrics = metrics
        self.owner = owner
        self.retention_days = retention_days
        self.interval_s = interval_s
        self.batch = batch
        budget = interval_s * PURGE_BUDGET_SHARE if budget_s is None else budget_s
        self.budget_ms = int(budget * 1000)
        self.lease_ms = int(interval_s * PURGE_LEASE_INTERVALS * 1000)
        self.rest_ratio = rest_ratio
        self._stopped = threading.Event()
        self._read: dict[tuple[str, float], Position] = {}  # (status, days) -> watermark
        self._overrides: dict[str, float] = {}  # the retentions of the last run

    def stop(self) -> None:
        """End a run in progress after its current batch."""
        self._stopped.set()

    def run(self) -> int | None:
        """One run: the number of alarms deleted, None when another server holds the lease."""
        started = self.clock.now_ms()
        if not self.lease.take(PURGE_JOB, self.owner, started, started + self.lease_ms):
            return None
        overrides = self.purger.retention_overrides()
        self._forget_if_shortened(overrides)
        classes = sorted({self.retention_days, *overrides.values()}, reverse=True)
        self._read = {key: at for key, at in self._read.items() if key[1] in classes}
        passes = [_StatusPass(status, classes) for status in FINISHED]
        # Every row past its own application's cutoff goes, whichever class reads it.
        cutoffs = {name: _cutoff(started, days) for name, days in overrides.items()}
        default_cutoff = _cutoff(started, self.retention_days)
        deleted = 0
        while passes and not self._out_of_time(started):
            for one in list(passes):
                before = self.clock.now_ms()
                gone, more = self._next_batch(one, started, cutoffs, default_cutoff)
                deleted += gone
                if not more:
                    passes.remove(one)
                took_ms = self.clock.now_ms() - before
                if self.rest_ratio > 0 and took_ms > 0:
                    self.clock.wait(self._stopped, int(took_ms * self.rest_ratio))
                if self._out_of_time(started):
                    break
        if deleted:
            seconds = (self.clock.now_ms() - started) / 1000
            left = " (more left for the next run)" if passes else ""
            log.info(
                "purged %d finished alarms past their retention in %.1f s%s",
                deleted,
                seconds,
                left,
                extra={"action": "alarms_purged", "purged": deleted},
            )
        return deleted

    def _next_batch(
        self, one: _StatusPass, now_ms: int, cutoffs: dict[str, int], default_cutoff: int
    ) -> tuple[int, bool]:
        """Read and delete one batch of `one`'s current class: (deleted, more to do)."""
        days = one.classes[one.index]
        cutoff = _cutoff(now_ms, days)
        key = (one.status, days)
        if one.position is None:
            one.position = max(self._read.get(key, _START), one.floor)
        batch = self.purger.purge_batch(
            one.status, one.position, cutoff, self.batch, cutoffs, default_cutoff
        )
        if batch.deleted:
            self.metrics.purged.inc(batch.deleted)
        if batch.read == self.batch and batch.last is not None:
            one.position = batch.last
            self._read[key] = one.position
            return batch.deleted, True
        # Read up to the cutoff: nothing of this class or a shorter one is left below it.
        self._read[key] = one.floor = (cutoff, 0)
        one.index += 1
        one.position = None
        return batch.deleted, one.index < len(one.classes)

    def _forget_if_shortened(self, overrides: dict[str, float]) -> None:
        default = self.retention_days
        for name in self._overrides.keys() | overrides.keys():
            if overrides.get(name, default) < self._overrides.get(name, default):
                self._read.clear()
                break
        self._overrides = overrides

    def _out_of_time(self, started_ms: int) -> bool:
        return self._stopped.is_set() or self.clock.now_ms() - started_ms >= self.budget_ms


def _cutoff(now_ms: int, days: float) -> int:
    """Alarms that finished before this are past a retention of `days`."""
    return now_ms - int(days * DAY_MS)


class _StatusPass:
    """Where one status's part of a run stands: which class, and where its reading is."""

    def __init__(self, status: str, classes: list[float]) -> None:
        self.status = status
        self.classes = classes  # retention days, longest first
        self.index = 0
        self.position: Position | None = None  # None: the class has not started
        self.floor: Position = _START  # where the longer class before stopped, this run
