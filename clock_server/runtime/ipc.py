"""How web worker processes talk to the engine process: due-time wake-ups over a pipe, and the
broker's health through a small status file."""

from __future__ import annotations

import contextlib
import logging
import os
import struct
import threading
import time
from collections.abc import Callable
from pathlib import Path

from clock_server.timesource import Clock

log = logging.getLogger(__name__)

_DUE = struct.Struct("<q")
STATUS_MAX_AGE_S = 5.0


class PipeNotifier:
    """Worker side: tells the engine process that an alarm falls due at `due_ms`.

    Only alarms due within `horizon_ms` are sent: the preloader's next regular pass claims the
    rest in time, and every write wakes a thread in the engine's process. Writes of 8 bytes to
    a pipe are atomic; when the pipe is full the wake-up is dropped, which only means the alarm
    waits for that regular pass.
    """

    def __init__(self, write_fd: int, horizon_ms: int, clock: Clock) -> None:
        self.write_fd = write_fd
        self.horizon_ms = horizon_ms
        self.clock = clock

    def notify_due(self, due_ms: int) -> None:
        if due_ms > self.clock.now_ms() + self.horizon_ms:
            return
        with contextlib.suppress(BlockingIOError):
            os.write(self.write_fd, _DUE.pack(due_ms))


class NotifyListener:
    """Engine side: reads wake-ups from the pipe and hands the earliest of each read on."""

    def __init__(self, read_fd: int, notify_due: Callable[[int], None]) -> None:
        self.read_fd = read_fd
        self.notify_due = notify_due
        self._thread = threading.Thread(target=self._run, name="clock-notify", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout_s: float) -> bool:
        """Wait for the listener to end (the pipe closed and drained); True when it did."""
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def _run(self) -> None:
        pending = b""
        while True:
            try:
                chunk = os.read(self.read_fd, _DUE.size * 1024)
            except OSError:
                return
            if not chunk:
                return
            pending += chunk
            whole = len(pending) - len(pending) % _DUE.size
            if whole:
                self.notify_due(min(value for (value,) in _DUE.iter_unpack(pending[:whole])))
                pending = pending[whole:]


class BrokerStatusFile:
    """Engine side writes the publisher's health; workers read it for /healthz."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, healthy: bool) -> None:
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text("ok" if healthy else "down")
        os.replace(temporary, self.path)

    def is_healthy(self) -> bool:
        """True when the engine process reported a healthy broker within the last seconds."""
        try:
            fresh = time.time() - self.path.stat().st_mtime < STATUS_MAX_AGE_S
            return fresh and self.path.read_text() == "ok"
        except OSError:
            return False
