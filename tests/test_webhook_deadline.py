"""A webhook call's timeout is a deadline: HttpWebhookSender against raw receivers on
127.0.0.1 that answer slowly, too much, wrongly or not at all, each call failing within its
1 s deadline plus 100 ms with a readable error; the deadline watchdog on its own; and the
private urllib3 names the sender relies on."""

from __future__ import annotations

import inspect
import shutil
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from pathlib import Path

import pytest
from urllib3.connection import HTTPConnection, HTTPSConnection

from clock_server.delivery.call_deadline import CLOSED, DEADLINE, CallDeadlines
from clock_server.delivery.name_lookups import NameLookups
from clock_server.delivery.secrets import new_secret
from clock_server.delivery.sender_port import WebhookOutcome, WebhookRequest
from clock_server.delivery.webhook_sender import HttpWebhookSender
from tests.support import eventually
from tests.webhook_receiver import Wire, raw_receiving

TIMEOUT_S = 1.0
BOUND_S = TIMEOUT_S + 0.1  # a call's deadline, and what a busy machine may add to it
OK_HEAD = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"
MB = 1024 * 1024


@pytest.fixture
def sender() -> Iterator[HttpWebhookSender]:
    with closing(HttpWebhookSender(allow_private=True)) as sender:
        yield sender


def request(url: str, **changes: object) -> WebhookRequest:
    base = WebhookRequest(
        url=url,
        secrets=(new_secret(),),
        message_id="msg_0001",
        body=b'{"application":"billing","business_id":"inv-1"}',
        attempt=1,
        timeout_s=TIMEOUT_S,
        max_connections=4,
        sent_at_s=time.time(),
    )
    return base._replace(**changes)


def timed_send(sender: HttpWebhookSender, url: str) -> tuple[WebhookOutcome, float]:
    started = time.monotonic()
    outcome = sender.send(request(url))
    return outcome, time.monotonic() - started


def failed(error: str) -> WebhookOutcome:
    return WebhookOutcome(ok=False, status=None, error=error, retry_after_ms=None)


def silent(wire: Wire, _n: int) -> None:
    wire.wait()


def chunks(size: int, total: int) -> Iterator[bytes]:
    """A chunked body of `total` bytes, `size` at a time."""
    for _ in range(total // size):
        yield b"%x\r\n%s\r\n" % (size, b"x" * size)


# --- one real receiver per way of failing --------------------------------------------------


def test_a_silent_receiver(sender):
    with raw_receiving(silent) as receiver:
        outcome, took_s = timed_send(sender, receiver.url())
    assert took_s < BOUND_S
    assert outcome == failed("timed out after 1 s (reading status and headers)")


def test_a_status_line_trickled_byte_by_byte(sender):
    with raw_receiving(lambda wire, _n: wire.trickle(OK_HEAD, 0.1)) as receiver:
        outcome, took_s = timed_send(sender, receiver.url())
    assert took_s < BOUND_S
    assert outcome == failed("timed out after 1 s (reading status and headers)")


@pytest.mark.parametrize(
    "head",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 40\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n",  # the body ends with the connection
    ],
    ids=["content-length", "connection-close"],
)
def test_headers_at_once_then_a_trickled_body(sender, head):
    def script(wire: Wire, _n: int) -> None:
        wire.send(head)
        wire.trickle(b"x" * 40, 0.1)

    with raw_receiving(script) as receiver:
        outcome, took_s = timed_send(sender, receiver.url())
    assert took_s < BOUND_S
    assert outcome == failed("timed out after 1 s (reading the body)")


def test_a_declared_body_of_several_mb_fails_at_once(sender):
    def script(wire: Wire, _n: int) -> None:
        wire.send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % (5 * MB))
        wire.send(b"x" * (5 * MB))

    with raw_receiving(script) as receiver:
        outcome, took_s = timed_send(sender, receiver.url())
    assert took_s < 0.5  # not read: its length said enough
    assert outcome == failed("answer over 64 KiB")


def test_a_fast_undeclared_body_of_several_mb(sender):
    def script(wire: Wire, _n: int) -> None:
        wire.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for chunk in chunks(64 * 1024, 5 * MB):
            wire.send(chunk)

    with raw_receiving(script) as receiver:
        outcome, took_s = timed_send(sender, receiver.url())
    assert took_s < BOUND_S
    assert outcome == failed("answer over 64 KiB")


def test_a_slowly_sent_body_of_several_mb(sender):
    def script(wire: Wire, _n: int) -> None:
        wire.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        for chunk in chunks(4 * 1024, 5 * MB):
            wire.send(chunk)
            if wire.wait(0.1):
                return

    with raw_receiving(script) as receiver:
        outcome, took_s = timed_send(sender, receiver.url())
    assert took_s < BOUND_S
    assert outcome == failed("timed out after 1 s (reading the body)")


def test_a_redirect_is_a_failure_not_followed(sender):
    def script(wire: Wire, _n: int) -> None:
        wire.send(b"HTTP/1.1 302 Found\r\nLocation: /elsewhere\r\nContent-Length: 0\r\n\r\n")

    with raw_receiving(script) as receiver:
        outcome, took_s = timed_send(sender, receiver.url())
        assert len(receiver.arrivals) == 1
    assert took_s < BOUND_S
    assert outcome == WebhookOutcome(ok=False, status=302, error="HTTP 302", retry_after_ms=None)


def test_a_100_continue_then_nothing(sender):
    def script(wire: Wire, _n: int) -> None:
        wire.send(b"HTTP/1.1 100 Continue\r\n\r\n")
        wire.wait()

    with raw_receiving(script) as receiver:
        outcome, took_s = timed_send(sender, receiver.url())
    assert took_s < BOUND_S
    assert outcome == failed("timed out after 1 s (reading status and headers)")


def test_a_malformed_status_line(sender):
    def script(wire: Wire, _n: int) -> None:
        wire.send(b"HTTX/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        wire.wait()

    with raw_receiving(script) as receiver:
        outcome, took_s = timed_send(sender, receiver.url())
    assert took_s < BOUND_S
    assert outcome == failed("invalid answer: bad status line 'HTTX/1.1 200 OK'")


def test_a_connection_closed_mid_answer(sender):
    def script(wire: Wire, _n: int) -> None:
        wire.send(b"HTTP/1.1 200 OK\r\nContent-Length: 40\r\n\r\n0123456789")
        wire.close()

    with raw_receiving(script) as receiver:
        outcome, took_s = timed_send(sender, receiver.url())
    assert took_s < BOUND_S
    assert outcome == failed("connection lost: IncompleteRead(10 bytes read, 30 more expected)")


def test_a_tls_handshake_never_answered(sender):
    with raw_receiving(silent) as receiver:
        url = receiver.url().replace("http://", "https://")
        outcome, took_s = timed_send(sender, url)
    assert took_s < BOUND_S
    assert outcome == failed("timed out after 1 s (connecting)")


@pytest.fixture
def tls_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ssl.SSLContext:
    """A server context with a self-signed certificate for 127.0.0.1, which the sender
    trusts through SSL_CERT_FILE."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context


def test_a_status_line_trickled_over_tls(sender, tls_server):
    def script(wire: Wire, n: int) -> None:
        wire.trickle(OK_HEAD, 0.1) if n == 0 else wire.send(OK_HEAD)

    with raw_receiving(script, tls=tls_server) as receiver:
        outcome, took_s = timed_send(sender, receiver.url())
        assert sender.send(request(receiver.url())).ok  # the certificate is trusted
    assert took_s < BOUND_S
    assert outcome == failed("timed out after 1 s (reading status and headers)")


# --- slots, connections and threads --------------------------------------------------------


def test_a_name_lookup_that_never_answers():
    """getaddrinfo cannot be interrupted: the call stops waiting for it at its deadline."""
    answered = threading.Event()

    def hanging(*_args: object) -> list[object]:
        answered.wait(10)
        return []

    lookups = NameLookups(resolve=hanging)
    with closing(HttpWebhookSender(allow_private=True, lookups=lookups)) as hung:
        outcome, took_s = timed_send(hung, "http://hooks.example.com/ring")
        answered.set()
    assert took_s < BOUND_S
    assert outcome == failed("timed out after 1 s (looking up the host)")


def test_a_slow_endpoint_never_holds_its_only_slot_past_the_deadline(sender):
    """With one connection for the URL, a second call waits for the first one's slot: it is
    free at the first one's deadline, and the second call's request arrives at once."""

    def script(wire: Wire, n: int) -> None:
        wire.trickle(OK_HEAD, 0.1) if n == 0 else wire.send(OK_HEAD)

    with raw_receiving(script) as receiver, ThreadPoolExecutor(2) as pool:
        one = request(receiver.url(), max_connections=1)
        first_started = time.monotonic()
        first = pool.submit(sender.send, one)
        eventually(lambda: receiver.arrivals, 5, 0.005, "the first call never arrived")
        second = pool.submit(sender.send, one._replace(timeout_s=2.0, message_id="msg_0002"))
        assert first.result().error == "timed out after 1 s (reading status and headers)"
        assert second.result().ok
        assert receiver.arrivals[1] - first_started < BOUND_S
        assert receiver.connections == 2  # the first one was closed, not reused


def test_a_call_that_ended_in_time_keeps_its_connection_past_its_deadline(sender):
    with raw_receiving(lambda wire, _n: wire.send(OK_HEAD)) as receiver:
        assert sender.send(request(receiver.url(), timeout_s=0.2)).ok
        time.sleep(0.4)  # the subject: the first call's deadline passes, its connection idle
        assert sender.send(request(receiver.url())).ok
        assert receiver.connections == 1


def test_close_ends_the_calls_in_flight_and_stops_the_watchdog():
    sender = HttpWebhookSender(allow_private=True)
    with raw_receiving(silent) as receiver, ThreadPoolExecutor(1) as pool:
        hanging = pool.submit(sender.send, request(receiver.url(), timeout_s=30.0))
        eventually(lambda: receiver.arrivals, 5, 0.005, "the call never arrived")
        started = time.monotonic()
        sender.close()
        assert hanging.result(timeout=5) == failed("sender is closed")
        assert time.monotonic() - started < 1.0
    names = [thread.name for thread in threading.enumerate()]
    assert "clock-webhook-deadlines" not in names


# --- the watchdog on its own ---------------------------------------------------------------


class _Held:
    def __init__(self) -> None:
        self.interrupted = threading.Event()

    def interrupt(self) -> None:
        self.interrupted.set()


def test_the_watchdog_interrupts_what_a_call_holds_at_its_deadline():
    deadlines = CallDeadlines("test-deadlines")
    try:
        late, early, let_go, finished = _Held(), _Held(), _Held(), _Held()
        started = time.monotonic()
        calls = [deadlines.start(timeout_s) for timeout_s in (0.3, 0.1, 0.1, 0.1)]
        for call, held in zip(calls, (late, early, let_go, finished), strict=True):
            call.hold(held)
        calls[2].let_go(let_go)
        calls[3].finish()
        assert early.interrupted.wait(1) and time.monotonic() - started < 0.2
        assert late.interrupted.wait(1) and time.monotonic() - started < 0.4
        assert [call.ended_by for call in calls] == [DEADLINE, DEADLINE, DEADLINE, None]
        assert not let_go.interrupted.is_set() and not finished.interrupted.is_set()
        after = _Held()
        calls[0].hold(after)  # held past the deadline: interrupted at once
        assert after.interrupted.is_set()
    finally:
        deadlines.close()


def test_a_closed_watchdog_ends_its_calls_and_every_later_one():
    deadlines = CallDeadlines("test-deadlines")
    held = _Held()
    deadlines.start(60).hold(held)
    deadlines.close()
    assert held.interrupted.is_set()
    assert deadlines.start(60).ended_by == CLOSED
    assert "test-deadlines" not in [thread.name for thread in threading.enumerate()]


# --- the private urllib3 names the sender leans on -----------------------------------------


@pytest.mark.parametrize("connection", [HTTPConnection, HTTPSConnection])
def test_urllib3_still_opens_sockets_with_new_conn(connection):
    """webhook_connections overrides `_new_conn`, private in urllib3, to connect within a
    call's deadline and to check the peer's address; if urllib3 renames it, the override
    is silently skipped and both are lost."""
    assert callable(getattr(connection, "_new_conn", None)), (
        f"urllib3.connection.{connection.__name__}._new_conn is gone: "
        "clock_server/delivery/webhook_connections.py must open sockets another way"
    )
    assert "self._new_conn()" in inspect.getsource(connection.connect), (
        f"urllib3.connection.{connection.__name__}.connect no longer calls _new_conn: "
        "clock_server/delivery/webhook_connections.py must open sockets another way"
    )
