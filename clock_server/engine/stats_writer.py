"""Writing a process's per-minute statistics to the shared table every few seconds, and at
shutdown; used by the engine's process and by each web process alike."""

from __future__ import annotations

import logging

from clock_server.engine.loop import StepLoop, Waker
from clock_server.errors import Unavailable
from clock_server.minute_stats import MinuteTally
from clock_server.store.ports import MinuteStatsSink
from clock_server.timesource import Clock

log = logging.getLogger(__name__)

FLUSH_S = 5.0


class StatsWriter:
    """Takes what `tally` counted and adds it to the shared rows, one upsert per (minute,
    application); a write the database refused gives its counts back to the tally, to go
    with the next one (the tally bounds what it keeps).

    `run_once` writes once; `start` runs it every `interval_s` in a thread, `stop` ends the
    thread and writes what is left."""

    def __init__(
        self, tally: MinuteTally, sink: MinuteStatsSink, clock: Clock, interval_s: float = FLUSH_S
    ) -> None:
        self.tally = tally
        self.sink = sink
        self.interval_s = interval_s
        self._loop = StepLoop("clock-stats-writer", self.run_once, Waker(clock), idle_s=interval_s)
        self._failing = False

    def run_once(self) -> float:
        """Write what was counted since the last write; seconds until the next."""
        taken = self.tally.take()
        if not taken:
            return self.interval_s
        try:
            self.sink.add(taken)
        except Unavailable as error:
            dropped = self.tally.give_back(taken)
            if not self._failing or dropped:
                log.warning(
                    "could not write the per-minute statistics: %s; kept for the next write%s",
                    error,
                    f" ({dropped} oldest entries dropped)" if dropped else "",
                    extra={"action": "stats_write_failed"},
                )
            self._failing = True
            return self.interval_s
        self._failing = False
        return self.interval_s

    def start(self) -> None:
        self._loop.start()

    def stop(self, timeout_s: float = 2.0) -> None:
        """End the thread, then write what is left once."""
        self._loop.stop()
        self._loop.join(timeout_s)
        try:
            self.run_once()
        except Exception:
            log.exception(
                "could not write the per-minute statistics at shutdown",
                extra={"action": "stats_write_failed"},
            )
