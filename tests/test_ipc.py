"""Wake-ups over the pipe between processes, and the engine process's status file."""

from __future__ import annotations

import os
import struct
import threading
import time
from pathlib import Path

import pytest

from clock_server.runtime.ipc import (
    STATUS_LOOP,
    STATUS_MAX_AGE_MS,
    EngineStatusFile,
    NotifyListener,
    PipeNotifier,
)
from clock_server.testing import SettableClock

NOW_MS = 1_700_000_000_000
HORIZON_MS = 1_500


def test_wake_ups_cross_the_pipe():
    read_fd, write_fd = os.pipe()
    seen: list[int] = []
    arrived = threading.Event()

    def notify(due_ms: int) -> None:
        seen.append(due_ms)
        arrived.set()

    NotifyListener(read_fd, notify).start()
    PipeNotifier(write_fd, HORIZON_MS, SettableClock(NOW_MS)).notify_due(NOW_MS + 300)
    assert arrived.wait(2)
    assert seen == [NOW_MS + 300]
    os.close(write_fd)


def test_of_the_wake_ups_read_at_once_only_the_earliest_is_handed_on():
    read_fd, write_fd = os.pipe()
    # Three wake-ups waiting in the pipe before the listener reads: one read takes them all.
    os.write(write_fd, b"".join(struct.pack("<q", NOW_MS + d) for d in (300, 100, 200)))
    os.close(write_fd)
    seen: list[int] = []
    listener = NotifyListener(read_fd, seen.append)
    listener.start()
    assert listener.join(2)  # it ends when the pipe is closed and drained
    assert seen == [NOW_MS + 100]


def test_only_alarms_due_within_the_horizon_cross_the_pipe():
    read_fd, write_fd = os.pipe()
    os.set_blocking(read_fd, False)
    clock = SettableClock(NOW_MS)
    notifier = PipeNotifier(write_fd, HORIZON_MS, clock)
    notifier.notify_due(NOW_MS + HORIZON_MS + 1)  # the next regular pass claims it in time
    notifier.notify_due(NOW_MS + 3_600_000)
    with pytest.raises(BlockingIOError):  # nothing was written
        os.read(read_fd, 64)
    notifier.notify_due(NOW_MS + HORIZON_MS)
    notifier.notify_due(NOW_MS - 5)  # already due
    clock.advance(3_600_000)
    notifier.notify_due(NOW_MS + 3_600_000)  # the hour has passed: now it is due
    assert [value for (value,) in struct.iter_unpack("<q", os.read(read_fd, 64))] == [
        NOW_MS + HORIZON_MS, NOW_MS - 5, NOW_MS + 3_600_000]  # fmt: skip
    os.close(read_fd)
    os.close(write_fd)


def test_a_full_pipe_drops_the_wake_up_instead_of_blocking():
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    notifier = PipeNotifier(write_fd, HORIZON_MS, SettableClock(NOW_MS))
    started = time.monotonic()
    for due in range(100_000):  # far more than a pipe buffer holds
        notifier.notify_due(NOW_MS + due % HORIZON_MS)
    assert time.monotonic() - started < 5
    os.close(read_fd)
    os.close(write_fd)


def test_the_status_file_tells_the_broker_while_it_is_fresh(tmp_path: Path):
    clock = SettableClock(NOW_MS)
    status = EngineStatusFile(tmp_path / "status", clock)
    assert not status.is_healthy()  # no report yet
    status.write(True, {})
    assert status.is_healthy()
    status.write(False, {})
    assert not status.is_healthy()
    status.write(True, {})
    clock.advance(STATUS_MAX_AGE_MS - 1)
    assert status.is_healthy()
    clock.advance(1)
    assert not status.is_healthy()  # the engine process stopped reporting


def test_the_status_file_carries_the_loops_and_its_own_time(tmp_path: Path):
    clock = SettableClock(NOW_MS)
    status = EngineStatusFile(tmp_path / "status", clock)
    assert status.loop_beats() == {STATUS_LOOP: None}  # nothing written: never seen well
    status.write(True, {"clock-ring": NOW_MS + 1_000, "clock-preload": None})
    clock.advance(300)
    assert status.loop_beats() == {
        STATUS_LOOP: NOW_MS, "clock-ring": NOW_MS + 1_000, "clock-preload": None}  # fmt: skip
    status.path.write_text("half a wri")
    assert status.loop_beats() == {STATUS_LOOP: None}
    assert not status.is_healthy()
