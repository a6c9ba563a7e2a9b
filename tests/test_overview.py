"""GET /v1/overview and the store behind it: counts that stop at their cap, alarms due soon,
the pull consumers' time from due to ack, the engine's lateness from the per-minute
statistics, and who may read it. On SQLite and MariaDB."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from clock_server.api import create_app
from clock_server.api.tokens import load_tokens
from clock_server.metrics import Metrics
from clock_server.minute_stats import BUCKETS, MINUTE_MS, MinuteCounts, bucket_of, minute_of
from clock_server.model import PULL, ApplicationPolicy, NewAlarm
from clock_server.runtime.build_api import build_services
from clock_server.settings import Settings
from clock_server.slot_space import SlotRange
from clock_server.store.alarms import AlarmStore
from clock_server.store.applications import SqlApplicationRegistry
from clock_server.store.claims import SqlClaimStore
from clock_server.store.engine_registry import SqlEngineRegistry
from clock_server.store.minute_stats import SqlMinuteStats
from clock_server.store.overview import CappedCount, OverviewReader
from clock_server.store.secret_box import SecretBox
from clock_server.testing import SettableClock

NOW = 1_700_000_000_000
ADMIN = "overview-admin-token-0123"
READER = "overview-reader-token-0123"
ORDERS = "overview-orders-token-0123"


def add(store: AlarmStore, application: str, count: int, due_ms: int) -> list[int]:
    made = [
        store.create(NewAlarm(application, f"{application}-{due_ms}-{n}", "p", due_ms, None), NOW)
        for n in range(count)
    ]
    return [alarm.id for alarm, _ in made]


def ring(
    store: AlarmStore, late_ms: list[int], target_ms: int, application: str = "pulled"
) -> None:
    """Ring `len(late_ms)` alarms of `application` due at `target_ms`, each that late."""
    ids = add(store, application, len(late_ms), target_ms)
    claims = SqlClaimStore(store)
    claims.load_due(target_ms, 1_000)
    with claims.ring_transaction() as tx:
        rung = [(i, target_ms + late) for i, late in zip(ids, late_ms, strict=True)]
        tx.mark_rung(rung, target_ms + max(late_ms))  # finished then: its next_try_time


def test_counts_stop_at_their_cap(store: AlarmStore):
    add(store, "big", 5, NOW + 10_000)
    add(store, "small", 1, NOW - 1)
    found = OverviewReader(store, cap=3, application_cap=2).read(NOW, [60_000], 300_000)
    assert found.by_status["pending"] == CappedCount(3, True)
    assert found.by_status["dead"] == CappedCount(0, False)
    assert found.by_application == {
        "big": {"pending": CappedCount(2, True), "dead": CappedCount(0, False)},
        "small": {"pending": CappedCount(1, False), "dead": CappedCount(0, False)},
    }
    assert found.overdue == CappedCount(1, False)
    assert found.due_within == {60_000: CappedCount(3, True)}
    exact = OverviewReader(store).read(NOW, [5_000, 10_001], 300_000)
    assert exact.by_status["pending"] == CappedCount(6, False)
    assert exact.due_within == {5_000: CappedCount(0, False), 10_001: CappedCount(5, False)}


def test_pull_acks_of_the_latest_rings_within_the_window(store: AlarmStore):
    registry = SqlApplicationRegistry(store, SecretBox.from_setting(""))
    registry.put(ApplicationPolicy(name="pulled", channel=PULL), NOW)
    ring(store, [5] * 98 + [40, 900], NOW - 1_000)
    ring(store, [60_000], NOW - 400_000)  # rung before the window
    ring(store, [7_000], NOW - 2_000, application="published")  # not a pull application
    found = OverviewReader(store).read(NOW, [], 300_000).pull_ack
    assert (found.sample, found.p50_ms, found.p99_ms, found.max_ms) == (100, 5, 40, 900)
    sampled = OverviewReader(store, lateness_sample=10).read(NOW, [], 300_000).pull_ack
    assert sampled.sample == 10
    assert OverviewReader(store).read(NOW, [], 50).pull_ack.p50_ms is None  # finished at NOW - 100


def test_the_overview_lateness_is_the_engine_s_from_the_last_minutes(store: AlarmStore):
    late = MinuteCounts(rung=100, lateness=[0] * BUCKETS)
    late.lateness[bucket_of(4)] = 98  # (2, 5]
    late.lateness[bucket_of(800)] = 2  # (500, 1000]
    minute = minute_of(NOW)
    SqlMinuteStats(store).add(
        {
            (minute, "a"): late,
            (minute - 4 * MINUTE_MS, "b"): MinuteCounts(rung=0, lateness=[0] * BUCKETS),
            (minute - 5 * MINUTE_MS, "b"): MinuteCounts(rung=5, lateness=[0] * (BUCKETS - 1) + [5]),
        }
    )
    client = create_app(build_services(Settings(), store, SettableClock(NOW), Metrics()))
    body = client.test_client().get("/v1/overview").get_json()
    assert body["lateness"]["window_ms"] == 300_000
    assert body["lateness"]["sample"] == 100
    assert 2 < body["lateness"]["p50_ms"] <= 5
    assert 500 < body["lateness"]["p99_ms"] <= 1000
    assert (body["lateness"]["max_ms"], body["lateness"]["over_max"]) == (1000, False)
    assert body["pull_ack"] == {
        "window_ms": 300_000,
        "sample": 0,
        "p50_ms": None,
        "p99_ms": None,
        "max_ms": None,
    }


def test_a_ring_days_late_reads_over_the_last_bound_a_day(store: AlarmStore):
    late = MinuteCounts(rung=3, lateness=[0] * BUCKETS)
    late.lateness[bucket_of(0)] = 1
    late.lateness[bucket_of(40 * MINUTE_MS)] = 1  # (15 min, 1 h]
    late.lateness[bucket_of(3 * 86_400_000)] = 1  # 3 days
    SqlMinuteStats(store).add({(minute_of(NOW), "a"): late})
    client = create_app(build_services(Settings(), store, SettableClock(NOW), Metrics()))
    lateness = client.test_client().get("/v1/overview").get_json()["lateness"]
    assert lateness["sample"] == 3
    assert 15 * MINUTE_MS < lateness["p50_ms"] <= 60 * MINUTE_MS
    assert (lateness["p99_ms"], lateness["max_ms"], lateness["over_max"]) == (
        86_400_000,
        86_400_000,
        True,
    )


def test_a_ring_on_time_to_the_millisecond_reads_0_ms(store: AlarmStore):
    on_time = MinuteCounts(rung=4, lateness=[0] * BUCKETS)
    on_time.lateness[bucket_of(0)] = 4
    SqlMinuteStats(store).add({(minute_of(NOW), "a"): on_time})
    client = create_app(build_services(Settings(), store, SettableClock(NOW), Metrics()))
    lateness = client.test_client().get("/v1/overview").get_json()["lateness"]
    assert (lateness["p50_ms"], lateness["p99_ms"], lateness["max_ms"]) == (0, 0, 0)


def test_the_documented_overview_has_the_server_s_caps_and_lateness_keys(store: AlarmStore):
    page = (Path(__file__).resolve().parent.parent / "docs" / "api.md").read_text("utf-8")
    example = page[page.index("`GET /v1/overview` answers") :]
    caps = re.search(r'"count_cap": (\d+), "application_count_cap": (\d+)', example)
    lateness = re.search(r'"lateness": (\{[^{}]*\})', example)
    pull_ack = re.search(r'"pull_ack": (\{[^{}]*\})', example)
    assert caps and lateness and pull_ack, "the overview's example in docs/api.md"
    client = create_app(build_services(Settings(), store, SettableClock(NOW), Metrics()))
    body = client.test_client().get("/v1/overview").get_json()
    assert (int(caps[1]), int(caps[2])) == (body["count_cap"], body["application_count_cap"])
    assert json.loads(lateness[1]).keys() == body["lateness"].keys()
    assert json.loads(pull_ack[1]).keys() == body["pull_ack"].keys()


def test_the_overview_needs_a_token_of_every_application(store: AlarmStore):
    tokens = f"{ADMIN}=*; {READER}=*:read; {ORDERS}=orders"
    services = build_services(
        Settings(tokens=tokens),
        store,
        SettableClock(NOW),
        Metrics(),
        tokens=load_tokens(tokens, ""),
    )
    client = create_app(services).test_client()
    add(store, "orders", 2, NOW + 30_000)

    def get(token: str | None) -> Any:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        with client.get("/v1/overview", headers=headers) as response:
            return response.status_code, response.get_json()

    assert get(None)[0] == 401
    assert get(ORDERS)[0] == 403
    for token in (ADMIN, READER):
        status, body = get(token)
        assert status == 200
        assert body["by_status"]["pending"] == {"count": 2, "capped": False}
        assert body["by_application"] == [
            {
                "application": "orders",
                "pending": {"count": 2, "capped": False},
                "dead": {"count": 0, "capped": False},
            }
        ]
        assert body["due"][0] == {"within_ms": 60_000, "count": 2, "capped": False}
        assert body["health"] == {
            "database": "ok",
            "broker": "disabled",
            "live_engines": 0,
            "engines": [],
        }


def test_the_overview_shows_each_engines_share_of_the_slots(store: AlarmStore):
    registry = SqlEngineRegistry(store)
    first = registry.register("first", 30_000, NOW)
    second = registry.register("second", 30_000, NOW)
    assert registry.heartbeat(first, NOW, SlotRange(0, 512))
    assert registry.heartbeat(second, NOW, SlotRange(512, 1024))
    client = create_app(build_services(Settings(), store, SettableClock(NOW), Metrics()))
    engines = client.test_client().get("/v1/overview").get_json()["health"]["engines"]
    assert [(e["instance_id"], e["slot_from"], e["slot_to"], e["share"]) for e in engines] == [
        ("first", 0, 512, 0.5),
        ("second", 512, 1024, 0.5),
    ]
