"""The waitress queue warning, throttled so that a loaded server does not log every request."""

from __future__ import annotations

import logging
import socket

import pytest

from clock_server.runtime.http_server import ThrottledLogger


def test_throttled_logger_lets_one_warning_through_and_counts_the_rest(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    throttled = ThrottledLogger(logging.getLogger("waitress.queue"), 0.25, lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="waitress.queue"):
        throttled.warning("Task queue depth is %d", 1)
        for depth in range(5):
            now[0] += 0.04
            throttled.warning("Task queue depth is %d", depth)
        now[0] = 100.25  # exactly one interval after the first: the next one goes through
        throttled.warning("Task queue depth is %d", 9)
        now[0] += 0.24
        throttled.warning("Task queue depth is %d", 2)
    assert [r.getMessage() for r in caplog.records] == [
        "Task queue depth is 1",
        "Task queue depth is 9 (5 similar messages in the last 0.25 s)",
    ]


def test_the_http_server_throttles_its_queue_warning() -> None:
    from flask import Flask

    from clock_server.runtime.http_server import create_http_server
    from clock_server.settings import Settings

    listener = socket.create_server(("127.0.0.1", 0))
    server = create_http_server(Flask(__name__), Settings(), sockets=[listener])
    try:
        assert isinstance(server.task_dispatcher.queue_logger, ThrottledLogger)
    finally:
        server.close()
