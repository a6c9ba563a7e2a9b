"""The schedules' planner in a process of its own, started by the supervisor beside the web
workers when CLOCK_WEB_PROCESSES > 1.

A planner's pass costs about 200 µs of the interpreter per occurrence. In the engine's
process it held the lock the ring path's threads need, and at 1,667 occurrences a second
they rang several times as late as one-off alarms at that rate; on a thread of a web worker
it still shared that worker's interpreter with the API. Here it shares none, and runs niced
like the API, so the engine goes first when the machine is full. It plans under the job's
lease, as the engine's maintenance does with one process, and wakes the engine through the
workers' pipe for what it makes inside the preloaded window.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading

from clock_server.engine.alarm_engine import wake_horizon_ms
from clock_server.engine.stats_writer import StatsWriter
from clock_server.metrics import Metrics
from clock_server.runtime.build import build_planner
from clock_server.runtime.ipc import PipeNotifier
from clock_server.runtime.logs import configure_logging
from clock_server.runtime.planner_thread import PlannerThread
from clock_server.runtime.process import exit_with_parent, freeze_startup_objects
from clock_server.runtime.signals import ShutdownSignals
from clock_server.settings import Settings
from clock_server.store.alarms import AlarmStore
from clock_server.store.db import open_database
from clock_server.store.minute_stats import SqlMinuteStats
from clock_server.timesource import SystemClock

log = logging.getLogger(__name__)

REPORT_INTERVAL_S = 1.0  # how often its CPU and memory are written into the metrics
POOL_SIZE = 2  # a pass, and the statistics' writes


def main() -> int:
    settings = Settings.from_env(migrate_on_start=False)
    configure_logging(settings.log_level, settings.log_format)
    exit_with_parent(int(os.environ["CLOCK_WORKER_SUPERVISOR_PID"]))
    os.nice(settings.web_nice)
    clock = SystemClock()
    notifier = PipeNotifier(
        int(os.environ["CLOCK_WORKER_NOTIFY_FD"]), wake_horizon_ms(settings), clock
    )
    store = AlarmStore(open_database(settings.database_url, POOL_SIZE))
    metrics = Metrics()
    owner = f"{settings.instance_id}/planner-{os.getpid()}"
    planner = PlannerThread(
        build_planner(settings, store, clock, metrics, notifier.notify_due, owner),
        clock,
        on_error=lambda: metrics.loop_error("schedule_planner"),
    )
    stats = StatsWriter(metrics.minutes, SqlMinuteStats(store), clock)  # the occurrences made
    freeze_startup_objects()
    stopping = threading.Event()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides; Ctrl-C reaches it
    with ShutdownSignals(settings.shutdown_timeout_s, stopping.set, (signal.SIGTERM,)) as signals:
        stats.start()
        planner.start()
        log.info("schedule planner started as %s", owner, extra={"action": "planner_started"})
        while not stopping.wait(REPORT_INTERVAL_S):
            metrics.record_process("planner")
        planner.stop(signals.deadline_or_new().remaining_s())
        stats.stop(min(signals.deadline_or_new().remaining_s(), 1.0))
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
