"""GET /v1/stats: one entry per minute in every series, zeros where nothing happened, who sees
what, and bad input refused with the field named. On SQLite and MariaDB."""

from __future__ import annotations

from typing import Any

import pytest

from clock_server.api import create_app
from clock_server.api.stats_bounds import MAX_ENTRIES, MAX_SERIES, busiest, series_bound
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


@pytest.mark.parametrize(
    ("minutes", "bound"), [(1, 20), (60, 20), (685, 20), (686, 19), (720, 19), (1_440, 9)]
)
def test_the_series_of_an_answer_are_bounded_by_its_minutes(minutes: int, bound: int):
    assert series_bound(minutes) == bound


@pytest.mark.parametrize(
    ("activity", "candidates", "most", "expected"),
    [
        ({"a": 5, "b": 9, "c": 1}, ["a", "b", "c"], 2, ["a", "b"]),  # listed by name
        ({"a": 5, "b": 5, "c": 5}, ["c", "b", "a"], 2, ["a", "b"]),  # ties by name
        ({"a": 5}, ["a", "quiet"], 5, ["a", "quiet"]),  # room for all, active or not
        ({"a": 5}, ["quiet", "a"], 1, ["a"]),
        ({}, [], 3, []),
    ],
)
def test_the_busiest_applications_get_a_series(
    activity: dict[str, int], candidates: list[str], most: int, expected: list[str]
):
    assert busiest(activity, candidates, most) == expected


def test_many_applications_answer_the_busiest_and_a_total_of_them_all(store: AlarmStore):
    services = build_services(Settings(), store, SettableClock(NOW), Metrics())
    many = 50
    # Application n rings n + 1 alarms in the window's second minute, and creates one a day
    # before it, outside the window.
    SqlMinuteStats(store).add(
        {
            **{(MINUTE + MINUTE_MS, f"app-{n:02d}"): counts(rung=n + 1) for n in range(many)},
            **{(MINUTE - 1440 * MINUTE_MS, f"app-{n:02d}"): counts(created=1) for n in range(many)},
        }
    )
    client = create_app(services).test_client()
    status, body = get(client, None, "minutes=60")
    assert status == 200
    busiest_twenty = [f"app-{n:02d}" for n in range(many - MAX_SERIES, many)]
    assert (body["applications"], body["left_out"]) == (busiest_twenty, many - MAX_SERIES)
    assert sorted(body["series"]) == ["*", *busiest_twenty]
    rung = [entry["rung"] for entry in body["series"]["*"]]
    assert sum(rung) == sum(n + 1 for n in range(many))  # the left out counted in the total

    status, day = get(client, None, "minutes=1440")
    assert (len(day["applications"]), day["left_out"]) == (9, many - 9)
    assert len(day["series"]) * 1440 <= MAX_ENTRIES
    # A series for each of the 50 would be about 10 MB; 10 series are about 2 MB.
    with client.get("/v1/stats?minutes=1440") as answer:
        assert len(answer.data) < 3 * 1024 * 1024
    status, named = get(client, None, "minutes=60&application=app-00")  # one left out above
    assert (named["applications"], named["left_out"]) == (["app-00"], 0)
    assert sum(entry["rung"] for entry in named["series"]["app-00"]) == 1
