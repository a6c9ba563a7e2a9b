"""What the log says of one connection to RabbitMQ: a line for each change of its state.

A broker outage is one event, however many times the connection is tried again meanwhile:
the connection says once that it is down (`broker_disconnected`, a warning naming the node
and the reason) and once that it is back (`broker_reconnected`, with how long it was down
and how many attempts failed meanwhile). The attempts in between are DEBUG lines. Every line
names the connection (its `connection_name` in RabbitMQ too) and the node, host:port.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


def describe(reason: object) -> str:
    """A failure's reason, never empty: an exception's class and message, or the text given.
    Many of pika's exceptions have no message but say what happened in their repr, "Class:
    detail" (the refused connect under an AMQPConnectionError): the detail is used then."""
    if isinstance(reason, BaseException):
        kind = type(reason).__name__
        text = str(reason)
        if not text and (shown := repr(reason)).startswith(f"{kind}: "):
            text = shown.removeprefix(f"{kind}: ")
        return f"{kind}: {text}" if text else kind
    text = str(reason) if reason is not None else ""
    return text or "no reason given"


def node_name(host: str, port: int) -> str:
    """A node as logs name it: host:port."""
    return f"{host}:{port}"


class ConnectionLog:
    """The state of the connection named `name` (starting, up or down) and its log lines.
    Not thread-safe: one thread (the connection's) tells it what happened."""

    def __init__(self, name: str, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.name = name
        self._monotonic = monotonic
        self._up = False
        self._was_up = False
        self._down_since: float | None = None
        self._failed = 0  # attempts failed since it went down

    def fields(self, node: str, action: str, **more: Any) -> dict[str, Any]:
        """The `extra` of a log line about this connection, to `node`."""
        return {"action": action, "connection": self.name, "node": node, **more}

    def connected(self, node: str) -> None:
        """The connection is open (and ready) on `node`; said when it was not up before."""
        if self._up:
            return
        if self._down_since is None or not self._was_up:
            log.info("%s connected to RabbitMQ at %s", self.name, node,
                     extra=self.fields(node, "broker_connected"))  # fmt: skip
        else:
            down_s = round(self._monotonic() - self._down_since, 1)
            log.info(
                "%s reconnected to RabbitMQ at %s after %.1f s down (%d attempts failed)",
                self.name, node, down_s, self._failed,
                extra=self.fields(node, "broker_reconnected", down_s=down_s,
                                  failed_attempts=self._failed),
            )  # fmt: skip
        self._up = self._was_up = True
        self._down_since, self._failed = None, 0

    def failed(self, node: str, reason: object) -> None:
        """Connecting to `node` failed, or the open connection was lost, for `reason`."""
        cause = describe(reason)
        if self._down_since is not None:
            self._failed += 1
            log.debug(
                "%s: connecting to RabbitMQ at %s failed again: %s",
                self.name,
                node,
                cause,
                extra=self.fields(node, "broker_connect_failed", reason=cause),
            )
            return
        what = "lost its connection to" if self._up else "cannot connect to"
        self._went_down()
        log.warning("%s %s RabbitMQ at %s: %s", self.name, what, node, cause,
                    extra=self.fields(node, "broker_disconnected", reason=cause))  # fmt: skip

    def abandoned(self) -> None:
        """The connection was given up by clock itself, after an error another line reports:
        it is down, with no line of its own."""
        if self._down_since is None:
            self._went_down()

    def retrying(self, node: str, delay_s: float) -> None:
        """The next attempt, on `node`, is in `delay_s` seconds."""
        log.debug("%s: connecting to RabbitMQ at %s in %.1f s", self.name, node, delay_s,
                  extra=self.fields(node, "broker_reconnecting"))  # fmt: skip

    def _went_down(self) -> None:
        self._up = False
        self._down_since = self._monotonic()
        self._failed = 0
