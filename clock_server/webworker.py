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
from types import FrameType

from clock_server.ipc import BrokerStatusFile, PipeNotifier

log = logging.getLogger(__name__)

PARENT_CHECK_S = 0.5


def main() -> int:
    from clock_server.cli import configure_logging
    from clock_server.engine import wake_horizon_ms
    from clock_server.server import build_web, create_http_server, freeze_startup_objects
    from clock_server.settings import Settings
    from clock_server.timesource import SystemClock

    settings = Settings.from_env(migrate_on_start=False)
    configure_logging(settings.log_level)
    # Not os.getppid(): the supervisor may already be gone, and then that is init.
    _exit_with_parent(int(os.environ["CLOCK_WORKER_SUPERVISOR_PID"]))
    # When the machine is saturated, the engine process (ringing on time) goes first.
    os.nice(settings.web_nice)
    listener = socket.socket(fileno=int(os.environ["CLOCK_WORKER_LISTEN_FD"]))
    notifier = PipeNotifier(
        int(os.environ["CLOCK_WORKER_NOTIFY_FD"]), wake_horizon_ms(settings), SystemClock()
    )
    broker = BrokerStatusFile(Path(os.environ["CLOCK_WORKER_STATUS_FILE"]))
    app, store = build_web(settings, notifier=notifier, broker=broker)
    server = create_http_server(app, settings, sockets=[listener])
    freeze_startup_objects()

    def handle(_signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides; Ctrl-C reaches it
    server.run()
    server.close()
    store.engine.dispose()
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
