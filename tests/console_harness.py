"""A whole clock server for the console's browser tests: the API and an engine on real MariaDB
and RabbitMQ, served by waitress, with the engine stepped on a fake clock; and Chromium."""

from __future__ import annotations

import os
import shutil
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pika
import pytest
import requests

from clock_server.api.tokens import load_tokens
from clock_server.deadline import Deadline
from clock_server.runtime.build import Runtime, build
from clock_server.runtime.http_server import create_http_server
from clock_server.settings import Settings
from clock_server.testing import SettableClock
from tests.support import (
    AMQP_URL,
    delete_exchange,
    mariadb_database,
    settle,
    stop_waitress,
    unique,
)

CHROMIUM = os.environ.get("CLOCK_TEST_CHROMIUM", "/usr/bin/chromium")
ADMIN = "console-admin-token-0123456789"
READER = "console-reader-token-0123456789"
ORDERS = "console-orders-token-0123456789"
TOKENS = f"{ADMIN}=*; {READER}=*:read; {ORDERS}=orders"


def chromium() -> str:
    """Chromium's path; a test that needs it fails, never skips, when it is missing."""
    path = CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium")
    if path is None:
        pytest.fail(
            "chromium is not installed: it comes with Debian's chromium package "
            "(apt-get install --no-install-recommends chromium); .ci/run installs it"
        )
    return path


class ConsoleServer:
    """The server, its fake clock and its engine, which rings only when a test steps it.

    Queues are not declared by the server: a test binds one per application that should be
    rung, and the alarms of any other application are returned by the broker as unroutable,
    so their publishes fail for real."""

    def __init__(self, runtime: Runtime, clock: SettableClock, base_url: str, exchange: str):
        self.runtime = runtime
        self.clock = clock
        self.base_url = base_url
        self.exchange = exchange
        self.http = requests.Session()
        self.queues: list[str] = []

    def api(self, method: str, path: str, token: str = ADMIN, **kwargs: Any) -> Any:
        headers = {"Authorization": f"Bearer {token}"}
        response = self.http.request(method, self.base_url + path, headers=headers, **kwargs)
        assert response.status_code < 300, (method, path, response.status_code, response.text)
        return response.json()

    def create(self, application: str, business_id: str, payload: str, **times: int) -> Any:
        body = {"application": application, "business_id": business_id, "payload": payload}
        return self.api("POST", "/v1/alarms", json={**body, **times})

    def bind(self, application: str) -> None:
        """A queue for `application`, so that its alarms ring."""
        queue = f"clock.{application}.{self.exchange}"
        with _channel() as channel:
            channel.queue_declare(queue, auto_delete=False)
            channel.queue_bind(queue, self.exchange, routing_key=application)
        self.queues.append(queue)

    def step(self, to_ms: int | None = None) -> None:
        """Move the clock to `to_ms`, let the engine beat, claim and ring what is due, and
        write the per-minute statistics counted so far."""
        if to_ms is not None:
            self.clock.set(to_ms)
        engine = self.runtime.engine
        assert engine is not None and self.runtime.stats is not None
        engine.liveness.run_once()
        engine.preloader.run_once()
        settle(engine, self.clock)
        if self.runtime.stats is not None:  # as its thread does every few seconds
            self.runtime.stats.run_once()

    def close(self) -> None:
        with _channel() as channel:
            for queue in self.queues:
                channel.queue_delete(queue)
        self.http.close()


@contextmanager
def _channel() -> Iterator[Any]:
    connection = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    try:
        yield connection.channel()
    finally:
        connection.close()


@contextmanager
def console_server(now_ms: int, **overrides: Any) -> Iterator[ConsoleServer]:
    """The server on a fresh database, with these settings besides the tests' own."""
    exchange = unique("clock_console_")
    clock = SettableClock(now_ms)
    with mariadb_database("clock_console") as url:
        settings = Settings(
            database_url=url,
            amqp_url=AMQP_URL,
            exchange=exchange,
            declare_queues=False,
            retry_base_s=1,
            retry_cap_s=1,
            retry_max=3,
            engine_dead_after_s=20,
            **overrides,
        )
        runtime = build(settings, clock=clock, tokens=load_tokens(TOKENS, ""))
        assert runtime.publisher is not None and runtime.engine is not None
        runtime.publisher.start()
        assert runtime.publisher.wait_healthy(10)
        runtime.engine.liveness.join()
        listener = socket.create_server(("127.0.0.1", 0))
        server = create_http_server(runtime.app, settings, sockets=[listener])
        thread = threading.Thread(target=server.run, name="console-http", daemon=True)
        thread.start()
        port = listener.getsockname()[1]
        console = ConsoleServer(runtime, clock, f"http://127.0.0.1:{port}", exchange)
        try:
            yield console
        finally:
            console.close()
            stop_waitress(server, thread)
            runtime.engine.liveness.leave()
            if runtime.engine.webhooks is not None:  # its calls' watchdog and connections
                runtime.engine.webhooks.close(Deadline(5))
            runtime.publisher.close(5)
            runtime.store.close()
            delete_exchange(exchange)
