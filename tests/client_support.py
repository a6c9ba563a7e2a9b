"""A local HTTP server that answers from a script and records what it got: the clients'
request encoding, error mapping and retry policy are pinned down against it."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

T0 = 1_900_000_000_000  # a fixed future instant, epoch ms


def alarm_json(alarm_id: int = 1, **overrides: Any) -> dict[str, Any]:
    alarm = {
        "id": alarm_id,
        "application": "billing",
        "business_id": f"order-{alarm_id}",
        "payload": "{}",
        "target_ring_at": T0,
        "latest_ring_at": None,
        "next_try_time": T0,
        "retry_times": 0,
        "status": "pending",
        "rung_at": None,
        "created_at": T0 - 60_000,
        "updated_at": T0 - 60_000,
    }
    alarm.update(overrides)
    return alarm


def error_json(code: str, message: str, field: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "field": field, **extra}}


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


@dataclass
class Canned:
    status: int
    body: bytes
    content_type: str = "application/json"
    delay: float = 0.0


@dataclass
class CannedServer:
    """Answers each request with the next scripted response and records what it got."""

    script: deque[Canned] = field(default_factory=deque)
    requests: list[Recorded] = field(default_factory=list)
    httpd: ThreadingHTTPServer | None = None

    def reply(self, status: int, body: Any = None, *, delay: float = 0.0) -> None:
        if isinstance(body, bytes | str):
            raw = body.encode() if isinstance(body, str) else body
            self.script.append(Canned(status, raw, "text/html", delay))
        else:
            self.script.append(Canned(status, json.dumps(body).encode(), delay=delay))

    @property
    def base_url(self) -> str:
        assert self.httpd is not None
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"


def handler_for(server: CannedServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as a real server would

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            url = urlsplit(self.path)
            server.requests.append(
                Recorded(
                    self.command,
                    url.path,
                    parse_qs(url.query),
                    dict(self.headers.items()),
                    json.loads(raw) if raw else None,
                )
            )
            canned = server.script.popleft() if server.script else Canned(500, b"no script")
            time.sleep(canned.delay)
            self.send_response(canned.status)
            self.send_header("Content-Type", canned.content_type)
            self.send_header("Content-Length", str(len(canned.body)))
            self.end_headers()
            self.wfile.write(canned.body)

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _handle

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def serve_canned() -> Iterator[CannedServer]:
    """A CannedServer on a free port of 127.0.0.1, until the generator is closed."""
    server = CannedServer()
    server.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler_for(server))
    # A reply written after the client timed out fails; that is the point, not news.
    server.httpd.handle_error = lambda request, client_address: None  # type: ignore[method-assign]
    thread = threading.Thread(target=server.httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    yield server
    server.httpd.shutdown()
    server.httpd.server_close()
    thread.join(5)
