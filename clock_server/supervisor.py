"""Several web worker processes beside one engine process, under one `clock-server` command.

Python threads share one interpreter lock, so a burst of HTTP requests can delay the ring
thread and one process serves about a thousand creates a second. With CLOCK_WEB_PROCESSES > 1
this process keeps the engine (claims, ring, broker) and starts that many web workers, each
on its own listening socket of the same port (SO_REUSEPORT, so that the kernel spreads new
connections over them; one shared socket elsewhere); workers wake the engine through a pipe and
read the broker's health from a status file.
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
        listeners = listening_sockets(
            self.settings.host, self.settings.port, self.settings.web_processes
        )
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        try:
            runtime.start()
            if runtime.engine is not None:
                NotifyListener(read_fd, runtime.engine.notify_due).start()
            self.status.write(False)
            self.workers = [self._spawn(listener, write_fd) for listener in listeners]
            self._install_signal_handlers()
            log.info("serving on http://%s:%s with %d web processes", self.settings.host,
                     listeners[0].getsockname()[1], len(self.workers),
                     extra={"action": "server_ready"})  # fmt: skip
            self._watch(runtime, listeners, write_fd)
        finally:
            self._stop_workers()
            for listener in listeners:
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

    def _watch(self, runtime, listeners: list[socket.socket], write_fd: int) -> None:  # type: ignore[no-untyped-def]
        while not self._stopping.wait(STATUS_INTERVAL_S):
            healthy = runtime.publisher.is_healthy() if runtime.publisher is not None else True
            self.status.write(healthy)
            for index, worker in enumerate(self.workers):
                if worker.poll() is not None:
                    forget_process(worker.pid)
                    log.error("web worker %d exited with %s; starting another", worker.pid,
                              worker.returncode, extra={"action": "worker_restarted"})  # fmt: skip
                    # its socket, and the connections waiting in it, go to its successor
                    self.workers[index] = self._spawn(listeners[index], write_fd)

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


def listening_sockets(host: str, port: int, count: int) -> list[socket.socket]:
    """`count` sockets listening on one port, one per web worker.

    A single shared socket would let whichever worker wakes first accept a whole wave of
    keep-alive connections (seen: 64 of 64 on one of three workers). On Linux each worker gets
    its own socket with SO_REUSEPORT and the kernel spreads connections by their addresses;
    elsewhere they share one.
    """
    if not (sys.platform == "linux" and hasattr(socket, "SO_REUSEPORT")):
        shared = socket.create_server((host, port), backlog=2048)
        return [shared] * count
    # Bound first without SO_REUSEPORT, so that a port another server holds (this one started
    # twice, say) is refused here as "address in use" instead of quietly shared with it.
    with socket.create_server((host, port)) as probe:
        port = probe.getsockname()[1]  # port 0 means one free port, the same for all
    return [socket.create_server((host, port), backlog=2048, reuse_port=True) for _ in range(count)]
