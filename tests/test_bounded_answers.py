"""Answers of bounded size: a list page, a pull, never larger than CLOCK_PAGE_MAX_BYTES, and a
slow or greedy reader of one application never holds the server for the others.

The API tests run on SQLite and on MariaDB through the `store` fixture (see conftest.py).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import requests

from clock_server.api import create_app
from clock_server.metrics import Metrics
from clock_server.model import NewAlarm
from clock_server.runtime.build_api import build_services
from clock_server.settings import Settings
from clock_server.store import migrate
from clock_server.store.alarms import AlarmStore
from clock_server.store.db import open_database
from clock_server.testing import InMemoryPublisher, SettableClock
from tests.support import ServerProcess

HOUR = 3_600_000
# A payload of control characters: JSON writes each of its bytes as six ("\u0001").
WORST = "\x01"


def _harness(store: AlarmStore, clock: SettableClock, **settings: Any) -> Any:
    services = build_services(
        Settings(**settings), store, clock, Metrics(), publisher=InMemoryPublisher()
    )
    return create_app(services).test_client()


def _fill(store: AlarmStore, application: str, count: int, payload: str, now_ms: int) -> None:
    for start in range(0, count, 200):
        store.create_many(
            [
                NewAlarm(application, f"k{i:05}", payload, now_ms + HOUR + i, None)
                for i in range(start, min(start + 200, count))
            ],
            now_ms,
        )


def _pages(client: Any, query: dict[str, Any], cap: int) -> tuple[list[str], int]:
    """Every alarm's business_id, paging through with next_cursor; and how many pages."""
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        response = client.get("/v1/alarms", query_string={**query, "cursor": cursor or ""})
        assert response.status_code == 200, response.get_data(as_text=True)[:300]
        body = response.get_data()
        assert len(body) <= cap
        assert int(response.headers["Content-Length"]) == len(body)
        page = response.get_json()
        assert page["alarms"], "a page holds at least one alarm"
        seen += [alarm["business_id"] for alarm in page["alarms"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            return seen, pages


@pytest.mark.parametrize("query", [{}, {"due_from": "0"}, {"business_id_prefix": "k"}])
def test_a_page_ends_at_the_byte_cap_and_paging_gets_every_alarm_once(
    store: AlarmStore, fake_clock: SettableClock, query: dict[str, Any]
) -> None:
    """Small limits, the same rule: each page stops before the alarm that would take it over
    the cap and hands back its cursor, in each of the three orders."""
    cap = 6 * 1024 + 16_384  # the least CLOCK_PAGE_MAX_BYTES for 1 KiB payloads
    client = _harness(store, fake_clock, payload_max_bytes=1024, page_max_bytes=cap)
    _fill(store, "app", 40, WORST * 1024, fake_clock.now_ms())
    _fill(store, "small", 5, "p", fake_clock.now_ms())
    seen, pages = _pages(client, {"application": "app", "limit": "100", **query}, cap)
    assert seen == [f"k{i:05}" for i in range(40)]
    assert pages == 14  # three alarms of 6 KiB each per 22 KiB page
    small = client.get("/v1/alarms", query_string={"application": "small", "limit": "5"})
    assert len(small.get_json()["alarms"]) == 5
    assert small.get_json()["next_cursor"] is not None  # full by its limit, as before


def test_the_375_mib_page_answers_within_the_cap_in_pages(
    store: AlarmStore, fake_clock: SettableClock
) -> None:
    """1,000 alarms with 64 KiB payloads of control characters were one 375 MiB answer. With
    the default settings each page is at most 4 MiB, and paging gets every alarm once."""
    settings = Settings()
    client = _harness(store, fake_clock)
    _fill(store, "greedy", 1_000, WORST * settings.payload_max_bytes, fake_clock.now_ms())
    query = {"application": "greedy", "limit": "1000"}
    seen, pages = _pages(client, query, settings.page_max_bytes)
    assert sorted(seen) == [f"k{i:05}" for i in range(1_000)] and len(set(seen)) == 1_000
    assert pages == 100  # ten 394 KiB alarms per 4 MiB page


def _rss_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise AssertionError(field)


# Measured: one process serving the four readers peaked at about 160 MB, and the other
# application's slowest read took 0.7 s (SQLite; 2 cores shared with the readers).
RSS_BOUND_MB = 300
OTHER_READ_BOUND_S = 2.0  # the slowest read of another application: 4.8 s before the cap


@pytest.mark.process
def test_four_greedy_readers_keep_the_server_small_and_others_fast(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'clock.db'}"
    db = open_database(url)
    migrate.upgrade(db)
    store = AlarmStore(db)
    now_ms = int(time.time() * 1000)
    _fill(store, "greedy", 1_000, WORST * 65_536, now_ms)
    _fill(store, "other", 20, "p", now_ms)
    store.close()
    env = {"CLOCK_DATABASE_URL": url, "CLOCK_RUN_ENGINE": "false", "CLOCK_TOKENS": ""}
    server = ServerProcess(env, tmp_path / "server.log").start()
    assert server.process is not None
    seen: list[list[str]] = [[] for _ in range(4)]
    other_reads_s: list[float] = []
    done = threading.Event()

    def greedy(number: int) -> None:
        cursor = ""
        with requests.Session() as session:
            while True:
                query = {"application": "greedy", "limit": "1000", "cursor": cursor}
                answer = session.get(server.base_url + "/v1/alarms", params=query, timeout=60)
                assert len(answer.content) <= 4 * 1024 * 1024
                page = answer.json()
                seen[number] += [alarm["business_id"] for alarm in page["alarms"]]
                cursor = page["next_cursor"]
                if cursor is None:
                    return

    def other() -> None:
        with requests.Session() as session:
            while not done.is_set():
                started = time.monotonic()
                answer = session.get(
                    server.base_url + "/v1/alarms", params={"application": "other"}, timeout=60
                )
                other_reads_s.append(time.monotonic() - started)
                assert len(answer.json()["alarms"]) == 20
                done.wait(0.05)  # a read every 50 ms until the greedy readers are done

    try:
        readers = [threading.Thread(target=greedy, args=(n,)) for n in range(4)]
        watcher = threading.Thread(target=other)
        watcher.start()
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join(300)
        done.set()
        watcher.join(60)
        peak_mb = _rss_kb(server.process.pid, "VmHWM") / 1024
    finally:
        server.ensure_stopped()
    for keys in seen:
        assert sorted(keys) == [f"k{i:05}" for i in range(1_000)]
    assert peak_mb < RSS_BOUND_MB, peak_mb
    assert other_reads_s and max(other_reads_s) < OTHER_READ_BOUND_S, max(other_reads_s)
