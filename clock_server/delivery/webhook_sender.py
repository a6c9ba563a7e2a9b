"""Webhooks over HTTP with urllib3 (the interface is delivery.ports.WebhookSender).

Each application URL has a connection pool of its own, as large as the application's bound
on calls in flight. The pool blocks instead of opening more connections than that, and a
connection whose answer was read to the end carries the next request (keep-alive).

A call is one attempt: urllib3 retries nothing and follows no redirect, since the engine
retries with its own backoff and a redirect could lead anywhere. Unless private addresses
are allowed, every new connection checks the address it reached (targets.forbidden_kind):
the check is on the real peer, not on a second lookup of the name, so a name that resolves
to a public address at configuration time and to an internal one later (DNS rebinding)
still reaches nothing inside. A refused connection is closed before a byte is sent.
"""

from __future__ import annotations

import contextlib
import math
import socket
import threading
import time
from datetime import UTC, datetime
from http.client import HTTPException
from ipaddress import ip_address

from standardwebhooks import Webhook
from standardwebhooks.webhooks import EmptyWebhookSecretError
from urllib3 import BaseHTTPResponse, HTTPConnectionPool, HTTPSConnectionPool, Timeout
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.exceptions import (
    ClosedPoolError,
    EmptyPoolError,
    HTTPError,
    LocationValueError,
    NameResolutionError,
    NewConnectionError,
    ProtocolError,
    SSLError,
)
from urllib3.exceptions import TimeoutError as Urllib3TimeoutError
from urllib3.util import parse_url

from clock_server.delivery.ports import WebhookOutcome, WebhookRequest
from clock_server.delivery.retry_after import retry_after_ms
from clock_server.delivery.targets import forbidden_kind, with_article

MAX_ANSWER_BYTES = 64 * 1024
RETRY_AFTER_STATUSES = frozenset({429, 503})

# The longest error text kept from a library's message (a TLS error can be long).
_DETAIL_CHARS = 200


class RefusedPeer(NewConnectionError):
    """A new connection reached a non-public address, and was closed."""

    def __init__(self, conn: HTTPConnection, address: str, kind: str) -> None:
        self.refusal = f"refused: {address} is {with_article(kind)} address"
        super().__init__(conn, self.refusal)


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


class _PublicHTTPConnection(HTTPConnection):
    def _new_conn(self) -> socket.socket:
        return _checked_peer(self, super()._new_conn())


class _PublicHTTPSConnection(HTTPSConnection):
    def _new_conn(self) -> socket.socket:
        # Checked before the TLS handshake: the wrapping happens after _new_conn returns.
        return _checked_peer(self, super()._new_conn())


class _PublicHTTPConnectionPool(HTTPConnectionPool):
    ConnectionCls = _PublicHTTPConnection


class _PublicHTTPSConnectionPool(HTTPSConnectionPool):
    ConnectionCls = _PublicHTTPSConnection


_POOLS_ANY_ADDRESS: dict[str, type[HTTPConnectionPool]] = {
    "http": HTTPConnectionPool,
    "https": HTTPSConnectionPool,
}
_POOLS_PUBLIC_ONLY: dict[str, type[HTTPConnectionPool]] = {
    "http": _PublicHTTPConnectionPool,
    "https": _PublicHTTPSConnectionPool,
}


class HttpWebhookSender:
    """Sends signed webhooks with urllib3; thread-safe. With `allow_private` False, a
    connection to a loopback, private, link-local or other non-public address is refused."""

    def __init__(self, allow_private: bool, user_agent: str = "clock") -> None:
        self._pool_classes = _POOLS_ANY_ADDRESS if allow_private else _POOLS_PUBLIC_ONLY
        self._user_agent = user_agent
        self._lock = threading.Lock()
        self._pools: dict[str, tuple[int, HTTPConnectionPool]] = {}
        self._closed = False

    def send(self, request: WebhookRequest) -> WebhookOutcome:
        """POST the signed body once (see WebhookSender.send)."""
        try:
            headers = self._headers(request)
        except (ValueError, EmptyWebhookSecretError) as error:
            return _failed(f"cannot sign: {_detail(error)}")
        try:
            url = parse_url(request.url)
            pool = self._pool(request.url, url.scheme, url.host, url.port, request.max_connections)
            if pool is None:
                return _failed("sender is closed")
            response = pool.urlopen(
                "POST",
                url.request_uri,
                body=request.body,
                headers=headers,
                retries=False,
                redirect=False,
                assert_same_host=False,
                timeout=Timeout(total=request.timeout_s),
                pool_timeout=math.ceil(request.timeout_s),
                preload_content=False,
                decode_content=False,
            )
        except (HTTPError, HTTPException, OSError, ValueError) as error:
            return _failed(_describe(error, request.timeout_s, _url_host(request.url)))
        try:
            return _answered(response)
        finally:
            _discard_answer(response)

    def close(self) -> None:
        """Close every pool's idle connections; a connection in use is closed when its call
        ends, and sends from now on fail with "sender is closed"."""
        with self._lock:
            self._closed = True
            pools = [pool for _, pool in self._pools.values()]
            self._pools.clear()
        for pool in pools:
            pool.close()

    def _headers(self, request: WebhookRequest) -> dict[str, str]:
        timestamp = math.floor(request.sent_at_s)
        sent_at = datetime.fromtimestamp(timestamp, UTC)
        body = request.body.decode("utf-8")
        # Standard Webhooks: space-separated signatures, any one of which verifies the call
        # (during a secret rotation, one with the new secret and one with the old).
        signature = " ".join(
            Webhook(secret).sign(request.message_id, sent_at, body) for secret in request.secrets
        )
        return {
            "content-type": "application/json",
            "webhook-id": request.message_id,
            "webhook-timestamp": str(timestamp),
            "webhook-signature": signature,
            "clock-attempt": str(request.attempt),
            "user-agent": self._user_agent,
        }

    def _pool(
        self, key: str, scheme: str | None, host: str | None, port: int | None, size: int
    ) -> HTTPConnectionPool | None:
        pool_class = self._pool_classes.get(scheme or "")
        if pool_class is None or not host:
            # Not quoting the URL: its query may hold a token.
            raise LocationValueError("not an http or https URL with a host")
        if size < 1:
            raise ValueError(f"max_connections must be at least 1, not {size}")
        replaced = None
        with self._lock:
            if self._closed:
                return None
            held = self._pools.get(key)
            if held is not None and held[0] == size:
                return held[1]
            if held is not None:
                replaced = held[1]
            pool = pool_class(host, port, maxsize=size, block=True, retries=False)
            self._pools[key] = (size, pool)
        if replaced is not None:
            # Its connections in use are closed as their calls give them back.
            replaced.close()
        return pool


def _url_host(url: str) -> str:
    try:
        return parse_url(url).host or "?"
    except LocationValueError:
        return "?"


def _answered(response: BaseHTTPResponse) -> WebhookOutcome:
    status = response.status
    if 200 <= status < 300:
        return WebhookOutcome(ok=True, status=status, error=None, retry_after_ms=None)
    retry_after = None
    if status in RETRY_AFTER_STATUSES:
        headers = response.headers
        retry_after = retry_after_ms(headers.get("retry-after"), headers.get("date"), time.time())
    return WebhookOutcome(
        ok=False, status=status, error=f"HTTP {status}", retry_after_ms=retry_after
    )


def _discard_answer(response: BaseHTTPResponse) -> None:
    """Read and drop the answer's body, up to MAX_ANSWER_BYTES, so that its connection can
    carry the next request; a longer or broken body costs the connection instead."""
    with contextlib.suppress(HTTPError, HTTPException, OSError):
        response.read(MAX_ANSWER_BYTES, decode_content=False)
    # urllib3 gives the connection back by itself once the body was read to its end.
    if response.connection is not None:
        response.close()
    response.release_conn()


def _failed(error: str) -> WebhookOutcome:
    return WebhookOutcome(ok=False, status=None, error=error, retry_after_ms=None)


def _describe(error: Exception, timeout_s: float, host: str) -> str:
    if isinstance(error, RefusedPeer):
        return error.refusal
    if isinstance(error, NameResolutionError):
        return f"no such host: {host}"
    if isinstance(error, NewConnectionError):
        cause = error.__cause__
        if isinstance(cause, ConnectionRefusedError):
            return "connection refused"
        return f"cannot connect: {_detail(cause or error)}"
    if isinstance(error, EmptyPoolError):
        return f"no free connection within {timeout_s:g} s"
    if isinstance(error, Urllib3TimeoutError):
        return f"timed out after {timeout_s:g} s"
    if isinstance(error, SSLError):
        return f"TLS error: {_detail(error)}"
    if isinstance(error, ClosedPoolError):
        return "sender is closed"
    if isinstance(error, ProtocolError):
        return f"connection lost: {_detail(error)}"
    if isinstance(error, LocationValueError):
        return f"invalid URL: {_detail(error)}"
    return f"failed: {_detail(error)}"


def _detail(error: BaseException) -> str:
    """The most specific readable part of an error: urllib3 wraps the error it caught as its
    last argument."""
    while error.args and isinstance(error.args[-1], BaseException):
        error = error.args[-1]
    if isinstance(error, OSError) and error.strerror:
        text = error.strerror
    else:
        text = str(error) or type(error).__name__
    return text[:_DETAIL_CHARS]
