"""The HTTP server against clients that hold connections or send what no route reads, on a
real clock-server process: slow connections cannot lock everyone out, and a body the app
would refuse is answered before it is sent."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.support import ServerProcess, eventually

ADMIN = "edge-admin-token-0123456789"
SIXTEEN_MIB = 16 * 1024 * 1024

pytestmark = pytest.mark.process


def _server(directory: Path, **env: str) -> ServerProcess:
    settings = {
        "CLOCK_DATABASE_URL": f"sqlite:///{directory / 'clock.db'}",
        "CLOCK_RUN_ENGINE": "false",
        "CLOCK_TOKENS": f"{ADMIN}=*",
        "CLOCK_TOKENS_FILE": "",
        **env,
    }
    return ServerProcess(settings, directory / "server.log").start()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """clock-server with the default HTTP settings and tokens."""
    directory = tmp_path_factory.mktemp("edge")
    process = _server(directory)
    try:
        yield process
    finally:
        process.ensure_stopped()
        assert "Traceback" not in (directory / "server.log").read_text()


@pytest.fixture(scope="module")
def impatient(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """clock-server that waits 1 s for headers and 2 s on an idle connection."""
    directory = tmp_path_factory.mktemp("impatient")
    process = _server(directory, CLOCK_HTTP_HEADER_TIMEOUT_S="1", CLOCK_HTTP_IDLE_TIMEOUT_S="2")
    try:
        yield process
    finally:
        process.ensure_stopped()


def _connect(server: ServerProcess, timeout_s: float = 5) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=timeout_s)


def _answer(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """Status, headers (lower-case names) and body of one answer with a Content-Length."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed before an answer: {data!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    while len(body) < int(headers.get("content-length", "0")):
        chunk = sock.recv(65536)
        if not chunk:
            break
        body += chunk
    return int(lines[0].split(" ", 2)[1]), headers, body


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes `sock` within `seconds`."""
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def _served_within(server: ServerProcess, seconds: float) -> float:
    started = time.monotonic()
    response = requests.get(
        server.base_url + "/v1/alarms?limit=1",
        headers={"Authorization": f"Bearer {ADMIN}"},
        timeout=seconds,
    )
    assert response.status_code == 200
    return time.monotonic() - started


# --- connections ---------------------------------------------------------------------------------


def test_two_hundred_slow_connections_leave_a_new_client_served(server: ServerProcess) -> None:
    idle = [_connect(server) for _ in range(100)]
    trickling = [_connect(server) for _ in range(100)]
    try:
        for sock in trickling:
            sock.sendall(b"POST /v1/alarms HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        for _ in range(5):
            for sock in trickling:
                sock.sendall(b"a")
            assert _served_within(server, 1.0) < 1.0
            time.sleep(0.2)
    finally:
        for sock in idle + trickling:
            sock.close()


def test_headers_that_trickle_past_their_deadline_are_cut_off(impatient: ServerProcess) -> None:
    with _connect(impatient) as sock:
        sock.sendall(b"GET /v1/alarms HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        started = time.monotonic()

        def cut_off() -> bool:
            with contextlib.suppress(OSError):
                sock.sendall(b"X-Slow: a\r\n")  # a byte now and then keeps it from idling
            return _closed_within(sock, 0.3)

        eventually(cut_off, 6, 0, "the trickling headers were not cut off")
        # the deadline, 1 s, and up to a second more for the server's loop to see it
        assert time.monotonic() - started < 4


def test_an_idle_connection_is_closed(impatient: ServerProcess) -> None:
    with _connect(impatient) as sock:
        started = time.monotonic()
        assert _closed_within(sock, 8)
        # 2 s idle, looked for every second; waitress's loop wakes at least once a second.
        # The lower bound is the promise: the server's own idle timeout, in real time.
        assert 1.5 < time.monotonic() - started < 6


def test_a_keep_alive_connection_serves_requests_in_turn(server: ServerProcess) -> None:
    with requests.Session() as session:
        session.headers["Authorization"] = f"Bearer {ADMIN}"
        for _ in range(3):
            assert session.get(server.base_url + "/v1/alarms?limit=1").status_code == 200


# --- bodies the app would not read ---------------------------------------------------------------


def _post_head(path: str, length: int, *extra: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json",
             f"Content-Length: {length}", *extra]  # fmt: skip
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_sixteen_mib_without_a_token_is_answered_before_it_is_sent(server: ServerProcess) -> None:
    with _connect(server, timeout_s=3) as sock:
        sock.sendall(_post_head("/v1/alarms/batch", SIXTEEN_MIB) + b"[" * 65536)
        status, headers, body = _answer(sock)  # with 16 MiB less 64 KiB still to send
        assert status == 401
        assert json.loads(body)["error"]["code"] == "unauthorized"
        assert headers["connection"] == "close"
        assert headers["x-content-type-options"] == "nosniff"
        assert _closed_within(sock, 3)


def test_the_sdk_way_of_sending_it_gets_the_401(server: ServerProcess) -> None:
    """requests, sending the whole body, still reads the answer the server gave early."""
    response = requests.post(
        server.base_url + "/v1/alarms/batch",
        data=b" " * SIXTEEN_MIB,
        headers={"Content-Type": "application/json"},
        timeout=10,
    )
    assert response.status_code == 401


def test_a_length_over_the_routes_limit_is_answered_before_it_is_sent(
    server: ServerProcess,
) -> None:
    bearer = f"Authorization: Bearer {ADMIN}"
    with _connect(server, timeout_s=3) as sock:
        sock.sendall(_post_head("/v1/alarms", 1024 * 1024, bearer) + b"{")
        status, _, body = _answer(sock)
        assert status == 413
        assert "over the limit of 409600" in json.loads(body)["error"]["message"]
    with _connect(server, timeout_s=3) as sock:  # asks first, and is told before sending
        sock.sendall(_post_head("/v1/alarms", 1024 * 1024, bearer, "Expect: 100-continue"))
        assert _answer(sock)[0] == 413
    with _connect(server, timeout_s=3) as sock:  # not JSON: 415 at once
        head = _post_head("/v1/alarms/cancel", 1000, bearer).replace(
            b"application/json", b"text/plain"
        )
        sock.sendall(head)
        assert _answer(sock)[0] == 415


def test_waitress_own_refusals_say_nosniff(server: ServerProcess) -> None:
    with _connect(server, timeout_s=3) as sock:
        sock.sendall(_post_head("/v1/alarms/batch", SIXTEEN_MIB + 1))  # over every route
        status, headers, _ = _answer(sock)
        assert status == 413 and headers["x-content-type-options"] == "nosniff"


def test_a_body_within_its_limit_is_read_and_served(server: ServerProcess) -> None:
    alarm = {"application": "edge", "business_id": "b", "payload": "p", "delay_ms": 600_000}
    body = json.dumps(alarm).encode()
    bearer = f"Authorization: Bearer {ADMIN}"
    with _connect(server, timeout_s=3) as sock:
        sock.sendall(_post_head("/v1/alarms", len(body), bearer, "Expect: 100-continue"))
        assert sock.recv(64).startswith(b"HTTP/1.1 100 Continue")
        sock.sendall(body)
        assert _answer(sock)[0] == 201
