"""The urllib3 connections and pools of the webhook sender: every step of a call within its
deadline, and (unless private addresses are allowed) the peer's address checked on connect.

The sender makes each call with `CURRENT_CALL` set to its call_deadline.Call. A connection
used for it:
- connects to each address of the host only within the time the call has left
  (`_new_conn`);
- sets its socket's timeout to the time left again before it sends and before it reads the
  status line and headers (`request`, `getresponse`);
- is held by the call from `connect` or `request` on, so that at the deadline the call's
  watchdog shuts its socket down (`interrupt`) and the read or write blocked on it returns
  at once: also under TLS (the shutdown goes to the socket beneath the TLS layer), and
  during the TLS handshake (through a duplicate of the socket being wrapped);
- is let go by its call as it goes back into its pool (`_IdleConnections`, the pools'
  `QueueCls`), before any other call can take it out.
A host's name lookup cannot be interrupted: it runs on the sender's `NameLookups`
(`CURRENT_LOOKUPS`), and the call waits for it only until its deadline.

Unless private addresses are allowed, every new connection checks each address the host's
name resolves to before connecting (targets.forbidden_kind), and connects only to the
allowed ones: a name that resolves to a public address at configuration time and to an
internal one later (DNS rebinding) reaches nothing inside, and since no connection is tried,
an internal port that is open fails as a closed one does ("refused: 127.0.0.1 is a loopback
address"), so the history tells nothing about it. The address actually reached is checked
once more after the connect, a second line should the first be bypassed; a connection it
refuses is closed before a byte is sent.

Private urllib3 names used, checked by tests/test_webhook_deadline.py against the installed
urllib3: `HTTPConnection._new_conn` (overridden: how a connection opens its socket).
"""

from __future__ import annotations

import contextlib
import queue
import socket
import sys
from contextvars import ContextVar
from ipaddress import ip_address
from typing import Any

from urllib3 import HTTPConnectionPool, HTTPSConnectionPool
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.exceptions import ConnectTimeoutError, NameResolutionError, NewConnectionError
from urllib3.response import HTTPResponse
from urllib3.util.connection import allowed_gai_family

from clock_server.delivery.call_deadline import Call
from clock_server.delivery.name_lookups import LookupTimedOut, NameLookups
from clock_server.delivery.targets import forbidden_kind, with_article

CURRENT_CALL: ContextVar[Call | None] = ContextVar("clock_webhook_call", default=None)
CURRENT_LOOKUPS: ContextVar[NameLookups | None] = ContextVar("clock_lookups", default=None)

LOOKING_UP = "looking up the host"
CONNECTING = "connecting"
SENDING = "sending the request"
READING_HEAD = "reading status and headers"

# A socket timeout of 0 would make the socket non-blocking: with no time left, each
# operation gets this long, and fails as timed out.
_LEAST_TIMEOUT_S = 0.001


def time_left_s(call: Call) -> float:
    """The call's time left, as a socket timeout."""
    return max(call.left_s(), _LEAST_TIMEOUT_S)


def keep_to_time_left(conn: object, call: Call) -> None:
    """Set the socket timeout of `conn` (an answer's connection) to the call's time left."""
    if isinstance(conn, _CallHTTPConnection) and conn.wire is not None:
        with contextlib.suppress(OSError):
            conn.wire.settimeout(time_left_s(call))


class RefusedPeer(NewConnectionError):
    """A new connection reached a non-public address, and was closed."""

    def __init__(self, conn: HTTPConnection, address: str, kind: str) -> None:
        self.refusal = f"refused: {address} is {with_article(kind)} address"
        super().__init__(conn, self.refusal)


class _CallHTTPConnection(HTTPConnection):
    """A connection that keeps to the deadline of the call using it (`CURRENT_CALL`)."""

    held_by: Call | None = None
    public_only = False  # connect only to public addresses (targets.forbidden_kind)
    # The socket of the last connect, kept after close(): http.client closes its connection
    # as it hands the socket to an answer that ends with the connection, whose body is then
    # read from it; closed for good, shutting it down fails harmlessly.
    wire: socket.socket | None = None
    spare: socket.socket | None = None  # see _CallHTTPSConnection

    def _new_conn(self) -> socket.socket:
        call = CURRENT_CALL.get()
        if call is None:
            return super()._new_conn()
        return _connect_within(self, call)

    def connect(self) -> None:
        call = CURRENT_CALL.get()
        if call is not None:
            self._hold(call, CONNECTING)
        try:
            super().connect()
        finally:
            spare, self.spare = self.spare, None
            self.wire = self.sock
            if spare is not None:
                spare.close()
        if call is not None:
            call.enter(SENDING)

    def request(self, *args: Any, **kwargs: Any) -> None:
        call = CURRENT_CALL.get()
        if call is not None:
            self._hold(call, SENDING)
            self.timeout = time_left_s(call)  # on the socket of a reused connection
        super().request(*args, **kwargs)

    def getresponse(self) -> HTTPResponse:  # type: ignore[override]  # as urllib3's own
        call = CURRENT_CALL.get()
        if call is not None:
            call.enter(READING_HEAD)
            self.timeout = time_left_s(call)
        return super().getresponse()

    def interrupt(self) -> None:
        """Shut the socket down: a read or write blocked on it returns at once."""
        wire = self.wire
        if wire is not None:
            with contextlib.suppress(OSError):
                # socket.socket's own shutdown, beneath an SSLSocket's TLS layer.
                socket.socket.shutdown(wire, socket.SHUT_RDWR)

    def let_go(self) -> None:
        """Leave the call that held the connection (it is going back to its pool)."""
        call, self.held_by = self.held_by, None
        if call is not None:
            call.let_go(self)

    def _hold(self, call: Call, step: str) -> None:
        call.enter(step)
        if self.held_by is not call:
            self.let_go()
            self.held_by = call
            call.hold(self)


class _CallHTTPSConnection(_CallHTTPConnection, HTTPSConnection):
    def _new_conn(self) -> socket.socket:
        sock = super()._new_conn()
        # The TLS layer detaches the socket it wraps: through a duplicate of it, closed once
        # connected, the deadline also reaches the handshake (and the preparation before it,
        # which its socket timeout, set here, does not count).
        self.wire = self.spare = sock.dup()
        return sock


def _connect_within(conn: HTTPConnection, call: Call) -> socket.socket:
    """urllib3's connect (util.connection.create_connection), each address tried only within
    the time the call has left, and urllib3's errors for what fails."""
    host = conn.host.strip("[]")
    lookups = CURRENT_LOOKUPS.get()
    call.enter(LOOKING_UP)
    try:
        if lookups is None:
            addresses = socket.getaddrinfo(
                host, conn.port, allowed_gai_family(), socket.SOCK_STREAM
            )
        else:
            addresses = lookups.addresses(host, conn.port, allowed_gai_family(), call.left_s())
    except socket.gaierror as error:
        raise NameResolutionError(conn.host, conn, error) from error
    except LookupTimedOut as error:
        raise ConnectTimeoutError(conn, f"Looking up {conn.host} timed out") from error
    if getattr(conn, "public_only", False):
        addresses = _public_addresses(conn, addresses)
    call.enter(CONNECTING)
    failure: OSError | None = None
    for family, kind, proto, _, address in addresses:
        left_s = call.left_s()
        if left_s <= 0:
            break
        sock = socket.socket(family, kind, proto)
        try:
            for option in conn.socket_options or ():
                sock.setsockopt(*option)
            sock.settimeout(left_s)
            if conn.source_address:
                sock.bind(conn.source_address)
            sock.connect(address)
        except OSError as error:
            sock.close()
            failure = error
            continue
        sock.settimeout(time_left_s(call))
        sys.audit("http.client.connect", conn, conn.host, conn.port)
        return sock
    if failure is None or isinstance(failure, TimeoutError):
        raise ConnectTimeoutError(conn, f"Connection to {conn.host} timed out")
    raise NewConnectionError(conn, f"Failed to establish a new connection: {failure}") from failure


def _public_addresses(conn: HTTPConnection, addresses: list[Any]) -> list[Any]:
    """The looked-up addresses a webhook may connect to; RefusedPeer, before any connect,
    naming the first refused one, when there is none."""
    allowed = []
    refused: tuple[str, str] | None = None
    for info in addresses:
        host = str(info[4][0])
        kind = forbidden_kind(ip_address(host.split("%", 1)[0]))
        if kind is None:
            allowed.append(info)
        elif refused is None:
            refused = (host, kind)
    if not allowed and refused is not None:
        raise RefusedPeer(conn, *refused)
    return allowed


def _checked_peer(conn: HTTPConnection, sock: socket.socket) -> socket.socket:
    try:
        peer = str(sock.getpeername()[0])
    except OSError as error:
        sock.close()
        raise NewConnectionError(conn, f"Failed to establish a new connection: {error}") from error
    kind = forbidden_kind(ip_address(peer))
    if kind is not None:
        sock.close()
        raise RefusedPeer(conn, peer, kind)
    return sock


class _PublicHTTPConnection(_CallHTTPConnection):
    public_only = True

    def _new_conn(self) -> socket.socket:
        return _checked_peer(self, super()._new_conn())


class _PublicHTTPSConnection(_CallHTTPSConnection):
    public_only = True

    def _new_conn(self) -> socket.socket:
        # Checked before the TLS handshake: the wrapping happens after _new_conn returns.
        return _checked_peer(self, super()._new_conn())


class _IdleConnections(queue.LifoQueue[Any]):
    """A pool's idle connections: one put back has first left its call."""

    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        if isinstance(item, _CallHTTPConnection):
            item.let_go()
        super().put(item, block, timeout)


class _CallHTTPConnectionPool(HTTPConnectionPool):
    ConnectionCls = _CallHTTPConnection
    QueueCls = _IdleConnections


class _CallHTTPSConnectionPool(HTTPSConnectionPool):
    ConnectionCls = _CallHTTPSConnection
    QueueCls = _IdleConnections


class _PublicHTTPConnectionPool(_CallHTTPConnectionPool):
    ConnectionCls = _PublicHTTPConnection


class _PublicHTTPSConnectionPool(_CallHTTPSConnectionPool):
    ConnectionCls = _PublicHTTPSConnection


POOLS_ANY_ADDRESS: dict[str, type[HTTPConnectionPool]] = {
    "http": _CallHTTPConnectionPool,
    "https": _CallHTTPSConnectionPool,
}
POOLS_PUBLIC_ONLY: dict[str, type[HTTPConnectionPool]] = {
    "http": _PublicHTTPConnectionPool,
    "https": _PublicHTTPSConnectionPool,
}
