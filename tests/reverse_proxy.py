"""A reverse proxy for the tests, as an operator puts one in front of clock: it serves the
server under a path prefix (/clock/...), forwards each request without the prefix, passes the
client's Host on, and says the prefix in X-Forwarded-Prefix (replacing any the client sent).
Answers, redirects included, go back as they are: it rewrites nothing."""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

# Hop-by-hop headers (RFC 9110, 7.6.1), which a proxy does not pass on.
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
     "upgrade"}
)  # fmt: skip


def _handler(upstream: str, prefix: str) -> type[BaseHTTPRequestHandler]:
    target = urlsplit(upstream)
    host, port = target.hostname or "127.0.0.1", target.port

    class Forward(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self.forward()

        do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

        def forward(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else None
            if self.path != prefix and not self.path.startswith(prefix + "/"):
                self.answer(404, [("Content-Type", "text/plain")], b"not under the prefix\n")
                return
            headers = {
                name: value
                for name, value in self.headers.items()
                if name.lower() not in HOP_BY_HOP and name.lower() != "x-forwarded-prefix"
            }
            headers["X-Forwarded-Prefix"] = prefix
            connection = http.client.HTTPConnection(host, port, timeout=30)
            try:
                connection.request(self.command, self.path[len(prefix) :] or "/", body, headers)
                response = connection.getresponse()
                data = response.read()
                passed = [
                    (name, value)
                    for name, value in response.getheaders()
                    if name.lower() not in HOP_BY_HOP and name.lower() != "content-length"
                ]
                self.answer(response.status, passed, data)
            finally:
                connection.close()

        def answer(self, status: int, headers: list[tuple[str, str]], data: bytes) -> None:
            self.send_response_only(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:
            pass  # the server's own access lines tell what was asked

    return Forward


@contextmanager
def reverse_proxy(upstream: str, prefix: str = "/clock") -> Iterator[str]:
    """Serve `upstream` (http://host:port) under `prefix`; yields the proxy's base URL,
    http://127.0.0.1:<port>, to which the prefix is appended by the caller."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(upstream, prefix))
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, name="reverse-proxy", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
