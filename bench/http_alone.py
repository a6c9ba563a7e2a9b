"""The HTTP stack alone: what Flask and waitress serve here under scenario 4's wrk.

An app that answers POST /v1/alarms with the JSON it was sent (201), with no validation and no
database, served the way clock-server serves its API (its `create_http_server`: waitress with
CLOCK_HTTP_THREADS threads; one process per listening socket of one port, SO_REUSEPORT), so
that the single-create figure can be read against what the web stack costs by itself.

    python -m bench.http_alone [--seconds 10] [--processes 2]
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import subprocess
import sys
import time
from typing import Any

import requests
from flask import Flask, jsonify, request

from bench.clockserver import process_cpu_s
from bench.wrk_load import WrkCreate
from clock_server.runtime.build import build_web
from clock_server.runtime.http_server import create_http_server
from clock_server.runtime.sockets import listening_sockets
from clock_server.settings import Settings

LISTEN_FD = "CLOCK_BENCH_LISTEN_FD"
APP_ENV = "CLOCK_BENCH_APP"


def echo_app() -> Flask:
    app = Flask(__name__)

    @app.post("/v1/alarms")
    def create():  # type: ignore[no-untyped-def]
        return jsonify(request.get_json()), 201

    @app.get("/healthz")
    def healthz():  # type: ignore[no-untyped-def]
        return {"status": "ok"}

    return app


def http_alone_rate(duration_s: int, processes: int = 2) -> dict:  # type: ignore[type-arg]
    """wrk's figures (as scenario 4 reports them) against `processes` echo servers, and the
    CPU time those servers spent per request."""
    listeners = listening_sockets("127.0.0.1", 0, processes)
    port = listeners[0].getsockname()[1]
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "bench.http_alone", "--serve"],
            env={**os.environ, LISTEN_FD: str(listener.fileno())},
            pass_fds=(listener.fileno(),),
        )
        for listener in listeners
    ]
    for listener in set(listeners):
        listener.close()  # the children hold them now
    try:
        base_url = f"http://127.0.0.1:{port}"
        _wait_healthy(base_url, children)
        cpu_before = sum(process_cpu_s(child.pid) for child in children)
        figures = WrkCreate(base_url, "httpalone", duration_s).start().result()
        cpu_used = sum(process_cpu_s(child.pid) for child in children) - cpu_before
        return {**figures, "web_cpu_us_per_request": cpu_used * 1e6 / max(figures["requests"], 1)}
    finally:
        for child in children:
            child.terminate()
        for child in children:
            child.wait(10)


def _wait_healthy(base_url: str, children: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if any(child.poll() is not None for child in children):
            raise RuntimeError("an echo server exited at start")
        try:
            if requests.get(f"{base_url}/healthz", timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.1)
    raise RuntimeError("the echo servers did not answer within 20 s")


class _NoEngine:
    """Stands in for the engine and the broker: the API's own work, alone."""

    def notify_due(self, due_ms: int) -> None:
        pass

    def is_healthy(self) -> bool:
        return True


def served_app() -> Any:
    """The echo app, or with CLOCK_BENCH_APP=clock clock's own API on CLOCK_DATABASE_URL
    (a web worker's, without the engine: creates are stored and nothing rings)."""
    if os.environ.get(APP_ENV) != "clock":
        return echo_app()
    app, _store, _stats, _metrics = build_web(
        Settings.from_env(), notifier=_NoEngine(), broker=_NoEngine()
    )
    return app


def _serve() -> None:
    logging.getLogger("waitress").setLevel(logging.ERROR)  # its queue warnings, expected here
    listener = socket.socket(fileno=int(os.environ[LISTEN_FD]))
    server = create_http_server(served_app(), Settings.from_env(), sockets=[listener])
    try:
        server.run()
    finally:
        server.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        _serve()
        return
    figures = http_alone_rate(args.seconds, args.processes)
    print(f"{figures['requests_per_s']:,.0f} requests/s, p50 {figures['p50_ms']:.1f} ms, "
          f"p99 {figures['p99_ms']:.1f} ms, max {figures['max_ms']:.1f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
