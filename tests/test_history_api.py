"""An alarm's story end to end: written by the API and the engine (on the fake clock), read
through GET /v1/alarms/{application}/{business_id}/events and the SDK. On SQLite and MariaDB."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import func, select

from clock_client import AlarmEvent, ClockClient
from clock_client import NotFound as ClientNotFound
from clock_server.model import NOT_CONFIRMED
from clock_server.store import events as events_store
from clock_server.store.alarms import AlarmStore
from clock_server.store.schema import event_table
from clock_server.testing import SettableClock
from tests.api_support import NOW, OpenApiChecker
from tests.history_harness import ADMIN, BILLING, OTHER, Harness

EVENTS = "/v1/alarms/{application}/{business_id}/events"


@pytest.fixture
def harness(store: AlarmStore, fake_clock: SettableClock) -> Harness:
    return Harness(store, fake_clock)


@pytest.fixture
def server(harness: Harness) -> Iterator[str]:
    yield from harness.serve()


def test_created_moved_failed_twice_then_rung_reads_in_order(harness: Harness, server: str):
    h = harness
    created = h.call(
        "POST",
        "/v1/alarms",
        BILLING,
        json={"application": "billing", "business_id": "inv/7", "payload": "p",
              "target_ring_at": NOW + 5_000},
    )  # fmt: skip
    assert created.status_code == 201
    moved = h.call("PATCH", "/v1/alarms/billing/inv/7", ADMIN, json={"target_ring_at": NOW + 8_000})
    assert moved.status_code == 200
    h.publisher.fail_next(2)
    h.clock.set(NOW + 8_000)
    for _ in range(3):  # two failed attempts, each tried again at its retry time, then rung
        h.step()
        alarm = h.store.get("billing", "inv/7")
        if alarm.status == "pending":
            h.clock.set(alarm.next_try_time)
    alarm = h.store.get("billing", "inv/7")
    assert (alarm.status, alarm.retry_times) == ("rung", 2)

    response = h.call("GET", "/v1/alarms/billing/inv/7/events", BILLING)
    assert response.status_code == 200
    events = response.get_json()["events"]
    OpenApiChecker(h.call("GET", "/openapi.json", None).get_json()).response(
        EVENTS, "GET", response
    )
    first_retry = events[2]["detail"]["retry_at"]
    assert events == [
        {"at": NOW, "kind": "created", "actor": "billing",
         "detail": {"target_ring_at": NOW + 5_000, "latest_ring_at": None}},
        {"at": NOW, "kind": "moved", "actor": "admin",
         "detail": {"from": NOW + 5_000, "to": NOW + 8_000}},
        {"at": NOW + 8_000, "kind": "attempt_failed", "actor": "clock",
         "detail": {"attempt": 1, "error": NOT_CONFIRMED, "retry_at": first_retry}},
        {"at": first_retry, "kind": "attempt_failed", "actor": "clock",
         "detail": {"attempt": 2, "error": NOT_CONFIRMED, "retry_at": alarm.rung_at}},
        {"at": alarm.rung_at, "kind": "rung", "actor": "clock", "detail": {"attempt": 3}},
    ]  # fmt: skip
    assert NOW + 8_000 < first_retry < alarm.rung_at  # type: ignore[operator]

    with ClockClient(server, token=BILLING, retries=0) as client:
        story = client.events("billing", "inv/7")
        assert story == [AlarmEvent.from_dict(event) for event in events]
        assert [(e.kind, e.actor, e.attempt) for e in story] == [
            ("created", "billing", None),
            ("moved", "admin", None),
            ("attempt_failed", "clock", 1),
            ("attempt_failed", "clock", 2),
            ("rung", "clock", 3),
        ]
        assert story[2].error == NOT_CONFIRMED and story[-1].error is None
        assert round(story[-1].at_datetime.timestamp() * 1000) == alarm.rung_at
        with pytest.raises(ClientNotFound):
            client.events("billing", "missing")


def test_events_follow_the_rules_of_reading_the_alarm(harness: Harness):
    h = harness
    body = {"application": "other", "business_id": "x", "payload": "p", "target_ring_at": NOW}
    assert h.call("POST", "/v1/alarms", OTHER, json=body).status_code == 201
    url = "/v1/alarms/other/x/events"
    check = OpenApiChecker(h.call("GET", "/openapi.json", None).get_json())
    for token, status in ((OTHER, 200), (ADMIN, 200), (BILLING, 403), (None, 401)):
        response = h.call("GET", url, token)
        assert response.status_code == status, token
        check.response(EVENTS, "GET", response)
    missing = h.call("GET", "/v1/alarms/other/nope/events", OTHER)
    assert missing.status_code == 404
    check.response(EVENTS, "GET", missing)
    bad = h.call("GET", "/v1/alarms/bad%20app/x/events", ADMIN)
    assert bad.status_code == 400
    check.response(EVENTS, "GET", bad)
    assert h.call("DELETE", "/v1/alarms/other/x", ADMIN).status_code == 200
    kinds = [(e["kind"], e["actor"]) for e in h.call("GET", url, OTHER).get_json()["events"]]
    assert kinds == [("created", "other"), ("cancelled", "admin")]


def test_a_business_id_ending_in_events_stays_readable(harness: Harness, server: str):
    """The SDK escapes every '/' of a business_id: ".../x%2Fevents" is the alarm "x/events",
    ".../x/events" the events of "x"."""
    h = harness
    for business_id in ("x", "x/events"):
        body = {"application": "billing", "business_id": business_id, "payload": business_id,
                "target_ring_at": NOW + 1_000}  # fmt: skip
        assert h.call("POST", "/v1/alarms", BILLING, json=body).status_code == 201
    alarm = h.call("GET", "/v1/alarms/billing/x%2Fevents", BILLING).get_json()
    assert alarm["business_id"] == "x/events"
    events = h.call("GET", "/v1/alarms/billing/x/events", BILLING).get_json()["events"]
    assert [event["kind"] for event in events] == ["created"]
    with ClockClient(server, token=BILLING, retries=0) as client:
        assert client.get("billing", "x/events").payload == "x/events"
        assert [e.kind for e in client.events("billing", "x/events")] == ["created"]
        assert client.update("billing", "x/events", payload="q").payload == "q"
        assert [e.kind for e in client.events("billing", "x/events")] == ["created", "changed"]
        assert [e.kind for e in client.events("billing", "x")] == ["created"]


def test_a_pending_alarm_keeps_its_latest_changes_only(harness: Harness, monkeypatch):
    """Each PATCH wrote an event, without bound. An alarm now keeps its latest
    MAX_CHANGE_EVENTS changes."""
    monkeypatch.setattr(events_store, "MAX_CHANGE_EVENTS", 5)
    h = harness
    create = {"application": "billing", "business_id": "moving", "payload": "p",
              "target_ring_at": NOW + 1_000}  # fmt: skip
    assert h.call("POST", "/v1/alarms", ADMIN, json=create).status_code == 201
    for i in range(1, 9):
        change = {"target_ring_at": NOW + 1_000 + i} if i % 2 else {"payload": f"p{i}"}
        assert h.call("PATCH", "/v1/alarms/billing/moving", ADMIN, json=change).status_code == 200
    url = EVENTS.format(application="billing", business_id="moving")
    story = h.call("GET", url, ADMIN).get_json()["events"]
    kinds = [event["kind"] for event in story]
    assert kinds == ["created", "changed", "moved", "changed", "moved", "changed"]
    assert story[2]["detail"] == {"from": NOW + 1_003, "to": NOW + 1_005}  # the 5th PATCH
    alarm_id = h.store.get("billing", "moving").id
    with h.store.db.connect() as conn:
        kept = conn.execute(
            select(func.count()).select_from(event_table).where(event_table.c.alarm_id == alarm_id)
        ).scalar_one()
    assert kept == 5
