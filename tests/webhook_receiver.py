"""Real HTTP servers in the test process that take webhooks and answer as a test says: an
HTTP server (`Receiver`), and a raw one that writes any bytes at any pace (`RawReceiver`)."""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Received:
    """One POST as it arrived."""

    path: str
    headers: dict[str, str]  # names in lower case
    body: bytes
    at_s: float  # time.time() when it arrived

    @property
    def webhook_id(self) -> str:
        return self.headers["webhook-id"]

    @property
    def attempt(self) -> int:
        return int(self.headers["clock-attempt"])


@dataclass(frozen=True)
class Answer:
    """What the receiver answers: after `sleep_s`, `status` with `headers`."""

    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    sleep_s: float = 0.0


Policy = Callable[[Received], Answer]


class Receiver:
    """Records every POST; `policy` decides each answer (200 by default). `release()` ends
    every sleep at once, so that a test can stop a receiver that hangs on purpose."""

    def __init__(self, policy: Policy | None = None) -> None:
        self.policy: Policy = policy or (lambda _received: Answer())
        self.received: list[Received] = []
        self._lock = threading.Lock()
        self._arrived = threading.Condition(self._lock)
        self._released = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self._server.server_port}{path}"

    def start(self) -> Receiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def release(self) -> None:
        self._released.set()

    def wait_for(self, count: int, timeout_s: float = 5.0) -> list[Received]:
        """Every POST so far, once there are at least `count` (TimeoutError otherwise)."""
        with self._arrived:
            if not self._arrived.wait_for(lambda: len(self.received) >= count, timeout_s):
                raise TimeoutError(f"{len(self.received)} of {count} webhooks arrived")
            return list(self.received)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", "0"))
                received = Received(
                    self.path,
                    {k.lower(): v for k, v in self.headers.items()},
                    self.rfile.read(length),
                    time.time(),
                )
                with receiver._arrived:
                    receiver.received.append(received)
                    receiver._arrived.notify_all()
                answer = receiver.policy(received)
                if answer.sleep_s:
                    receiver._released.wait(answer.sleep_s)
                self.send_response(answer.status)
                for name, value in answer.headers:
                    self.send_header(name, value)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                return

        return Handler


@contextmanager
def receiving(policy: Policy | None = None) -> Iterator[Receiver]:
    receiver = Receiver(policy).start()
    try:
        yield receiver
    finally:
        receiver.stop()


class Wire:
    """One accepted connection, as a raw receiver's script writes to it. Every wait ends at
    once when the receiver stops; a write to a peer that has gone raises OSError."""

    def __init__(self, sock: socket.socket, stopping: threading.Event) -> None:
        self.sock = sock
        self._stopping = stopping

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def trickle(self, data: bytes, every_s: float, step: int = 1) -> None:
        """`data`, `step` bytes every `every_s` seconds."""
        for start in range(0, len(data), step):
            self.sock.sendall(data[start : start + step])
            if self.wait(every_s):
                return

    def wait(self, seconds: float | None = None) -> bool:
        """Sleep `seconds` (None: until the receiver stops); True when it stopped."""
        return self._stopping.wait(seconds)

    def close(self) -> None:
        """End the connection (its reader holds the socket open until then)."""
        socket.socket.shutdown(self.sock, socket.SHUT_RDWR)
        self.sock.close()


# A script answers the n-th request (from 0, over all connections) on its connection's wire;
# when it returns with the wire open, the connection reads the next request.
Script = Callable[[Wire, int], None]


class RawReceiver:
    """A TCP server on 127.0.0.1 (with TLS when given a server context) that reads each HTTP
    request and answers with whatever bytes, at whatever pace, its script writes: for
    answers no HTTP server library would send. `arrivals` holds time.monotonic() of each
    request as its head arrived."""

    def __init__(self, script: Script, tls: ssl.SSLContext | None = None) -> None:
        self.script = script
        self.arrivals: list[float] = []
        self.connections = 0
        self._tls = tls
        self._stopping = threading.Event()
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self._threads: list[threading.Thread] = []
        self._open: list[socket.socket] = []

    def url(self, path: str = "/hook") -> str:
        scheme = "https" if self._tls else "http"
        return f"{scheme}://127.0.0.1:{self._listener.getsockname()[1]}{path}"

    def start(self) -> RawReceiver:
        self._spawn(self._accept_all)
        return self

    def stop(self) -> None:
        self._stopping.set()
        self._threads[0].join(5)  # accepts no more
        with self._lock:
            for sock in self._open:
                with contextlib.suppress(OSError):
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)
        for thread in self._threads[1:]:
            thread.join(5)
        self._listener.close()

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        with self._lock:
            self._threads.append(thread)
        thread.start()

    def _accept_all(self) -> None:
        while not self._stopping.is_set():
            try:
                sock, _ = self._listener.accept()
            except TimeoutError:
                continue
            with self._lock:
                self.connections += 1
                self._open.append(sock)
            self._spawn(self._serve, sock)

    def _serve(self, sock: socket.socket) -> None:
        try:
            if self._tls is not None:
                sock.settimeout(5)
                sock = self._tls.wrap_socket(sock, server_side=True)
                with self._lock:
                    self._open.append(sock)
            sock.settimeout(None)
            reader = sock.makefile("rb")
            while not self._stopping.is_set() and _read_request(reader):
                with self._lock:
                    index = len(self.arrivals)
                    self.arrivals.append(time.monotonic())
                self.script(Wire(sock, self._stopping), index)
        except (OSError, ValueError):
            pass  # the client went away, or the script closed the wire
        finally:
            sock.close()


def _read_request(reader: Any) -> bool:
    """Read one request's head and body; False at the end of the stream."""
    length = 0
    while True:
        line = reader.readline()
        if not line:
            return False
        if line in (b"\r\n", b"\n"):
            break
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    return len(reader.read(length)) == length


@contextmanager
def raw_receiving(script: Script, tls: ssl.SSLContext | None = None) -> Iterator[RawReceiver]:
    receiver = RawReceiver(script, tls).start()
    try:
        yield receiver
    finally:
        receiver.stop()
