"""GET /v1/stats: one entry per minute in every series, zeros where nothing happened, who sees
what, and bad input refused with the field named. On SQLite and MariaDB."""

from __future__ import annotations

from typing import Any

import pytest

from clock_server.api import create_app
from clock_server.api.tokens import load_tokens
from clock_server.metrics import Metrics
from clock_server.minute_stats import BUCKETS, MINUTE_MS, MinuteCounts, bucket_of
from clock_server.runtime.build_api import build_services
from clock_server.settings import Settings
from clock_server.store.alarms import AlarmStore
from clock_server.store.minute_stats import SqlMinuteStats
from clock_server.testing import SettableClock

MINUTE = 1_764_300_000_000  # a minute's start
NOW = MINUTE + 4 * MINUTE_MS + 12_345  # in the fifth minute from MINUTE
ADMIN = "stats-admin-token-01234567"
READER = "stats-reader-token-0123456"
ORDERS = "stats-orders-token-0123456"


def counts(created: int = 0, rung: int = 0, failed: int = 0, late_ms: int = 0) -> MinuteCounts:
    one = MinuteCounts(created=created, rung=rung, failed=failed)
    if rung:
        one.lateness = [0] * BUCKETS
        one.lateness[bucket_of(late_ms)] = rung
        one.lateness_sum_ms = rung * late_ms
    return one


@pytest.fixture
def client(store: AlarmStore) -> Any:
    tokens = f"{ADMIN}=*; {READER}=*:read; {ORDERS}=orders"
    services = build_services(
        Settings(tokens=tokens),
        store,
        SettableClock(NOW),
        Metrics(),
        tokens=load_tokens(tokens, ""),
    )
    SqlMinuteStats(store).add(
        {
            (MINUTE + MINUTE_MS, "orders"): counts(created=120, rung=60, failed=3, late_ms=7),
            (MINUTE + 3 * MINUTE_MS, "orders"): counts(created=6),
            (MINUTE + MINUTE_MS, "billing"): counts(rung=30, late_ms=300),
            (MINUTE - MINUTE_MS, "billing"): counts(created=1_000),  # before the window
        }
    )
    return create_app(services).test_client()


def get(client: Any, token: str | None, query: str = "minutes=5") -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with client.get(f"/v1/stats?{query}", headers=headers) as response:
        return response.status_code, response.get_json()


def test_every_series_has_one_entry_per_minute_with_zeros_where_nothing_happened(client: Any):
    status, body = get(client, ADMIN)
    assert status == 200
    assert (body["minute_ms"], body["from"], body["to"]) == (
        MINUTE_MS,
        MINUTE,
        MINUTE + 5 * MINUTE_MS,
    )
    assert body["applications"] == ["billing", "orders"]
    assert sorted(body["series"]) == ["*", "billing", "orders"]
    for series in body["series"].values():
        assert [entry["minute"] for entry in series] == [MINUTE + n * MINUTE_MS for n in range(5)]
    orders = body["series"]["orders"]
    assert orders[0] == {
        "minute": MINUTE,
        "created": 0,
        "rung": 0,
        "failed": 0,
        "creates_per_s": 0.0,
        "rings_per_s": 0.0,
        "lateness_p50_ms": None,
        "lateness_p99_ms": None,
    }
    assert orders[1]["created"] == 120 and orders[1]["creates_per_s"] == 2.0
    assert (orders[1]["rung"], orders[1]["failed"], orders[1]["rings_per_s"]) == (60, 3, 1.0)
    assert 5 < orders[1]["lateness_p50_ms"] <= 10  # in the (5, 10] bucket
    assert orders[3]["created"] == 6
    total = body["series"]["*"][1]
    assert (total["created"], total["rung"], total["failed"]) == (120, 90, 3)
    assert 5 < total["lateness_p50_ms"] <= 10 and 200 < total["lateness_p99_ms"] <= 500


def test_the_default_is_sixty_minutes_and_one_application_may_be_asked_for(client: Any):
    status, body = get(client, READER, "")
    assert status == 200
    assert len(body["series"]["*"]) == 60 and body["to"] == MINUTE + 5 * MINUTE_MS
    status, body = get(client, ADMIN, "minutes=2&application=billing")
    assert body["applications"] == ["billing"]
    assert [e["rung"] for e in body["series"]["*"]] == [0, 0]
    status, body = get(client, ADMIN, "minutes=5&application=nobody")
    assert status == 200 and body["applications"] == ["nobody"]
    assert all(e["created"] == 0 for e in body["series"]["nobody"])


def test_an_application_token_sees_only_its_own(client: Any):
    status, body = get(client, ORDERS)
    assert status == 200
    assert body["applications"] == ["orders"] and sorted(body["series"]) == ["*", "orders"]
    assert body["series"]["*"][1]["rung"] == 60
    assert get(client, ORDERS, "application=orders")[0] == 200
    status, body = get(client, ORDERS, "application=billing")
    assert status == 403 and body["error"]["field"] == "application"
    assert get(client, None)[0] == 401


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("minutes=0", "minutes"),
        ("minutes=1441", "minutes"),
        ("minutes=abc", "minutes"),
        ("minutes=-1", "minutes"),
        ("minutes=1.5", "minutes"),
        ("minutes=", "minutes"),
        ("application=" + "x" * 65, "application"),
        ("application=a%20b", "application"),
        ("application=", "application"),
    ],
)
def test_bad_input_is_a_400_naming_the_parameter(client: Any, query: str, field: str):
    status, body = get(client, ADMIN, query)
    assert status == 400
    assert body["error"]["field"] == field
