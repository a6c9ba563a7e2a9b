"""Shared fixtures: every store test runs on SQLite and on the real MariaDB."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import delete

from clock_server.api import create_app
from clock_server.metrics import Metrics
from clock_server.runtime.build import build
from clock_server.runtime.build_api import build_services
from clock_server.runtime.http_server import create_http_server
from clock_server.settings import Settings
from clock_server.store import migrate
from clock_server.store.alarms import AlarmStore
from clock_server.store.db import open_database
from clock_server.store.schema import alarm_table as clock_table
from clock_server.store.schema import (
    application_table,
    engine_table,
    event_table,
    job_lease_table,
    minute_stats_table,
    rate_bucket_table,
    schedule_table,
)
from clock_server.testing import InMemoryPublisher, SettableClock
from tests.support import (
    AMQP_URL,
    Cluster,
    delete_exchange,
    mariadb_database,
    stop_waitress,
    unique,
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests of the live server are marked as such (and as needing both servers); fault cases
    stop the shared MariaDB and RabbitMQ, so they run after everything else."""
    for item in items:
        if "live_server" in getattr(item, "fixturenames", ()):
            for marker in ("live", "mariadb", "rabbitmq"):
                item.add_marker(marker)
    items.sort(key=lambda item: item.get_closest_marker("fault") is not None)


@pytest.fixture(scope="session")
def mariadb_url() -> Iterator[str]:
    with mariadb_database() as url:
        yield url


@pytest.fixture(scope="session")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    url = f"sqlite:///{tmp_path_factory.mktemp('db') / 'clock.db'}"
    db = open_database(url)
    migrate.upgrade(db)
    db.dispose()
    return url


@pytest.fixture(params=["sqlite", pytest.param("mariadb", marks=pytest.mark.mariadb)])
def db_url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{request.param}_url"))


@pytest.fixture
def store(db_url: str) -> Iterator[AlarmStore]:
    yield from _empty_store(db_url)


@pytest.fixture
def mariadb_store(mariadb_url: str) -> Iterator[AlarmStore]:
    """The store on MariaDB alone, for what SQLite cannot show (row locks)."""
    yield from _empty_store(mariadb_url)


def _empty_store(url: str) -> Iterator[AlarmStore]:
    db = open_database(url, pool_size=10)
    with db.begin() as conn:
        conn.execute(delete(clock_table))
        conn.execute(delete(event_table))
        conn.execute(delete(engine_table))
        conn.execute(delete(application_table))
        conn.execute(delete(rate_bucket_table))
        conn.execute(delete(minute_stats_table))
        conn.execute(delete(schedule_table))
        conn.execute(delete(job_lease_table))
    yield AlarmStore(db)
    leaked = db.pool.checkedout()  # type: ignore[attr-defined]
    db.dispose()
    assert leaked == 0, f"{leaked} database connections were not returned to the pool"


@pytest.fixture
def fake_clock() -> SettableClock:
    return SettableClock()


@pytest.fixture
def publisher() -> InMemoryPublisher:
    return InMemoryPublisher()


class RecordingNotifier:
    """Engine twin for API tests: remembers which due times it was told about."""

    def __init__(self) -> None:
        self.due: list[int] = []

    def notify_due(self, due_ms: int) -> None:
        self.due.append(due_ms)


@dataclass
class ApiHarness:
    client: object
    store: AlarmStore
    clock: SettableClock
    notifier: RecordingNotifier
    publisher: InMemoryPublisher
    settings: Settings


@pytest.fixture
def api(store: AlarmStore, fake_clock: SettableClock, publisher: InMemoryPublisher) -> ApiHarness:
    settings = Settings(
        payload_max_bytes=1024, batch_max_items=50, list_max_limit=100, batch_max_bytes=200_000
    )
    notifier = RecordingNotifier()
    services = build_services(
        settings, store, fake_clock, Metrics(), engine=notifier, publisher=publisher
    )
    app = create_app(services)
    return ApiHarness(app.test_client(), store, fake_clock, notifier, publisher, settings)


@dataclass
class LiveServer:
    base_url: str
    amqp_url: str
    exchange: str
    database_url: str


@pytest.fixture(scope="session")
def live_server() -> Iterator[LiveServer]:
    """A whole clock service (API + engine) on real MariaDB and RabbitMQ, in this process,
    served by the production WSGI server."""
    exchange = unique("clock_test_")
    with mariadb_database("clock_live") as url:
        settings = Settings(
            database_url=url,
            amqp_url=AMQP_URL,
            exchange=exchange,
            preload_window_s=2,
            preload_interval_s=0.2,
            lease_s=5,
            retry_base_s=0.2,
            retry_cap_s=1,
        )
        runtime = build(settings)
        runtime.start()
        assert runtime.publisher is not None and runtime.publisher.wait_healthy(10)
        listener = socket.create_server(("127.0.0.1", 0))
        server = create_http_server(runtime.app, settings, sockets=[listener])
        thread = threading.Thread(target=server.run, name="live-http", daemon=True)
        thread.start()
        port = listener.getsockname()[1]
        try:
            yield LiveServer(f"http://127.0.0.1:{port}", AMQP_URL, exchange, url)
        finally:
            stop_waitress(server, thread)
            runtime.stop()
            delete_exchange(exchange)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    """clock-server processes on a fresh MariaDB database, with a collector on RabbitMQ."""
    with mariadb_database() as url:
        group = Cluster(url, tmp_path)
        try:
            yield group
        finally:
            group.close()
