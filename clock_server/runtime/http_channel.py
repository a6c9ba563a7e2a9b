"""waitress's connections, with a deadline for a request's headers and no read of a body the
app will not read.

waitress reads each request whole, its body included, before a thread serves it, and closes
a connection only after it has been idle for `channel_timeout`. Here a request's line and
headers must arrive within CLOCK_HTTP_HEADER_TIMEOUT_S of its first byte, however slowly
they trickle; and once they are in, `BodyGate` (api.request_guard) says whether the app will
answer without reading the body: refused (no token, a foreign Origin, not JSON, a declared
length over the route's limit) or a route that takes none. The body is then not read: the
app answers at once, with its own JSON error, and the connection is closed after the answer.
waitress's own error answers (400, 413, 431) carry `X-Content-Type-Options: nosniff` too.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from waitress.channel import HTTPChannel
from waitress.parser import HTTPRequestParser
from waitress.server import BaseWSGIServer
from waitress.task import ErrorTask, WSGITask

from clock_server.api.request_guard import SCREENED, BodyGate


class NoSniffErrorTask(ErrorTask):  # type: ignore[misc]
    """waitress's plain-text error answer, with nosniff like every other answer."""

    def execute(self) -> None:
        self.response_headers.append(("X-Content-Type-Options", "nosniff"))
        super().execute()


class GuardedParser(HTTPRequestParser):  # type: ignore[misc]
    """One request as waitress parses it, with a deadline for its headers and a gate for its
    body. `gate` and `header_timeout_s` are set on a subclass per server (`channel_class`)."""

    gate: BodyGate | None = None
    header_timeout_s: float = 10.0
    completed: bool = False  # waitress's own defaults, declared for the type checker
    body_rcv: Any = None
    screened: bool = False  # the gate made the app's checks of these headers, and they passed

    def __init__(self, adj: Any) -> None:
        super().__init__(adj)
        self.headers_due = time.monotonic() + self.header_timeout_s  # from its first byte
        self._gated = False

    def received(self, data: bytes) -> int:
        consumed: int = super().received(data)
        if not self.headers_finished or self._gated:
            return consumed
        self._gated = True
        if self.completed or self.body_rcv is None or self.gate is None:
            return consumed
        headers = self.headers

        def header(name: str) -> str | None:
            value: str | None = headers.get(name.upper().replace("-", "_"))
            return value

        if not self.gate.body_unread(
            self.command, self.path, header, self.content_length, self.chunked
        ):
            self.screened = True
            return consumed
        # The app answers from the headers alone: read no byte of the body, and close the
        # connection after the answer, since the rest of the body is still on its way.
        self.body_rcv.getbuf().close()
        self.body_rcv = None
        self.expect_continue = False
        self.headers["CONNECTION"] = "close"
        self.completed = True
        return len(data)


class ScreenedTask(WSGITask):  # type: ignore[misc]
    """A request served to the app, its environment saying when the gate already made the
    app's checks of its headers (`SCREENED`), so that the app does not make them again. No
    header can set the key: a header's name reaches the environment as HTTP_*."""

    def get_environment(self) -> dict[str, Any]:
        environ: dict[str, Any] = super().get_environment()
        if self.request.screened:  # always a GuardedParser: the channel's parser_class
            environ[SCREENED] = True
        return environ


class GuardedChannel(HTTPChannel):  # type: ignore[misc]
    """A connection whose request headers must be in by their parser's deadline (looked at
    by `close_late_headers`)."""

    parser_class = GuardedParser
    task_class = ScreenedTask
    error_task_class = NoSniffErrorTask


def close_late_headers(channels: Iterable[Any], now: float) -> int:
    """Mark for closing each connection whose request's headers are not all in by their
    deadline (`time.monotonic()` at `now`); how many. The loop closes them at its next turn,
    as it does the idle ones (waitress's `will_close`)."""
    late = 0
    for channel in channels:
        request = channel.request
        if request is not None and not request.headers_finished and now > request.headers_due:
            channel.will_close = True
            late += 1
    return late


def _with_header_deadlines(listener: BaseWSGIServer) -> Callable[[float], None]:
    """The listener's periodic look at its connections (every `cleanup_interval`, from its
    `readable()`), the header deadlines added to waitress's idle check. Looked at there, not
    in each connection's `readable()`: that runs for every connection at every turn of the
    loop, about 2 % of a create's Python time in a profile with 64 connections open."""
    idle_check = listener.maintenance

    def maintenance(now: float) -> None:
        idle_check(now)
        close_late_headers(listener.active_channels.values(), time.monotonic())

    return maintenance


def guard_connections(server: Any, gate: BodyGate | None, header_timeout_s: float) -> None:
    """Make every listener of the waitress `server` (one, or a MultiSocketServer's) open
    GuardedChannels with this gate and header deadline, and close those whose headers are
    late."""
    parser = type(
        "ServerParser", (GuardedParser,), {"gate": gate, "header_timeout_s": header_timeout_s}
    )
    channel = type("ServerChannel", (GuardedChannel,), {"parser_class": parser})
    listeners = [server, *getattr(server, "map", {}).values()]
    for listener in listeners:
        if isinstance(listener, BaseWSGIServer):
            listener.channel_class = channel
            listener.maintenance = _with_header_deadlines(listener)
