"""Process-wide set-up that only an entry point does: the garbage collector (logging is in
logs.py)."""

from __future__ import annotations

import gc


def freeze_startup_objects() -> None:
    """Keep what start-up built out of the garbage collector's full passes.

    Modules, Flask, SQLAlchemy's metadata and the like are about 100,000 objects that live as
    long as the process. A full collection walked them all holding the interpreter lock for
    50-75 ms, the worst lateness of a steady run; frozen, they are never walked again.
    """
    gc.collect()
    gc.freeze()
