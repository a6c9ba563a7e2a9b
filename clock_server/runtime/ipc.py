"""How web worker processes talk to the engine process: due-time wake-ups over a pipe, and the
broker's health and the engine's loops through a small status file."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import struct
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from clock_server.timesource import Clock

log = logging.getLogger(__name__)

_DUE = struct.Struct("<q")
STATUS_MAX_AGE_MS = 5_000  # the broker's health older than this counts as down
# The status file's own entry among the loops of /livez: the engine process's loop that
# refreshes it twice a second.
STATUS_LOOP = "engine-status"


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


class EngineStatusFile:
    """The engine process writes what the web workers cannot see themselves: the broker's
    health, for /healthz, and until when each engine loop is known to be well, for /livez.
    Each write replaces the file whole, stamped with the time it was written."""

    def __init__(self, path: Path, clock: Clock) -> None:
        self.path = path
        self.clock = clock

    def write(self, healthy: bool, loops: Mapping[str, int | None]) -> None:
        status = {"broker": "ok" if healthy else "down", "written_ms": self.clock.now_ms()}
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps({**status, "loops": dict(loops)}))
        os.replace(temporary, self.path)

    def is_healthy(self) -> bool:
        """True when the engine process reported a healthy broker within the last seconds."""
        status = self._read()
        if status is None or status.get("broker") != "ok":
            return False
        return bool(self.clock.now_ms() - status["written_ms"] < STATUS_MAX_AGE_MS)

    def loop_beats(self) -> dict[str, int | None]:
        """The engine's loops as last written, and the file's own write time as the loop
        STATUS_LOOP (None when there is no readable file): a file that is not refreshed
        any more says the engine process is stuck or gone."""
        status = self._read()
        if status is None:
            return {STATUS_LOOP: None}
        return {STATUS_LOOP: status["written_ms"], **status["loops"]}

    def _read(self) -> dict[str, Any] | None:
        try:
            status = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        return status if isinstance(status, dict) and "written_ms" in status else None
