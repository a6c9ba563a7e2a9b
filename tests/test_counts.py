"""Count-triggered alarms: created with ring_after_count, counted over HTTP and the SDK, rung
by their count or by their deadline, with the trigger in the message. On SQLite and MariaDB,
with the engine on the fake clock; concurrency on MariaDB."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from clock_client import ClockClient
from clock_client import Conflict as ClientConflict
from clock_server.errors import Conflict
from clock_server.model import MAX_EPOCH_MS, NewAlarm
from clock_server.store.alarms import AlarmStore
from clock_server.store.counts import AlarmCounts
from clock_server.store.history import AlarmHistory
from clock_server.testing import SettableClock
from tests.api_support import NOW, OpenApiChecker
from tests.history_harness import BILLING, Harness

HOUR = 3_600_000


@pytest.fixture
def harness(store: AlarmStore, fake_clock: SettableClock) -> Harness:
    return Harness(store, fake_clock)


@pytest.fixture
def server(harness: Harness) -> Iterator[str]:
    yield from harness.serve()


def create(h: Harness, business_id: str, **fields: Any) -> Any:
    body = {"application": "billing", "business_id": business_id, "payload": "p", **fields}
    return h.call("POST", "/v1/alarms", BILLING, json=body)


def count(h: Harness, business_id: str, **body: Any) -> Any:
    return h.call("POST", f"/v1/alarms/billing/{business_id}/count", BILLING, json=body)


def messages(h: Harness) -> list[dict[str, Any]]:
    return [json.loads(m.body) for m in h.publisher.published]


def test_the_count_that_reaches_n_rings_the_alarm_before_its_deadline(harness: Harness):
    h = harness
    created = create(h, "remind-7", ring_after_count=3, delay_ms=48 * HOUR)
    assert created.status_code == 201
    assert created.get_json()["ring_after_count"] == 3 and created.get_json()["count"] == 0
    h.step()  # nothing to claim: its deadline is two days off
    checker = OpenApiChecker(h.call("GET", "/openapi.json", None).get_json())
    first = count(h, "remind-7", increment_id="sent-1")
    checker.response("/v1/alarms/{application}/{business_id}/count", "POST", first)
    assert (first.get_json()["counted"], first.get_json()["reached"]) == (True, False)
    assert first.get_json()["alarm"]["count"] == 1
    repeat = count(h, "remind-7", increment_id="sent-1")  # a retry of the same reminder
    assert repeat.get_json()["counted"] is False and repeat.get_json()["alarm"]["count"] == 1
    assert count(h, "remind-7", increment_id="sent-2").get_json()["reached"] is False
    h.clock.set(NOW + 1_000)
    third = count(h, "remind-7", increment_id="sent-3").get_json()
    assert (third["reached"], third["alarm"]["count"]) == (True, 3)
    assert count(h, "remind-7", increment_id="sent-4").status_code == 409  # reached: ringing
    h.step()
    [message] = messages(h)
    assert (message["trigger"], message["count"]) == ("count", 3)
    assert message["published_at"] == NOW + 1_000 < message["target_ring_at"]
    alarm = h.store.get("billing", "remind-7")
    assert alarm.status == "rung" and alarm.rung_at == NOW + 1_000
    late = count(h, "remind-7", increment_id="sent-5")
    assert late.status_code == 409 and late.get_json()["error"]["status"] == "rung"
    assert count(h, "remind-7", increment_id="sent-2").get_json()["counted"] is False
    kinds = [e.kind for e in AlarmHistory(h.store).events("billing", "remind-7")]
    assert kinds == ["created", "count_reached", "rung"]


def test_a_claimed_alarm_whose_count_is_reached_rings_now_and_once(harness: Harness):
    h = harness
    create(h, "soon", ring_after_count=1, target_ring_at=NOW + 5_000)
    h.engine.preloader.run_once()  # held in memory for its deadline
    assert len(h.engine.heap) == 1
    h.clock.set(NOW + 1_000)
    assert count(h, "soon").get_json()["reached"] is True
    h.step()
    h.clock.set(NOW + 6_000)
    h.step()  # the claim held for the deadline is stale: it rings nothing more
    assert [(m["trigger"], m["published_at"]) for m in messages(h)] == [("count", NOW + 1_000)]


def test_the_deadline_rings_an_alarm_whose_count_was_not_reached(harness: Harness):
    h = harness
    create(h, "remind-8", ring_after_count=3, target_ring_at=NOW + 5_000)
    count(h, "remind-8", by=2)
    h.clock.set(NOW + 5_000)
    h.step()
    [message] = messages(h)
    assert (message["trigger"], message["count"]) == ("time", 2)
    assert message["published_at"] == NOW + 5_000
    create(h, "plain", target_ring_at=NOW + 5_000)
    h.step()
    plain = [m for m in messages(h) if m["business_id"] == "plain"]
    assert plain and "trigger" not in plain[0]  # alarms without a count keep their message
    assert count(h, "plain").status_code == 409


def test_a_count_only_alarm_has_no_time_and_is_refused_without_one(harness: Harness):
    h = harness
    only = create(h, "count-only", ring_after_count=2, count_only=True)
    assert only.status_code == 201
    assert only.get_json()["target_ring_at"] == MAX_EPOCH_MS
    for fields, field in (
        ({"ring_after_count": 2}, "target_ring_at"),
        ({"count_only": True}, "ring_after_count"),
        ({"ring_after_count": 2, "count_only": True, "delay_ms": 5}, "delay_ms"),
        ({"ring_after_count": 2, "count_only": True, "latest_ring_at": NOW}, "latest_ring_at"),
        ({"ring_after_count": 0, "delay_ms": 5}, "ring_after_count"),
        ({"ring_after_count": 1_000_001, "delay_ms": 5}, "ring_after_count"),
    ):
        refused = create(h, "bad", **fields)
        assert refused.status_code == 400, fields
        assert refused.get_json()["error"]["field"] == field, fields
    for body, field in (({"by": 0}, "by"), ({"by": 1_001}, "by"),
                        ({"increment_id": ""}, "increment_id"), ({"what": 1}, "what")):  # fmt: skip
        refused = count(h, "count-only", **body)
        assert refused.status_code == 400 and refused.get_json()["error"]["field"] == field
    assert count(h, "missing").status_code == 404
    assert count(h, "count-only", by=2).get_json()["reached"] is True
    h.step()
    assert [m["trigger"] for m in messages(h)] == ["count"]


def test_the_sdk_counts(harness: Harness, server: str):
    with ClockClient(server, token=BILLING, retries=0) as client:
        alarm = client.create("billing", "sdk-1", "p", ring_after_count=2, count_only=True)
        assert (alarm.ring_after_count, alarm.count) == (2, 0)
        first = client.count("billing", "sdk-1", increment_id="a")
        assert (first.counted, first.reached, first.alarm.count) == (True, False, 1)
        assert client.count("billing", "sdk-1", increment_id="a").counted is False
        assert client.count("billing", "sdk-1", increment_id="b").reached is True
        with pytest.raises(ClientConflict):
            client.count("billing", "sdk-1", increment_id="c")


def test_concurrent_counts_reach_n_exactly_once(mariadb_store: AlarmStore, fake_clock):
    store = mariadb_store
    store.create(NewAlarm("app", "many", "p", NOW + HOUR, None, ring_after_count=60), NOW - 1_000)
    counts = AlarmCounts(store)

    def one(n: int) -> str:
        try:
            done = counts.count("app", "many", f"op-{n}", 1, NOW, actor="app")
        except Conflict:
            return "refused"
        return "reached" if done.reached else "counted" if done.counted else "repeat"

    with ThreadPoolExecutor(16) as pool:
        outcomes = list(pool.map(one, range(100)))
        again = list(pool.map(one, range(100)))  # the same ids again change nothing
    assert outcomes.count("reached") == 1
    assert outcomes.count("counted") == 59 and outcomes.count("refused") == 40
    assert store.get("app", "many").count == 60
    assert set(again) <= {"repeat", "refused"} and again.count("repeat") == 60
    assert store.get("app", "many").count == 60
