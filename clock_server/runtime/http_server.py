"""The production WSGI server (waitress) for the API."""

from __future__ import annotations

import logging
import resource
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, TypeAlias

import waitress
from waitress.task import ThreadedTaskDispatcher

from clock_server.api.request_guard import BodyGate
from clock_server.api.routes import max_body_bytes
from clock_server.deadline import Deadline
from clock_server.runtime.http_channel import guard_connections
from clock_server.settings import Settings

# waitress ships no type hints: a BaseWSGIServer, or a MultiSocketServer on given sockets.
HttpServer: TypeAlias = Any
# Files a process keeps open besides its clients' connections: database and broker
# connections, logs, pipes, the temporary files of large bodies.
FILES_BESIDE_CONNECTIONS = 256
# How often waitress looks for idle connections to close (it takes whole seconds).
IDLE_CHECK_S = 1

log = logging.getLogger(__name__)


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
    """A waitress server for the WSGI `app` on host:port, or on already-bound `sockets`.

    At most CLOCK_HTTP_CONNECTION_LIMIT connections are open at once (more wait in the
    listen backlog); one idle for CLOCK_HTTP_IDLE_TIMEOUT_S is closed, and so is one whose
    request headers take longer than CLOCK_HTTP_HEADER_TIMEOUT_S to arrive. waitress reads
    a request in its one I/O thread, so slow clients hold connections, never threads."""
    where: dict[str, object] = {"sockets": sockets} if sockets else {
        "host": settings.host, "port": settings.port}  # fmt: skip
    dispatcher = DeadlineDispatcher()
    dispatcher.set_thread_count(settings.http_threads)
    # waitress warns for every request that waits for a thread: thousands of lines a second
    # under load (and a log record made for each, in its one IO thread), when a line now and
    # then says the same.
    dispatcher.queue_logger = ThrottledLogger(logging.getLogger("waitress.queue"), 10.0)
    room_for_connections(settings.http_connection_limit)
    server: HttpServer = waitress.create_server(
        app,
        threads=settings.http_threads,
        connection_limit=settings.http_connection_limit,
        channel_timeout=settings.http_idle_timeout_s,
        cleanup_interval=IDLE_CHECK_S,
        # select() cannot watch a descriptor numbered past 1023; poll() has no such bound
        asyncore_use_poll=True,
        ident="clock",
        clear_untrusted_proxy_headers=True,
        # refuse at once a body no route would take, instead of buffering up to 1 GiB of it
        # (waitress refuses a length equal to its limit: one more takes a body at the limit)
        max_request_body_size=max_body_bytes(settings) + 1,
        # waitress names this parameter a test shim; it is the one way to give the server a
        # dispatcher whose shutdown keeps to the deadline.
        _dispatcher=dispatcher,
        **where,
    )
    guard_connections(server, BodyGate.of(app), settings.http_header_timeout_s)
    return server


def room_for_connections(connection_limit: int) -> None:
    """Raise this process's limit of open files, within its hard limit, to hold
    `connection_limit` connections and the files it needs besides; warn when it cannot."""
    wanted = connection_limit + FILES_BESIDE_CONNECTIONS
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return
    raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if raised > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
    if raised < wanted:
        log.warning(
            "the limit of open files (%d) leaves room for fewer than CLOCK_HTTP_CONNECTION_LIMIT"
            "=%d connections; raise it (ulimit -n) or lower the setting",
            raised,
            connection_limit,
            extra={"action": "open_files_limit"},
        )


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
        self.logger.warning(message, *args, extra={"action": "requests_queued"})
