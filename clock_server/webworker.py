"""A web worker process started by the supervisor: the HTTP API on an inherited socket."""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
from pathlib import Path
from types import FrameType

from clock_server.ipc import BrokerStatusFile, PipeNotifier

log = logging.getLogger(__name__)


def main() -> int:
    from clock_server.cli import configure_logging
    from clock_server.server import build_web, create_http_server
    from clock_server.settings import Settings

    settings = Settings.from_env(migrate_on_start=False)
    configure_logging(settings.log_level)
    # When the machine is saturated, the engine process (ringing on time) goes first.
    os.nice(settings.web_nice)
    listener = socket.socket(fileno=int(os.environ["CLOCK_WORKER_LISTEN_FD"]))
    notifier = PipeNotifier(int(os.environ["CLOCK_WORKER_NOTIFY_FD"]))
    broker = BrokerStatusFile(Path(os.environ["CLOCK_WORKER_STATUS_FILE"]))
    app, store = build_web(settings, notifier=notifier, broker=broker)
    server = create_http_server(app, settings, sockets=[listener])

    def handle(_signum: int, _frame: FrameType | None) -> None:
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides; Ctrl-C reaches it
    server.run()
    server.close()
    store.engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
