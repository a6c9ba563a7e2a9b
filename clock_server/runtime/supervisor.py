"""Several web worker processes beside one engine process, under one `clock-server` command.

Python threads share one interpreter lock, so a burst of HTTP requests can delay the ring
thread and one process serves about a thousand creates a second. With CLOCK_WEB_PROCESSES > 1
this process keeps the engine (claims, ring, broker) and starts that many web workers, each
on its own listening socket of the same port (SO_REUSEPORT, so that the kernel spreads new
connections over them; one shared socket elsewhere); workers wake the engine through a pipe and
read the broker's health and the engine's loops from a status file. SIGHUP is passed on to
the workers, each of which reads CLOCK_TOKENS_FILE again (token_reload).
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

from clock_server.deadline import Deadline
from clock_server.metrics import forget_process
from clock_server.runtime.build import Runtime, build
from clock_server.runtime.ipc import EngineStatusFile, NotifyListener
from clock_server.runtime.process import freeze_startup_objects
from clock_server.runtime.signals import ShutdownSignals
from clock_server.runtime.sockets import listening_sockets
from clock_server.settings import Settings
from clock_server.timesource import SystemClock

log = logging.getLogger(__name__)

STATUS_INTERVAL_S = 0.5


class Supervisor:
    """Starts the engine and the web workers, restarts a worker that dies, stops everything."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.workdir = Path(tempfile.mkdtemp(prefix="clock-"))
        self.status = EngineStatusFile(self.workdir / "status", SystemClock())
        self.workers: list[subprocess.Popen[bytes]] = []
        self._stopping = threading.Event()

    def run(self) -> None:
        runtime = build(self.settings, serve_http=False)
        freeze_startup_objects()
        listeners = listening_sockets(
            self.settings.host, self.settings.port, self.settings.web_processes
        )
        read_fd, write_fd = os.pipe()
        os.set_blocking(write_fd, False)
        signals = ShutdownSignals(self.settings.shutdown_timeout_s, self._stopping.set)
        with signals:
            try:
                runtime.start()
                if runtime.engine is not None:
                    NotifyListener(read_fd, runtime.engine.notify_due).start()
                self._report(runtime)
                self.workers = [self._spawn(listener, write_fd) for listener in listeners]
                log.info("serving on http://%s:%s with %d web processes", self.settings.host,
                         listeners[0].getsockname()[1], len(self.workers),
                         extra={"action": "server_ready"})  # fmt: skip
                self._watch(runtime, listeners, write_fd)
            finally:
                self._stop(runtime, signals.deadline_or_new(), listeners, write_fd)

    def _stop(
        self, runtime: Runtime, deadline: Deadline, listeners: list[socket.socket], write_fd: int
    ) -> None:
        """The workers drain their requests while the engine stops; all by `deadline`."""
        for worker in self.workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
        runtime.stop(deadline)
        for worker in self.workers:
            try:
                worker.wait(deadline.remaining_s())
            except subprocess.TimeoutExpired:
                log.error("web worker %d did not stop in time; killing it", worker.pid,
                          extra={"action": "worker_killed"})  # fmt: skip
                worker.kill()
                worker.wait()
        for listener in listeners:
            listener.close()
        os.close(write_fd)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def reload_tokens(self) -> None:
        """SIGHUP: each web worker reads the tokens again (the engine process serves none).
        Only sends signals: safe in a signal handler."""
        for worker in self.workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGHUP)

    def _spawn(self, listener: socket.socket, write_fd: int) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "CLOCK_WORKER_LISTEN_FD": str(listener.fileno()),
            "CLOCK_WORKER_NOTIFY_FD": str(write_fd),
            "CLOCK_WORKER_STATUS_FILE": str(self.status.path),
            "CLOCK_WORKER_SUPERVISOR_PID": str(os.getpid()),
        }
        # Blocked until the worker has its SIGHUP handler: a reload asked meanwhile waits.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
        try:
            return subprocess.Popen(
                [sys.executable, "-m", "clock_server.runtime.web_process"],
                env=env,
                pass_fds=(listener.fileno(), write_fd),
            )
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def _report(self, runtime: Runtime) -> None:
        """Refresh the status file the workers read for /healthz and /livez, and this
        process's CPU and memory in the metrics they serve."""
        healthy = runtime.publisher.is_healthy() if runtime.publisher is not None else True
        runtime.maintenance.metrics.record_process("supervisor")
        loops = runtime.engine.loop_beats() if runtime.engine is not None else {}
        self.status.write(healthy, loops)

    def _watch(self, runtime: Runtime, listeners: list[socket.socket], write_fd: int) -> None:
        while not self._stopping.wait(STATUS_INTERVAL_S):
            self._report(runtime)
            for index, worker in enumerate(self.workers):
                if worker.poll() is not None:
                    forget_process(worker.pid)
                    log.error("web worker %d exited with %s; starting another", worker.pid,
                              worker.returncode, extra={"action": "worker_restarted"})  # fmt: skip
                    # its socket, and the connections waiting in it, go to its successor
                    self.workers[index] = self._spawn(listeners[index], write_fd)
