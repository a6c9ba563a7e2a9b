"""SIGTERM and SIGINT: the first asks for a shutdown under one deadline, a second exits at once.
SIGHUP asks for the tokens to be read again, and never ends the process."""

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
    Should the process outlive its deadline by BACKSTOP_GRACE_S, it exits anyway. Leaving
    restores the handlers that were there before."""

    def __init__(
        self,
        timeout_s: float,
        on_first: Callable[[], None],
        signals: tuple[signal.Signals, ...] = SIGNALS,
        exit_now: Callable[[int], object] = os._exit,
    ) -> None:
        self.timeout_s = timeout_s
        self.on_first = on_first
        self.signals = signals
        self.exit_now = exit_now
        self.deadline: Deadline | None = None
        self._previous: dict[int, Any] = {}
        self._backstop: threading.Timer | None = None

    def __enter__(self) -> ShutdownSignals:
        for signum in self.signals:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        # The backstop stays armed: what is left of the exit (joining a ring lane's thread
        # that still waits on the database, say) must not outlast the deadline either.
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def deadline_or_new(self) -> Deadline:
        """The deadline a signal started, or a new one when the shutdown began otherwise."""
        if self.deadline is None:
            self.deadline = Deadline(self.timeout_s)
        return self.deadline

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.deadline is not None:
            log.warning("second %s: exiting now", name, extra={"action": "shutdown_forced"})
            self.exit_now(1)
            return
        self.deadline = Deadline(self.timeout_s)
        log.info("%s received: stopping within %g s", name, self.timeout_s,
                 extra={"action": "shutdown_requested"})  # fmt: skip
        self._backstop = threading.Timer(self.timeout_s + BACKSTOP_GRACE_S, self._exit_late)
        self._backstop.daemon = True
        self._backstop.start()
        self.on_first()

    def _exit_late(self) -> None:
        log.error("shutdown took longer than CLOCK_SHUTDOWN_TIMEOUT_S=%g s: exiting now",
                  self.timeout_s, extra={"action": "shutdown_late"})  # fmt: skip
        self.exit_now(1)


class ReloadSignal:
    """While entered, SIGHUP calls `on_reload` (in the main thread, where a signal handler
    runs: it should only wake something) instead of ending the process. Leaving restores the
    handler that was there before."""

    def __init__(self, on_reload: Callable[[], None]) -> None:
        self.on_reload = on_reload
        self._previous: Any = None

    def __enter__(self) -> ReloadSignal:
        self._previous = signal.signal(signal.SIGHUP, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.signal(signal.SIGHUP, self._previous)

    def _handle(self, _signum: int, _frame: FrameType | None) -> None:
        self.on_reload()
