"""Wake-ups over the pipe between processes, and the broker status file."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from clock_server.ipc import BrokerStatusFile, NotifyListener, PipeNotifier


def test_wake_ups_cross_the_pipe_and_the_earliest_wins():
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    seen: list[int] = []
    arrived = threading.Event()

    def notify(due_ms: int) -> None:
        seen.append(due_ms)
        arrived.set()

    NotifyListener(read_fd, notify).start()
    notifier = PipeNotifier(write_fd)
    for due in (300, 100, 200):
        notifier.notify_due(due)
    assert arrived.wait(2)
    deadline = time.monotonic() + 2
    while 100 not in seen and time.monotonic() < deadline:
        time.sleep(0.01)
    assert 100 in seen and min(seen) == 100
    os.close(write_fd)


def test_a_full_pipe_drops_the_wake_up_instead_of_blocking():
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    notifier = PipeNotifier(write_fd)
    started = time.monotonic()
    for due in range(100_000):  # far more than a pipe buffer holds
        notifier.notify_due(due)
    assert time.monotonic() - started < 5
    os.close(read_fd)
    os.close(write_fd)


def test_broker_status_file(tmp_path: Path):
    status = BrokerStatusFile(tmp_path / "broker")
    assert not status.is_healthy()  # no report yet
    status.write(True)
    assert status.is_healthy()
    status.write(False)
    assert not status.is_healthy()
    status.write(True)
    stale = time.time() - 60
    os.utime(status.path, (stale, stale))
    assert not status.is_healthy()  # the engine process stopped reporting
