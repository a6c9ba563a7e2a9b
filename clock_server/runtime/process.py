"""Process-wide set-up that only an entry point does: the garbage collector, and a child's
watch on its supervisor (logging is in logs.py)."""

from __future__ import annotations

import gc
import logging
import os
import signal
import threading
import time

log = logging.getLogger(__name__)

PARENT_CHECK_S = 0.5


def freeze_startup_objects() -> None:
    """Keep what start-up built out of the garbage collector's full passes.

    Modules, Flask, SQLAlchemy's metadata and the like are about 100,000 objects that live as
    long as the process. A full collection walked them all holding the interpreter lock for
    50-75 ms, the worst lateness of a steady run; frozen, they are never walked again.
    """
    gc.collect()
    gc.freeze()


def exit_with_parent(parent_pid: int) -> None:
    """A supervisor killed with SIGKILL cannot stop its children: they notice and stop.
    Not os.getppid() as the parent: the supervisor may already be gone, and then that is
    init."""

    def watch() -> None:
        while os.getppid() == parent_pid:
            time.sleep(PARENT_CHECK_S)
        log.warning("the supervisor %d is gone; stopping", parent_pid,
                    extra={"action": "worker_orphaned"})  # fmt: skip
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="clock-parent-watch", daemon=True).start()
