"""/metrics measures the broker, the database and the live engines when it is scraped."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from flask.testing import FlaskClient
from prometheus_client.parser import text_string_to_metric_families

from clock_server.api import create_app
from clock_server.metrics import Metrics
from clock_server.runtime.build_api import build_services
from clock_server.settings import Settings
from clock_server.store.alarms import AlarmStore
from clock_server.store.db import open_database
from clock_server.store.engine_registry import SqlEngineRegistry
from clock_server.testing import SettableClock

ROOT = Path(__file__).resolve().parent.parent
HEALTH = ("clock_broker_up", "clock_database_up", "clock_live_engines")


def scrape(client: FlaskClient) -> dict[str, float]:
    response = client.get("/metrics")
    assert response.status_code == 200
    return {
        sample.name: sample.value
        for family in text_string_to_metric_families(response.get_data(as_text=True))
        for sample in family.samples
        if sample.name in HEALTH
    }


def test_a_healthy_service_with_one_engine(api) -> None:
    SqlEngineRegistry(api.store).register("a", 30_000, api.clock.now_ms())
    assert scrape(api.client) == {
        "clock_broker_up": 1.0,
        "clock_database_up": 1.0,
        "clock_live_engines": 1.0,
    }


def test_silent_and_dead_engines_do_not_count(api) -> None:
    registry = SqlEngineRegistry(api.store)
    now_ms = api.clock.now_ms()
    dead_after_ms = int(api.settings.engine_dead_after_s * 1000)
    registry.register("beating", 30_000, now_ms - dead_after_ms)
    registry.register("silent", 30_000, now_ms - dead_after_ms - 1)
    registry.register("dead", 30_000, now_ms - 10 * dead_after_ms)
    registry.declare_dead(now_ms - 5 * dead_after_ms, now_ms)
    assert scrape(api.client)["clock_live_engines"] == 1.0
    api.clock.advance(1)
    assert scrape(api.client)["clock_live_engines"] == 0.0


def test_no_engine_at_all(api) -> None:
    assert scrape(api.client)["clock_live_engines"] == 0.0


def test_a_broker_down_shows_as_zero(api) -> None:
    api.publisher.healthy = False
    assert scrape(api.client)["clock_broker_up"] == 0.0
    api.publisher.healthy = True
    assert scrape(api.client)["clock_broker_up"] == 1.0


def test_a_server_without_an_engine_has_no_broker_value(store: AlarmStore) -> None:
    services = build_services(Settings(run_engine=False), store, SettableClock(), Metrics())
    assert math.isnan(scrape(create_app(services).test_client())["clock_broker_up"])


def test_a_database_down_shows_as_zero_and_the_engines_as_unknown(tmp_path: Path) -> None:
    store = AlarmStore(open_database(f"sqlite:///{tmp_path / 'missing' / 'clock.db'}"))
    services = build_services(Settings(), store, SettableClock(), Metrics())
    values = scrape(create_app(services).test_client())
    store.close()
    assert values["clock_database_up"] == 0.0
    assert math.isnan(values["clock_live_engines"])


def test_with_several_processes_the_latest_value_wins(tmp_path: Path) -> None:
    """A web process that last saw the broker up must not hide another that sees it down."""
    script = textwrap.dedent(
        """
        import os
        from clock_server.metrics import Metrics, exposition

        metrics = Metrics()
        child = os.fork()
        if child == 0:
            Metrics().broker_up.set(1)
            os._exit(0)
        os.waitpid(child, 0)
        metrics.broker_up.set(0)
        print(exposition(metrics.registry).decode())
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "clock_broker_up 0.0" in result.stdout.splitlines()
