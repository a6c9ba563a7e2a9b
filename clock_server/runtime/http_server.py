"""The production WSGI server (waitress) for the API."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, TypeAlias

import waitress
from waitress.task import ThreadedTaskDispatcher

from clock_server.api.routes import max_body_bytes
from clock_server.deadline import Deadline
from clock_server.settings import Settings

# waitress ships no type hints: a BaseWSGIServer, or a MultiSocketServer on given sockets.
HttpServer: TypeAlias = Any


class DeadlineDispatcher(ThreadedTaskDispatcher):  # type: ignore[misc]
    """waitress's request threads, which at shutdown wait for the requests in hand no longer
    than the shutdown deadline (waitress's own wait is a fixed 5 s)."""

    deadline: Deadline | None = None

    def shutdown(self, cancel_pending: bool = True, timeout: float = 5) -> bool:
        if self.deadline is not None:
            timeout = min(timeout, self.deadline.remaining_s())
        return bool(super().shutdown(cancel_pending, timeout))


def create_http_server(
    app: Any, settings: Settings, sockets: list[socket.socket] | None = None
) -> HttpServer:
    """A waitress server for the WSGI `app` on host:port, or on already-bound `sockets`."""
    where: dict[str, object] = {"sockets": sockets} if sockets else {
        "host": settings.host, "port": settings.port}  # fmt: skip
    dispatcher = DeadlineDispatcher()
    dispatcher.set_thread_count(settings.http_threads)
    # waitress warns for every request that waits for a thread: thousands of lines a second
    # under load (and a log record made for each, in its one IO thread), when a line now and
    # then says the same.
    dispatcher.queue_logger = ThrottledLogger(logging.getLogger("waitress.queue"), 10.0)
    server: HttpServer = waitress.create_server(
        app,
        threads=settings.http_threads,
        ident="clock",
        clear_untrusted_proxy_headers=True,
        # refuse at once a body no route would take, instead of buffering up to 1 GiB of it
        max_request_body_size=max_body_bytes(settings),
        # waitress names this parameter a test shim; it is the one way to give the server a
        # dispatcher whose shutdown keeps to the deadline.
        _dispatcher=dispatcher,
        **where,
    )
    return server


def stop_requests_by(server: HttpServer, deadline: Deadline) -> None:
    """From now on, the server's wait for requests in hand at shutdown ends by `deadline`."""
    dispatcher = server.task_dispatcher
    if isinstance(dispatcher, DeadlineDispatcher):
        dispatcher.deadline = deadline


class ThrottledLogger:
    """Stands in for a logger: one warning per `seconds` goes through, saying how many were
    held back meanwhile. The time is checked before any log record is made."""

    def __init__(
        self,
        logger: logging.Logger,
        seconds: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.seconds = seconds
        self.monotonic = monotonic
        self._next = 0.0
        self._held = 0
        self._lock = threading.Lock()

    def warning(self, message: str, *args: object) -> None:
        now = self.monotonic()
        with self._lock:
            if now < self._next:
                self._held += 1
                return
            held, self._held, self._next = self._held, 0, now + self.seconds
        if held:
            message = f"{message} ({held} similar messages in the last {self.seconds:g} s)"
        self.logger.warning(message, *args)
