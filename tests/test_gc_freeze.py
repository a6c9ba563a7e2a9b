"""Start-up objects are kept out of the garbage collector's full passes."""

from __future__ import annotations

import gc

from clock_server.runtime.process import freeze_startup_objects


def test_objects_alive_at_start_up_are_frozen_and_later_ones_are_not() -> None:
    survivor = {"kept": ["by", "the", "process"]}
    try:
        freeze_startup_objects()
        frozen = gc.get_freeze_count()
        later = [[index] for index in range(1_000)]
        collected = {id(obj) for obj in gc.get_objects()}  # what full passes walk
        assert frozen > 0
        assert id(survivor) not in collected
        assert id(later) in collected and id(later[0]) in collected
    finally:
        gc.unfreeze()
    assert gc.get_freeze_count() == 0
