"""Several web worker processes beside one engine process, under one `clock-server` command.

Python threads share one interpreter lock, so a burst of HTTP requests can delay the ring
thread and one process serves about a thousand creates a second. With CLOCK_WEB_PROCESSES > 1
this process keeps the engine (claims, ring, broker) and starts that many web workers on a
shared listening socket; workers wake the engine through a pipe and read the broker's health
from a status file.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from types import FrameType

from clock_server.ipc import BrokerStatusFile, NotifyListener
from clock_server.metrics import forget_process
from clock_server.settings import Settings

log = logging.getLogger(__name__)

STATUS_INTERVAL_S = 0.5


class Supervisor:
    """Starts the engine and the web workers, restarts a worker that dies, stops everything."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.workdir = Path(tempfile.mkdtemp(prefix="clock-"))
        self.status = BrokerStatusFile(self.workdir / "broker")
        self.workers: list[subprocess.Popen[bytes]] = []
        self._stopping = threading.Event()

    def run(self) -> None:
        from clock_server.server import build, freeze_startup_objects

        runtime = build(self.settings, serve_http=False)
        freeze_startup_objects()
        listener = socket.create_server((self.settings.host, self.settings.port), backlog=2048)
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        try:
            runtime.start()
            if runtime.engine is not None:
                NotifyListener(read_fd, runtime.engine.notify_due).start()
            self.status.write(False)
            self.workers = [
                self._spawn(listener, write_fd) for _ in range(self.settings.web_processes)
            ]
            self._install_signal_handlers()
            log.info("serving on http://%s:%s with %d web processes", self.settings.host,
                     listener.getsockname()[1], len(self.workers),
                     extra={"action": "server_ready"})  # fmt: skip
            self._watch(runtime, listener, write_fd)
        finally:
            self._stop_workers()
            listener.close()
            runtime.stop()
            os.close(write_fd)
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _spawn(self, listener: socket.socket, write_fd: int) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "CLOCK_WORKER_LISTEN_FD": str(listener.fileno()),
            "CLOCK_WORKER_NOTIFY_FD": str(write_fd),
            "CLOCK_WORKER_STATUS_FILE": str(self.status.path),
            "CLOCK_WORKER_SUPERVISOR_PID": str(os.getpid()),
        }
        return subprocess.Popen(
            [sys.executable, "-m", "clock_server.webworker"],
            env=env,
            pass_fds=(listener.fileno(), write_fd),
        )

    def _watch(self, runtime, listener: socket.socket, write_fd: int) -> None:  # type: ignore[no-untyped-def]
        while not self._stopping.wait(STATUS_INTERVAL_S):
            healthy = runtime.publisher.is_healthy() if runtime.publisher is not None else True
            self.status.write(healthy)
            for index, worker in enumerate(self.workers):
                if worker.poll() is not None:
                    forget_process(worker.pid)
                    log.error("web worker %d exited with %s; starting another", worker.pid,
                              worker.returncode, extra={"action": "worker_restarted"})  # fmt: skip
                    self.workers[index] = self._spawn(listener, write_fd)

    def _stop_workers(self) -> None:
        for worker in self.workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
        for worker in self.workers:
            try:
                worker.wait(self.settings.shutdown_timeout_s)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait(5)

    def _install_signal_handlers(self) -> None:
        def handle(signum: int, _frame: FrameType | None) -> None:
            if self._stopping.is_set():
                log.warning("second %s: exiting now", signal.Signals(signum).name)
                os._exit(1)
            log.info("%s received: stopping", signal.Signals(signum).name,
                     extra={"action": "shutdown_requested"})  # fmt: skip
            self._stopping.set()

        signal.signal(signal.SIGTERM, handle)
        signal.signal(signal.SIGINT, handle)
