"""SIGTERM and SIGINT: the first asks for a shutdown under one deadline, a second exits at once."""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

from clock_server.deadline import Deadline

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGINT)
# How long past the deadline the process may live before the backstop ends it.
BACKSTOP_GRACE_S = 1.0


class ShutdownSignals:
    """While entered, the first SIGTERM or SIGINT starts the shutdown deadline and calls
    `on_first` (in the main thread, where a signal handler runs); a second one exits at once.
    Should the shutdown outlast its deadline by BACKSTOP_GRACE_S, the process exits anyway.
    Leaving restores the handlers that were there before."""

    def __init__(
        self,
        timeout_s: float,
        on_first: Callable[[], None],
        signals: tuple[signal.Signals, ...] = SIGNALS,
    ) -> None:
        self.timeout_s = timeout_s
        self.on_first = on_first
        self.signals = signals
        self.deadline: Deadline | None = None
        self._previous: dict[int, Any] = {}
        self._backstop: threading.Timer | None = None

    def __enter__(self) -> ShutdownSignals:
        for signum in self.signals:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
        if self._backstop is not None:
            self._backstop.cancel()

    def deadline_or_new(self) -> Deadline:
        """The deadline a signal started, or a new one when the shutdown began otherwise."""
        if self.deadline is None:
            self.deadline = Deadline(self.timeout_s)
        return self.deadline

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.deadline is not None:
            log.warning("second %s: exiting now", name, extra={"action": "shutdown_forced"})
            os._exit(1)
        self.deadline = Deadline(self.timeout_s)
        log.info("%s received: stopping within %g s", name, self.timeout_s,
                 extra={"action": "shutdown_requested"})  # fmt: skip
        self._backstop = threading.Timer(self.timeout_s + BACKSTOP_GRACE_S, _exit_late,
                                         args=(self.timeout_s,))  # fmt: skip
        self._backstop.daemon = True
        self._backstop.start()
        self.on_first()


def _exit_late(timeout_s: float) -> None:
    log.error("shutdown took longer than CLOCK_SHUTDOWN_TIMEOUT_S=%g s: exiting now", timeout_s,
              extra={"action": "shutdown_late"})  # fmt: skip
    os._exit(1)
