"""Webhooks over HTTP with urllib3 (the interface is delivery.sender_port.WebhookSender).

Each application URL has a connection pool of its own, as large as the application's bound
on calls in flight. The pool blocks instead of opening more connections than that, and a
connection whose answer was read to the end carries the next request (keep-alive).

A call is one attempt: urllib3 retries nothing and follows no redirect (a 3xx is a failed
attempt), since the engine retries with its own backoff and a redirect could lead anywhere.

A call's timeout is a deadline, from the moment `send` starts: waiting for a free
connection, connecting (and the TLS handshake), sending, the status line, the headers and
the whole body must all fit in it. Past it the call's connection is shut down and closed,
never given back to its pool, and the attempt failed: "timed out after 10 s (reading the
body)", naming the step it was at. A 2xx counts only when its body was read to its end in
time. One thread (call_deadline.CallDeadlines) watches every call's deadline; how it reaches
a call's socket is in webhook_connections.

An answer's body is read and dropped, never kept, and may be at most MAX_ANSWER_BYTES
(64 KiB): a 2xx whose body is longer, or says so in its Content-Length, is a failed attempt
("answer over 64 KiB"), at once for a declared length; a longer body of another status costs
its connection (the attempt failed anyway).
"""

from __future__ import annotations

import math
import threading
import time
from datetime import UTC, datetime
from http.client import BadStatusLine, HTTPException, IncompleteRead, RemoteDisconnected

from standardwebhooks import Webhook
from standardwebhooks.webhooks import EmptyWebhookSecretError
from urllib3 import BaseHTTPResponse, HTTPConnectionPool
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

from clock_server.delivery.call_deadline import CLOSED, Call, CallDeadlines
from clock_server.delivery.name_lookups import NameLookups
from clock_server.delivery.retry_after import retry_after_ms
from clock_server.delivery.sender_port import REFUSED, TIMED_OUT, WebhookOutcome, WebhookRequest
from clock_server.delivery.webhook_connections import (
    CURRENT_CALL,
    CURRENT_LOOKUPS,
    POOLS_ANY_ADDRESS,
    POOLS_PUBLIC_ONLY,
    RefusedPeer,
    keep_to_time_left,
    time_left_s,
)

MAX_ANSWER_BYTES = 64 * 1024
RETRY_AFTER_STATUSES = frozenset({429, 503})

WAITING = "waiting for a free connection"
READING_BODY = "reading the body"
OVER_CAP = f"answer over {MAX_ANSWER_BYTES // 1024} KiB"

# The longest error text kept from a library's message (a TLS error can be long).
_DETAIL_CHARS = 200


class HttpWebhookSender:
    """Sends signed webhooks with urllib3; thread-safe. With `allow_private` False, a
    connection to a loopback, private, link-local or other non-public address is refused."""

    def __init__(
        self, allow_private: bool, user_agent: str = "clock", lookups: NameLookups | None = None
    ) -> None:
        self._pool_classes = POOLS_ANY_ADDRESS if allow_private else POOLS_PUBLIC_ONLY
        self._user_agent = user_agent
        self._lock = threading.Lock()
        self._pools: dict[str, tuple[int, HTTPConnectionPool]] = {}
        self._deadlines = CallDeadlines("clock-webhook-deadlines")
        self._lookups = lookups or NameLookups()
        self._closed = False

    def send(self, request: WebhookRequest) -> WebhookOutcome:
        """POST the signed body once (see WebhookSender.send), all within its timeout."""
        call = self._deadlines.start(request.timeout_s)
        token = CURRENT_CALL.set(call)
        lookups = CURRENT_LOOKUPS.set(self._lookups)
        try:
            return self._send(request, call)
        finally:
            CURRENT_LOOKUPS.reset(lookups)
            CURRENT_CALL.reset(token)
            call.finish()

    def close(self) -> None:
        """Close every pool's idle connections and end the calls in flight ("sender is
        closed"), their connections shut down; sends from now on fail the same way."""
        with self._lock:
            self._closed = True
            pools = [pool for _, pool in self._pools.values()]
            self._pools.clear()
        for pool in pools:
            pool.close()
        self._deadlines.close()
        self._lookups.close()

    def _send(self, request: WebhookRequest, call: Call) -> WebhookOutcome:
        try:
            headers = self._headers(request)
        except (ValueError, EmptyWebhookSecretError) as error:
            return _failed(f"cannot sign: {_detail(error)}")
        try:
            url = parse_url(request.url)
            pool = self._pool(request.url, url.scheme, url.host, url.port, request.max_connections)
            if pool is None or call.ended_by == CLOSED:
                return _failed("sender is closed")
            call.enter(WAITING)
            response = pool.urlopen(
                "POST",
                url.request_uri,
                body=request.body,
                headers=headers,
                retries=False,
                redirect=False,
                assert_same_host=False,
                timeout=time_left_s(call),  # the connection sets its own, step by step
                # urllib3 hands it to queue.get, which takes a float.
                pool_timeout=max(call.left_s(), 0.0),  # type: ignore[arg-type]
                preload_content=False,
                decode_content=False,
            )
        except (HTTPError, HTTPException, OSError, ValueError) as error:
            return _failed(_describe(error, call, _url_host(request.url)))
        return _answer(response, call)

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


def _answer(response: BaseHTTPResponse, call: Call) -> WebhookOutcome:
    """The outcome of an answer whose status and headers arrived: its body read to the end
    (or not), and its connection given back to the pool only when it was."""
    try:
        body_error = _read_to_end(response, call)
    finally:
        if response.connection is not None:  # not at its end: the connection is spent
            response.close()
        response.release_conn()
    if not 200 <= response.status < 300:
        return _answered(response)
    if body_error is None and call.ended:
        body_error = _timed_out(call)  # read to its end, but too late
    if body_error is not None:
        return WebhookOutcome(ok=False, status=None, error=body_error, retry_after_ms=None)
    return WebhookOutcome(ok=True, status=response.status, error=None, retry_after_ms=None)


def _read_to_end(response: BaseHTTPResponse, call: Call) -> str | None:
    """Read and drop the answer's body; None once at its end, else why not."""
    declared = response.length_remaining
    if declared is not None and declared > MAX_ANSWER_BYTES:
        return OVER_CAP
    call.enter(READING_BODY)
    keep_to_time_left(response.connection, call)
    received = 0
    try:
        while chunk := response.read(MAX_ANSWER_BYTES + 1 - received, decode_content=False):
            received += len(chunk)
            if received > MAX_ANSWER_BYTES:
                return OVER_CAP
    except (HTTPError, HTTPException, OSError) as error:
        return _describe(error, call)
    return None


def _url_host(url: str) -> str:
    try:
        return parse_url(url).host or "?"
    except LocationValueError:
        return "?"


def _answered(response: BaseHTTPResponse) -> WebhookOutcome:
    """The outcome of an answer that is not a 2xx."""
    status = response.status
    retry_after = None
    if status in RETRY_AFTER_STATUSES:
        headers = response.headers
        retry_after = retry_after_ms(headers.get("retry-after"), headers.get("date"), time.time())
    return WebhookOutcome(
        ok=False, status=status, error=f"HTTP {status}", retry_after_ms=retry_after
    )


def _failed(error: str) -> WebhookOutcome:
    return WebhookOutcome(ok=False, status=None, error=error, retry_after_ms=None)


def _timed_out(call: Call) -> str:
    return f"{TIMED_OUT} after {call.timeout_s:g} s ({call.step})"


def _describe(error: Exception, call: Call, host: str = "?") -> str:
    """Why a call failed, short and stable: once its deadline passed, whatever the
    interrupted step raised is a timeout."""
    inner = _innermost(error)
    if call.ended_by == CLOSED or isinstance(error, ClosedPoolError):
        return "sender is closed"
    if isinstance(error, RefusedPeer):
        return error.refusal
    if isinstance(error, NameResolutionError):
        return f"no such host: {host}"
    if call.ended:
        return _timed_out(call)
    if isinstance(error, NewConnectionError):
        cause = error.__cause__
        if isinstance(cause, ConnectionRefusedError):
            return REFUSED[0]
        return f"cannot connect: {_detail(cause or error)}"
    if isinstance(error, (Urllib3TimeoutError, EmptyPoolError)) or isinstance(inner, TimeoutError):
        return _timed_out(call)
    if isinstance(error, SSLError):
        return f"TLS error: {_detail(error)}"
    if isinstance(inner, (RemoteDisconnected, IncompleteRead)):
        return f"connection lost: {_detail(inner)}"
    if isinstance(inner, BadStatusLine):
        return f"invalid answer: bad status line {str(inner).strip()!r}"[:_DETAIL_CHARS]
    if isinstance(inner, HTTPException):
        return f"invalid answer: {_detail(inner)}"
    if isinstance(error, ProtocolError):
        return f"connection lost: {_detail(error)}"
    if isinstance(error, LocationValueError):
        return f"invalid URL: {_detail(error)}"
    return f"failed: {_detail(error)}"


def _innermost(error: BaseException) -> BaseException:
    """urllib3 wraps the error it caught as its last argument."""
    while error.args and isinstance(error.args[-1], BaseException):
        error = error.args[-1]
    return error


def _detail(error: BaseException) -> str:
    """The most specific readable part of an error."""
    error = _innermost(error)
    if isinstance(error, OSError) and error.strerror:
        text = error.strerror
    else:
        text = str(error) or type(error).__name__
    return text[:_DETAIL_CHARS]
