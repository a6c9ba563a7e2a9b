"""HttpWebhookSender against a real HTTP server on 127.0.0.1, and the rules on webhook URLs
and addresses (delivery.targets)."""

from __future__ import annotations

import base64
import dataclasses
import logging
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass, field
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import ip_address

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from clock_server.delivery import webhook_connections
from clock_server.delivery.retry_after import MAX_RETRY_AFTER_MS, retry_after_ms
from clock_server.delivery.secrets import new_secret
from clock_server.delivery.sender_port import WebhookOutcome, WebhookRequest
from clock_server.delivery.targets import ALLOW_PRIVATE_SETTING, check_target, forbidden_kind
from clock_server.delivery.webhook_sender import HttpWebhookSender
from clock_server.errors import ValidationError
from clock_server.runtime.logs import configure_logging
from clock_server.settings import Settings

SECRET = new_secret()


@dataclass
class Answer:
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    delay_s: float = 0.0


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes


class _Server(ThreadingHTTPServer):
    """Answers every POST with `answer`, records what it received and counts the TCP
    connections it accepted. Closing it waits for its handler threads."""

    daemon_threads = False
    block_on_close = True

    def __init__(self, address: tuple[str, int] = ("127.0.0.1", 0)) -> None:
        super().__init__(address, _Handler)
        self.answer = Answer()
        self.received: list[Received] = []
        self.connections = 0
        self.in_flight = 0
        self.most_in_flight = 0
        self.stopping = threading.Event()
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/hooks/ring?x=1"

    def get_request(self) -> tuple[socket.socket, object]:
        accepted = super().get_request()
        with self.lock:
            self.connections += 1
        return accepted


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive
    timeout = 5  # a connection the client left open ends by itself
    disable_nagle_algorithm = True
    server: _Server

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        headers = {name.lower(): value for name, value in self.headers.items()}
        server = self.server
        with server.lock:
            server.received.append(Received(self.path, headers, body))
            server.in_flight += 1
            server.most_in_flight = max(server.most_in_flight, server.in_flight)
        answer = server.answer
        try:
            if answer.delay_s:
                server.stopping.wait(answer.delay_s)
            self.send_response(answer.status)
            for name, value in answer.headers.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(answer.body)))
            self.end_headers()
            self.wfile.write(answer.body)
        except OSError:
            self.close_connection = True
        finally:
            with server.lock:
                server.in_flight -= 1

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[_Server]:
    server = _Server()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    yield server
    server.stopping.set()
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture
def sender(server: _Server) -> Iterator[HttpWebhookSender]:
    """A sender that may reach 127.0.0.1, closed before the server."""
    with closing(HttpWebhookSender(allow_private=True, user_agent="clock-test")) as sender:
        yield sender


def request(url: str, **changes: object) -> WebhookRequest:
    base = WebhookRequest(
        url=url,
        secrets=(SECRET,),
        message_id="msg_0001",
        body=b'{"application":"billing","business_id":"inv-1"}',
        attempt=1,
        timeout_s=5.0,
        max_connections=4,
        sent_at_s=time.time(),
    )
    return base._replace(**changes)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_a_2xx_answer_is_ok_and_the_post_is_signed(server, sender):
    server.answer = Answer(status=204)
    sent = request(server.url, attempt=3)

    outcome = sender.send(sent)

    assert outcome == WebhookOutcome(ok=True, status=204, error=None, retry_after_ms=None)
    [got] = server.received
    assert got.path == "/hooks/ring?x=1"
    assert got.body == sent.body
    assert got.headers["content-type"] == "application/json"
    assert got.headers["webhook-id"] == "msg_0001"
    assert got.headers["webhook-timestamp"] == str(int(sent.sent_at_s))
    assert got.headers["clock-attempt"] == "3"
    assert got.headers["user-agent"] == "clock-test"
    message = {"application": "billing", "business_id": "inv-1"}
    assert Webhook(SECRET).verify(got.body, got.headers) == message


def test_with_two_secrets_each_one_verifies_the_post(server, sender):
    other = "whsec_" + base64.b64encode(b"another secret of 32 bytes......").decode()
    assert sender.send(request(server.url, secrets=(SECRET, other))).ok
    [got] = server.received
    assert len(got.headers["webhook-signature"].split(" ")) == 2
    message = {"application": "billing", "business_id": "inv-1"}
    for secret in (SECRET, other):
        assert Webhook(secret).verify(got.body, got.headers) == message
    stranger = "whsec_" + base64.b64encode(b"a secret that signed nothing....").decode()
    with pytest.raises(WebhookVerificationError):
        Webhook(stranger).verify(got.body, got.headers)


def test_an_error_status_is_a_failed_attempt(server, sender):
    server.answer = Answer(status=500, headers={"retry-after": "30"}, body=b"oops")
    assert sender.send(request(server.url)) == WebhookOutcome(False, 500, "HTTP 500", None)


def test_a_redirect_is_not_followed(server, sender):
    server.answer = Answer(status=302, headers={"location": server.url + "&again=1"})
    assert sender.send(request(server.url)) == WebhookOutcome(False, 302, "HTTP 302", None)
    assert len(server.received) == 1


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_in_seconds(server, sender, status):
    server.answer = Answer(status=status, headers={"retry-after": "120"})
    outcome = sender.send(request(server.url))
    assert outcome == WebhookOutcome(False, status, f"HTTP {status}", 120_000)


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_as_an_http_date(server, sender, status):
    before = time.time()
    server.answer = Answer(
        status=status, headers={"retry-after": formatdate(before + 120, usegmt=True)}
    )
    outcome = sender.send(request(server.url))
    took_ms = (time.time() - before) * 1000
    assert outcome.status == status
    assert outcome.retry_after_ms is not None
    # Whole seconds, counted from a moment while the call ran: up to a second and the call less.
    assert 119_000 - took_ms <= outcome.retry_after_ms <= 121_000


def test_retry_after_is_capped_at_one_hour(server, sender):
    server.answer = Answer(status=429, headers={"retry-after": "86400"})
    assert sender.send(request(server.url)).retry_after_ms == MAX_RETRY_AFTER_MS


def test_reading_retry_after():
    date = "Sun, 06 Nov 1994 08:49:37 GMT"
    assert retry_after_ms("0", None, 0.0) == 0
    assert retry_after_ms(" 5 ", None, 0.0) == 5_000
    assert retry_after_ms("Sun, 06 Nov 1994 08:50:07 GMT", date, 0.0) == 30_000
    assert retry_after_ms("Sun, 06 Nov 1994 08:49:07 GMT", date, 0.0) == 0
    assert retry_after_ms("Sun, 06 Nov 1994 08:50:37 GMT", None, 784111777.0) == 60_000
    assert retry_after_ms("9" * 5000, None, 0.0) == MAX_RETRY_AFTER_MS
    for unreadable in (None, "", "soon", "-5", "1.5"):
        assert retry_after_ms(unreadable, date, 0.0) is None


def test_a_slow_server_times_out(server, sender):
    server.answer = Answer(delay_s=1.5)
    started = time.monotonic()
    outcome = sender.send(request(server.url, timeout_s=0.3))
    assert time.monotonic() - started < 1.0
    error = "timed out after 0.3 s (reading status and headers)"
    assert outcome == WebhookOutcome(False, None, error, None)


def test_a_closed_port_refuses_the_connection(sender):
    url = f"http://127.0.0.1:{closed_port()}/"
    outcome = sender.send(request(url))
    assert outcome == WebhookOutcome(False, None, "connection refused", None)


def test_a_host_that_does_not_resolve(sender):
    outcome = sender.send(request("http://nothing.invalid/hook"))
    assert outcome == WebhookOutcome(False, None, "no such host: nothing.invalid", None)


def test_tls_to_a_plain_http_server_is_a_tls_error(server, sender):
    url = f"https://127.0.0.1:{server.server_address[1]}/"
    outcome = sender.send(request(url))
    assert (outcome.ok, outcome.status) == (False, None)
    assert outcome.error is not None
    assert outcome.error.startswith("TLS error: ")


def test_a_private_peer_is_refused_at_call_time(server):
    with closing(HttpWebhookSender(allow_private=False)) as sender:
        outcome = sender.send(request(server.url))
        by_name = sender.send(request(server.url.replace("127.0.0.1", "localhost")))
    refused = "refused: 127.0.0.1 is a loopback address"
    assert outcome == WebhookOutcome(False, None, refused, None)
    assert by_name == WebhookOutcome(False, None, refused, None)
    assert server.received == []


@pytest.mark.parametrize("open_port", [True, False])
def test_a_refused_address_is_never_connected_to_so_open_and_closed_ports_read_alike(
    server, open_port, monkeypatch
):
    port = server.server_address[1] if open_port else closed_port()
    connects: list[object] = []
    real_connect = socket.socket.connect

    def connect(sock: socket.socket, address: object) -> None:
        connects.append(address)
        real_connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    with closing(HttpWebhookSender(allow_private=False)) as sender:
        outcome = sender.send(request(f"http://127.0.0.1:{port}/hook"))
        by_name = sender.send(request(f"http://localhost:{port}/hook"))
    refused = "refused: 127.0.0.1 is a loopback address"
    assert outcome == WebhookOutcome(False, None, refused, None)
    assert by_name.error is not None and by_name.error.startswith("refused: ")
    assert connects == [] and server.connections == 0  # no connect was tried


class _FixedLookups:
    """A NameLookups that answers every name with the same addresses."""

    def __init__(self, *addresses: tuple[str, int]) -> None:
        self.infos = [
            (
                socket.AF_INET6 if ":" in host else socket.AF_INET,
                socket.SOCK_STREAM,
                socket.IPPROTO_TCP,
                "",
                (host, port, 0, 0) if ":" in host else (host, port),
            )
            for host, port in addresses
        ]
        self.asked: list[str] = []

    def addresses(self, host: str, port: int, family: int, within_s: float) -> list[object]:
        self.asked.append(host)
        return self.infos

    def close(self) -> None:
        pass


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("2002:7f00:1::", "a loopback"),
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "a loopback"),
        ("64:ff9b::7f00:1", "a loopback"),
        ("64:ff9b:1::a9fe:a9fe", "a link-local"),
        ("::ffff:127.0.0.1", "a loopback"),
        ("10.0.0.1", "a private"),
    ],
)
def test_a_name_resolving_to_an_ipv6_form_of_a_refused_address_is_refused_unconnected(
    address, kind, monkeypatch
):
    connects: list[object] = []
    monkeypatch.setattr(socket.socket, "connect", lambda sock, to: connects.append(to))
    lookups = _FixedLookups((address, 80))
    with closing(HttpWebhookSender(allow_private=False, lookups=lookups)) as sender:  # type: ignore[arg-type]
        outcome = sender.send(request("http://hooks.example.com/ring"))
    assert outcome == WebhookOutcome(False, None, f"refused: {address} is {kind} address", None)
    assert lookups.asked == ["hooks.example.com"] and connects == []


def test_of_the_addresses_a_name_resolves_to_only_the_allowed_are_connected_to(monkeypatch):
    """127.0.0.1 stands for an internal address and 127.0.0.2 for a public one."""
    internal, public = _Server(), _Server(("127.0.0.2", 0))
    threads = [
        threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.05})
        for s in (internal, public)
    ]
    for thread in threads:
        thread.start()
    monkeypatch.setattr(
        webhook_connections,
        "forbidden_kind",
        lambda address: "private" if str(address) == "127.0.0.1" else None,
    )
    lookups = _FixedLookups(
        ("127.0.0.1", internal.server_address[1]), ("127.0.0.2", public.server_address[1])
    )
    try:
        with closing(HttpWebhookSender(allow_private=False, lookups=lookups)) as sender:  # type: ignore[arg-type]
            outcome = sender.send(request("http://hooks.example.com/ring"))
        assert outcome.ok, outcome
        assert internal.connections == 0 and public.connections == 1
    finally:
        for s in (internal, public):
            s.shutdown()
            s.server_close()
        for thread in threads:
            thread.join()


def test_sequential_sends_reuse_one_connection(server, sender):
    server.answer = Answer(body=b"thanks" * 1000)
    outcomes = [sender.send(request(server.url, message_id=f"m{n}")) for n in range(5)]
    assert all(outcome.ok for outcome in outcomes)
    assert len(server.received) == 5
    assert server.connections == 1


def test_an_answer_of_64_kib_keeps_its_connection(server, sender):
    server.answer = Answer(body=b"x" * (64 * 1024))
    assert sender.send(request(server.url)).ok
    assert sender.send(request(server.url)).ok
    assert server.connections == 1


def test_an_answer_over_64_kib_fails_and_costs_its_connection(server, sender):
    server.answer = Answer(body=b"x" * (64 * 1024 + 1))
    over = WebhookOutcome(False, None, "answer over 64 KiB", None)
    assert sender.send(request(server.url)) == over
    assert sender.send(request(server.url)) == over
    assert server.connections == 2


def test_an_error_answer_over_64_kib_keeps_its_status(server, sender):
    server.answer = Answer(status=500, body=b"x" * (65 * 1024))
    assert sender.send(request(server.url)) == WebhookOutcome(False, 500, "HTTP 500", None)
    assert sender.send(request(server.url)).status == 500
    assert server.connections == 2


def test_calls_in_flight_are_bounded_by_max_connections(server, sender):
    server.answer = Answer(delay_s=0.15)
    with ThreadPoolExecutor(max_workers=6) as pool:
        outcomes = list(pool.map(sender.send, [request(server.url, max_connections=2)] * 6))
    assert all(outcome.ok for outcome in outcomes)
    assert server.most_in_flight == 2
    assert server.connections == 2


def test_a_bad_secret_is_an_outcome_not_an_exception(server, sender):
    outcome = sender.send(request(server.url, secrets=("whsec_",)))
    assert (outcome.ok, outcome.status) == (False, None)
    assert outcome.error is not None
    assert outcome.error.startswith("cannot sign: ")
    assert server.received == []


def test_a_closed_sender_sends_nothing(server):
    sender = HttpWebhookSender(allow_private=True)
    assert sender.send(request(server.url)).ok
    sender.close()
    assert sender.send(request(server.url)) == WebhookOutcome(False, None, "sender is closed", None)
    assert len(server.received) == 1


def test_new_secrets_are_32_random_bytes():
    first, second = new_secret(), new_secret()
    assert first.startswith("whsec_")
    assert len(base64.b64decode(first.removeprefix("whsec_"), validate=True)) == 32
    assert first != second


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("ftp://example.com/file", "must start with http:// or https://, not ftp://"),
        ("example.com/hook", "must start with http:// or https://"),
        ("http:///hook", "has no host"),
        ("http://user:secret@example.com/", "must not carry a user name or password"),
        ("http://example.com:99999/", "has an invalid port"),
        ("http://exa mple.com/", "without spaces or control characters"),
        ("http://example.com/" + "a" * 2048, "is longer than 2048 characters"),
        ("http://127.0.0.1/", "points to 127.0.0.1, a loopback address"),
        ("http://10.0.0.1/", "points to 10.0.0.1, a private address"),
        ("http://169.254.169.254/latest/", "points to 169.254.169.254, a link-local address"),
        ("http://[::1]:8080/", "points to ::1, a loopback address"),
        ("http://[::ffff:127.0.0.1]/", "points to ::ffff:127.0.0.1, a loopback address"),
        ("http://[2002:7f00:1::]/", "points to 2002:7f00:1::, a loopback address"),
        ("http://[64:ff9b:1::a00:1]/", "points to 64:ff9b:1::a00:1, a private address"),
        (
            "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/",
            "points to 2001:0:4136:e378:8000:63bf:80ff:fffe, a loopback address",
        ),
        ("http://100.64.0.1/", "points to 100.64.0.1, a carrier-grade NAT address"),
        ("http://0.0.0.0/", "points to 0.0.0.0, an unspecified address"),
        ("http://localhost/", "host localhost resolves to"),
        ("http://nothing.invalid/", "host nothing.invalid does not resolve"),
    ],
)
def test_check_target_refuses(url, problem):
    with pytest.raises(ValidationError) as refused:
        check_target(url, allow_private=False)
    assert refused.value.field == "webhook_url"
    assert problem in refused.value.message
    if "address" in problem:  # says how its operator would allow it
        assert "CLOCK_WEBHOOK_ALLOW_PRIVATE=true" in refused.value.message


def test_the_refusal_names_the_setting_that_allows_private_targets():
    assert ALLOW_PRIVATE_SETTING == "CLOCK_WEBHOOK_ALLOW_PRIVATE"
    assert "webhook_allow_private" in {f.name for f in dataclasses.fields(Settings)}


def test_check_target_refuses_a_decimal_form_of_loopback():
    with pytest.raises(ValidationError, match=r"loopback|does not resolve"):
        check_target("http://2130706433/", allow_private=False)


def test_check_target_normalizes_what_it_accepts():
    assert (
        check_target("HTTP://127.0.0.1:8080/hook?x=1#part", allow_private=True)
        == "http://127.0.0.1:8080/hook?x=1"
    )
    assert check_target("https://127.0.0.1:443", allow_private=True) == "https://127.0.0.1/"
    assert check_target("http://[::1]:80/a", allow_private=True) == "http://[::1]/a"
    assert check_target("http://LOCALHOST:9000/", allow_private=True) == "http://localhost:9000/"


def test_check_target_with_private_allowed_still_wants_a_resolving_host():
    with pytest.raises(ValidationError, match="does not resolve"):
        check_target("http://nothing.invalid/", allow_private=True)
    with pytest.raises(ValidationError, match="user name or password"):
        check_target("http://a:b@127.0.0.1/", allow_private=True)


@pytest.mark.parametrize(
    "address",
    [
        "8.8.8.8",
        "1.1.1.1",
        "2001:4860::8888",
        "2606:4700::1111",
        "2002:808:808::",  # 6to4 of 8.8.8.8
        "64:ff9b::808:808",  # NAT64 of 8.8.8.8
    ],
)
def test_public_addresses_are_allowed(address):
    assert forbidden_kind(ip_address(address)) is None


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("127.9.9.9", "loopback"),
        ("::1", "loopback"),
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("172.31.255.255", "private"),
        ("192.168.1.1", "private"),
        ("fd12:3456::1", "private"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("100.64.0.1", "carrier-grade NAT"),
        ("100.127.255.254", "carrier-grade NAT"),
        ("240.0.0.1", "reserved"),
        ("255.255.255.255", "reserved"),
        ("192.0.2.1", "non-public"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:10.0.0.1", "private"),
        ("::ffff:169.254.169.254", "link-local"),
        ("64:ff9b::a9fe:a9fe", "link-local"),
        ("64:ff9b::7f00:1", "loopback"),
        # 6to4 (2002::/16) carries an IPv4 address in bits 16 to 47
        ("2002:7f00:1::", "loopback"),
        ("2002:7f00:1:ffff::1", "loopback"),
        ("2002:a00:1::", "private"),
        ("2002:a9fe:a9fe::", "link-local"),
        ("2002::", "unspecified"),
        # Teredo (2001::/32): the client's IPv4 address, inverted, in the last 32 bits
        ("2001:0:4136:e378:8000:63bf:80ff:fffe", "loopback"),
        ("2001:0:4136:e378:8000:63bf:f5ff:fffe", "private"),
        ("2001:0:4136:e378:8000:63bf:f7f7:f7f7", "non-public"),
        # local-use NAT64 (64:ff9b:1::/48)
        ("64:ff9b:1::7f00:1", "loopback"),
        ("64:ff9b:1::a00:1", "private"),
        ("64:ff9b:1::808:808", "local-use NAT64"),
    ],
)
def test_non_public_addresses_are_refused(address, kind):
    assert forbidden_kind(ip_address(address)) == kind


def test_a_request_the_sender_cannot_make_is_an_outcome(sender):
    assert sender.send(request("ftp://127.0.0.1/x")) == WebhookOutcome(
        False, None, "invalid URL: not an http or https URL with a host", None
    )
    outcome = sender.send(request("http://127.0.0.1:1/", max_connections=0))
    assert outcome.error == "failed: max_connections must be at least 1, not 0"


def test_a_webhook_url_is_never_logged_with_its_query_string(server, sender, caplog):
    """At DEBUG urllib3 logs each request line, query string included: a receiver's token."""
    configure_logging("INFO")  # what the entry point does; the level is raised below
    url = server.url.replace("?x=1", "?token=s3cr3t-t0ken&x=1")
    urllib3_logger = logging.getLogger("urllib3")
    urllib3_logger.setLevel(logging.DEBUG)  # as an operator chasing a webhook problem might
    try:
        with caplog.at_level(logging.DEBUG):
            assert sender.send(request(url)).ok
            assert sender.send(request(url.replace("/hooks/", "/missing/"))).ok
    finally:
        urllib3_logger.setLevel(logging.WARNING)
    assert server.received[0].path == "/hooks/ring?token=s3cr3t-t0ken&x=1"
    lines = [record.getMessage() for record in caplog.records if record.name.startswith("urllib3")]
    assert any("/hooks/ring?***" in line for line in lines), lines
    assert "s3cr3t" not in caplog.text
