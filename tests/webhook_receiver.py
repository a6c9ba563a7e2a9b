"""A real HTTP server in the test process that takes webhooks and answers as a test says."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


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
        deadline = time.monotonic() + timeout_s
        with self._arrived:
            while len(self.received) < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{len(self.received)} of {count} webhooks arrived")
                self._arrived.wait(left)
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
