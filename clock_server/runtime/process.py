"""Process-wide set-up that only an entry point does: logging, the garbage collector, and how
often the interpreter lock changes hands."""

from __future__ import annotations

import gc
import logging
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clock_server.runtime.build import Runtime


def configure_logging(level: str) -> None:
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)s %(name)s [%(threadName)s] %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("pika").setLevel(logging.WARNING)
    logging.getLogger("alembic").setLevel(logging.WARNING)
    logging.getLogger("apscheduler").setLevel(logging.WARNING)


def freeze_startup_objects() -> None:
    """Keep what start-up built out of the garbage collector's full passes.

    Modules, Flask, SQLAlchemy's metadata and the like are about 100,000 objects that live as
    long as the process. A full collection walked them all holding the interpreter lock for
    50-75 ms, the worst lateness of a steady run; frozen, they are never walked again.
    """
    gc.collect()
    gc.freeze()


class SwitchInterval:
    """Called with whether the engine is contended: while it is, a thread waiting for the
    interpreter lock gets it after `contended_s` instead of Python's 5 ms.

    Beside a backlog's drain, the express lanes and the express connection's IO thread, which
    carry the other applications' few alarms, each wait for the lock behind the backlog's
    busy threads, 5 ms at a time, after every wake-up (finding 47). Handing it over more often
    costs a drain a few percent, so only while a backlog drains beside other applications'
    alarms; a drain alone keeps the default.
    """

    def __init__(self, contended_s: float = 0.0005) -> None:
        self.contended_s = contended_s
        self.default_s = sys.getswitchinterval()
        self.contended = False

    def __call__(self, contended: bool) -> None:
        if contended != self.contended:
            self.contended = contended
            sys.setswitchinterval(self.contended_s if contended else self.default_s)


def switch_often_when_contended(runtime: Runtime) -> None:
    """Let the engine's ring loop shorten the switch interval beside a backlog."""
    if runtime.engine is not None:
        runtime.engine.ringer.on_contention = SwitchInterval()
