"""A web worker process started by the supervisor: the HTTP API on an inherited socket."""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from clock_server.api.tokens import LiveTokens, load_tokens
from clock_server.engine.alarm_engine import wake_horizon_ms
from clock_server.runtime.build import build_planner, build_web
from clock_server.runtime.http_server import create_http_server, stop_requests_by
from clock_server.runtime.ipc import EngineStatusFile, PipeNotifier
from clock_server.runtime.logs import configure_logging
from clock_server.runtime.planner_thread import PlannerThread
from clock_server.runtime.process import freeze_startup_objects
from clock_server.runtime.signals import ReloadSignal, ShutdownSignals
from clock_server.runtime.token_reload import TokenReloads
from clock_server.settings import Settings
from clock_server.timesource import SystemClock

log = logging.getLogger(__name__)

PARENT_CHECK_S = 0.5


def main() -> int:
    settings = Settings.from_env(migrate_on_start=False)
    configure_logging(settings.log_level, settings.log_format)
    # Not os.getppid(): the supervisor may already be gone, and then that is init.
    _exit_with_parent(int(os.environ["CLOCK_WORKER_SUPERVISOR_PID"]))
    # When the machine is saturated, the engine process (ringing on time) goes first.
    os.nice(settings.web_nice)
    listener = socket.socket(fileno=int(os.environ["CLOCK_WORKER_LISTEN_FD"]))
    clock = SystemClock()
    notifier = PipeNotifier(
        int(os.environ["CLOCK_WORKER_NOTIFY_FD"]), wake_horizon_ms(settings), clock
    )
    status = EngineStatusFile(Path(os.environ["CLOCK_WORKER_STATUS_FILE"]), clock)
    tokens = LiveTokens(load_tokens(settings.tokens, settings.tokens_file))
    reloads = TokenReloads(settings.tokens_file, tokens)
    app, store, stats, metrics = build_web(
        settings, notifier=notifier, broker=status, loops=status, tokens=tokens
    )
    server = create_http_server(app, settings, sockets=[listener])
    owner = f"{settings.instance_id}/web-{os.getpid()}"  # one lease holder per worker
    plans = build_planner(settings, store, clock, metrics, notifier.notify_due, owner)
    planner = PlannerThread(plans, clock, on_error=lambda: metrics.loop_error("schedule_planner"))
    freeze_startup_objects()

    def on_first() -> None:
        stop_requests_by(server, signals.deadline_or_new())
        raise SystemExit(0)

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides; Ctrl-C reaches it
    with (
        ShutdownSignals(settings.shutdown_timeout_s, on_first, (signal.SIGTERM,)) as signals,
        ReloadSignal(reloads.request),
    ):
        # The supervisor starts a worker with SIGHUP blocked, so that one sent before this
        # point waits for the handler instead of ending the process.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})
        reloads.start()
        stats.start()
        planner.start()
        server.run()  # returns once SIGTERM has ended its loop and its requests
        planner.stop(signals.deadline_or_new().remaining_s())
        reloads.stop()
        server.close()
        stats.stop()
        store.close()
    return 0


def _exit_with_parent(parent_pid: int) -> None:
    """A supervisor killed with SIGKILL cannot stop its workers: they notice and stop."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_CHECK_S)
        log.warning("the supervisor %d is gone; stopping", parent_pid,
                    extra={"action": "worker_orphaned"})  # fmt: skip
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="clock-parent-watch", daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
