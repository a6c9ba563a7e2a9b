"""The webhook application: a real HTTP server that records every call, and that the nemesis
makes fail (500), hang or answer slowly for a while.

Each call is recorded when it arrives, with what the receiver answers it: `accepted` is a
2xx answer, the receiver having taken the alarm (a hanging call is taken, and answered 200
once the hang ends, by when clock has given up on it). Signatures are not checked.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import orjson

from bench.chaos.records import Recorder, now_ms

MODES = ("ok", "fail", "hang", "slow")
SLOW_S = 1.0  # well within the application's webhook_timeout_s
HANG_S = 20.0  # well past it; ended at once when the receiver stops


class WebhookReceiver:
    def __init__(self, application: str, recorder: Recorder) -> None:
        self.application = application
        self.recorder = recorder
        self.mode = "ok"
        self._released = threading.Event()
        self._server = _QuietServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}/hook"

    def start(self) -> WebhookReceiver:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._released.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)

    def _answer(self, headers: dict[str, str], body: bytes) -> tuple[int, float]:
        mode = self.mode
        status, delay_s = {"fail": (500, 0.0), "hang": (200, HANG_S), "slow": (200, SLOW_S)}.get(
            mode, (204, 0.0)
        )
        try:
            message = orjson.loads(body)
        except orjson.JSONDecodeError:
            message = None
        self.recorder.write(
            {
                "channel": "webhook",
                "application": self.application,
                "received_ms": now_ms(),
                "webhook_id": headers.get("webhook-id"),
                "attempt_header": headers.get("clock-attempt"),
                "mode": mode,
                "accepted": 200 <= status < 300,
                "message": message,
            }
        )
        return status, delay_s

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", "0")))
                headers = {k.lower(): v for k, v in self.headers.items()}
                status, delay_s = receiver._answer(headers, body)
                if delay_s:
                    receiver._released.wait(delay_s)
                try:
                    self.send_response(status)
                    self.send_header("content-length", "0")
                    self.end_headers()
                except OSError:  # clock gave up on the call and closed its connection
                    self.close_connection = True

            def log_message(self, format: str, *args: object) -> None:
                return

        return Handler


class _QuietServer(ThreadingHTTPServer):
    """A connection clock closed under a call (a server killed, a call given up on) ends its
    thread without a traceback."""

    def handle_error(self, request: object, client_address: object) -> None:
        return
