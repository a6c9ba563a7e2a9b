"""Logging set-up of the clock-server command."""

from __future__ import annotations

import logging
import time

from clock_server.cli import OncePer


def record(message: str) -> logging.LogRecord:
    return logging.LogRecord("waitress.queue", logging.WARNING, __file__, 1, message, None, None)


def test_once_per_lets_one_record_through_and_counts_the_rest():
    limit = OncePer(0.2)
    assert limit.filter(record("Task queue depth is 1"))
    assert [limit.filter(record(f"Task queue depth is {n}")) for n in range(5)] == [False] * 5
    time.sleep(0.25)
    later = record("Task queue depth is 9")
    assert limit.filter(later)
    assert later.getMessage() == "Task queue depth is 9 (5 similar messages in the last 0.2 s)"
    assert not limit.filter(record("Task queue depth is 2"))
