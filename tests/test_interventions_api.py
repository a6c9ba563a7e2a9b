"""Re-drive and the bulk actions over HTTP and through the SDK, the search filters of
GET /v1/alarms, and the read-only token. On SQLite and MariaDB, with the engine on the fake
clock."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from clock_client import ClockClient
from clock_client import Conflict as ClientConflict
from clock_client import Forbidden as ClientForbidden
from clock_server.api.tokens import parse_tokens
from clock_server.errors import ConfigError
from clock_server.model import NOT_CONFIRMED
from clock_server.store.alarms import AlarmStore
from clock_server.testing import SettableClock
from tests.api_support import NOW, OpenApiChecker
from tests.history_harness import ADMIN, BILLING, Harness
from tests.support import metric_value

READER = "reader-token-0123456789ab"
READ_ONLY_TOKENS = f"{BILLING}=billing; {ADMIN}=*; {READER}=*:read"


@pytest.fixture
def harness(store: AlarmStore, fake_clock: SettableClock) -> Harness:
    return Harness(store, fake_clock, tokens=READ_ONLY_TOKENS)


@pytest.fixture
def server(harness: Harness) -> Iterator[str]:
    yield from harness.serve()


def create(h: Harness, business_id: str, target: int = NOW + 1_000, **extra: Any) -> None:
    body = {"application": "billing", "business_id": business_id, "payload": "<p>",
            "target_ring_at": target, **extra}  # fmt: skip
    assert h.call("POST", "/v1/alarms", BILLING, json=body).status_code == 201


def until_dead(h: Harness, business_id: str) -> None:
    """Fail every publish until the alarm dies, stepping the clock to each retry."""
    h.publisher.fail_next(1_000)
    h.clock.set(max(h.clock.now_ms(), h.store.get("billing", business_id).next_try_time))
    for _ in range(10):
        h.step_through()
        alarm = h.store.get("billing", business_id)
        if alarm.status == "dead":
            break
        h.clock.set(alarm.next_try_time)
    h.publisher.fail_next(0)
    assert h.store.get("billing", business_id).status == "dead"


def test_created_moved_failed_dead_redriven_then_rung(harness: Harness, server: str):
    h = harness
    create(h, "inv/9", NOW + 5_000)
    moved = h.call("PATCH", "/v1/alarms/billing/inv/9", ADMIN, json={"target_ring_at": NOW + 8_000})
    assert moved.status_code == 200
    until_dead(h, "inv/9")  # retry_max=3: four attempts
    died_at = h.clock.now_ms()

    redriven = h.call("POST", "/v1/alarms/billing/inv/9/redrive", BILLING)
    assert redriven.status_code == 200
    OpenApiChecker(h.call("GET", "/openapi.json", None).get_json()).response(
        "/v1/alarms/{application}/{business_id}/redrive", "POST", redriven
    )
    assert redriven.get_json()["status"] == "pending"
    assert redriven.get_json()["next_try_time"] == died_at
    failed_ids = {m.message_id for batch in h.publisher.batches for m in batch}
    h.step()
    rung = h.store.get("billing", "inv/9")
    assert rung.status == "rung"
    # A delivery of its own: a consumer that deduplicated the earlier attempts takes it.
    assert failed_ids == {str(rung.id)}
    assert [m.message_id for m in h.publisher.published] == [f"{rung.id}-r1"]

    with ClockClient(server, token=BILLING, retries=0) as client:
        story = [(e.kind, e.actor, e.attempt) for e in client.events("billing", "inv/9")]
    assert story == [
        ("created", "billing", None),
        ("moved", "admin", None),
        ("attempt_failed", "clock", 1),
        ("attempt_failed", "clock", 2),
        ("attempt_failed", "clock", 3),
        ("attempt_failed", "clock", 4),
        ("dead", "clock", None),
        ("redriven", "billing", None),
        ("rung", "clock", 1),
    ]
    events = h.call("GET", "/v1/alarms/billing/inv/9/events", BILLING).get_json()["events"]
    assert events[-3]["detail"] == {"attempts": 4, "error": NOT_CONFIRMED}
    assert events[-2]["detail"] == {"from_status": "dead", "due_at": died_at}


def test_redrive_answers_say_what_is_wrong(harness: Harness):
    h = harness
    create(h, "live")
    conflict = h.call("POST", "/v1/alarms/billing/live/redrive", BILLING)
    assert conflict.status_code == 409
    assert conflict.get_json()["error"]["status"] == "pending"
    assert "pending" in conflict.get_json()["error"]["message"]
    assert h.call("POST", "/v1/alarms/billing/nope/redrive", BILLING).status_code == 404
    create(h, "dead")
    until_dead(h, "dead")
    before = h.store.get("billing", "dead")
    for body, field in (
        ({"delay_ms": -1}, "delay_ms"),
        ({"target_ring_at": NOW, "delay_ms": 5}, "delay_ms"),
        ({"when": 5}, "when"),
    ):
        answer = h.call("POST", "/v1/alarms/billing/dead/redrive", BILLING, json=body)
        assert answer.status_code == 400 and answer.get_json()["error"]["field"] == field
    other = h.call("POST", "/v1/alarms/other/dead/redrive", BILLING)
    assert other.status_code == 403
    assert h.store.get("billing", "dead") == before  # nothing changed
    later = h.call("POST", "/v1/alarms/billing/dead/redrive", ADMIN, json={"delay_ms": 60_000})
    assert later.get_json()["next_try_time"] == h.clock.now_ms() + 60_000


def test_bulk_actions_are_for_admins_and_answer_how_many(harness: Harness, server: str):
    h = harness
    for n in range(3):
        create(h, f"order-{n}")
    create(h, "keep-1")
    for key in ("order-0", "order-1", "order-2", "keep-1"):
        until_dead(h, key)
    body = {"application": "billing", "business_id_prefix": "order-"}
    assert h.call("POST", "/v1/alarms/redrive", BILLING, json=body).status_code == 403
    assert h.call("POST", "/v1/alarms/cancel", BILLING, json=body).status_code == 403
    answer = h.call("POST", "/v1/alarms/redrive", ADMIN, json=body)
    assert (answer.status_code, answer.get_json()) == (200, {"changed": 3, "done": True})
    OpenApiChecker(h.call("GET", "/openapi.json", None).get_json()).response(
        "/v1/alarms/redrive", "POST", answer
    )
    again = h.call("POST", "/v1/alarms/redrive", ADMIN, json=body)
    assert again.get_json() == {"changed": 0, "done": True}
    assert h.store.get("billing", "keep-1").status == "dead"

    for bad, field in (
        ({"status": "pending"}, "status"),
        ({"business_id_prefix": "x"}, "business_id_prefix"),
        ({"due_from": 5, "due_to": 4}, "due_to"),
        ({"application": "no spaces"}, "application"),
        ({"colour": "red"}, "colour"),
    ):
        refused = h.call("POST", "/v1/alarms/redrive", ADMIN, json=bad)
        assert refused.status_code == 400 and refused.get_json()["error"]["field"] == field

    with ClockClient(server, token=ADMIN, retries=0) as admin:
        assert admin.cancel_where("billing", business_id_prefix="order-") == 3
        assert admin.redrive_where("billing", "dead") == 1
    assert {a.business_id: a.status for a in h.store.list("billing", None, 10, None)} == {
        "order-0": "cancelled", "order-1": "cancelled", "order-2": "cancelled",
        "keep-1": "pending",
    }  # fmt: skip
    metrics = h.app.extensions["clock"].metrics
    assert metric_value(metrics, "clock_alarms_redriven_total", {"application": "billing"}) == 4
    assert metric_value(metrics, "clock_alarms_cancelled_total", {"application": "billing"}) == 3


def test_list_filters_page_with_their_cursors(harness: Harness, server: str):
    h = harness
    for n, key in enumerate(["a/1", "a/2", "a/3", "b/1"]):
        create(h, key, NOW + 1_000 * (n + 1))
    url = "/v1/alarms?application=billing&business_id_prefix=a/&limit=2"
    first = h.call("GET", url, BILLING).get_json()
    assert [a["business_id"] for a in first["alarms"]] == ["a/1", "a/2"]
    second = h.call("GET", f"{url}&cursor={first['next_cursor']}", BILLING).get_json()
    assert [a["business_id"] for a in second["alarms"]] == ["a/3"]
    assert second["next_cursor"] is None
    mixed = h.call("GET", f"/v1/alarms?application=billing&cursor={first['next_cursor']}", BILLING)
    assert mixed.status_code == 400 and mixed.get_json()["error"]["field"] == "cursor"
    bad = h.call("GET", "/v1/alarms?application=billing&due_from=soon", BILLING)
    assert bad.status_code == 400 and bad.get_json()["error"]["field"] == "due_from"

    with ClockClient(server, token=BILLING, retries=0) as client:
        due = client.list("billing", due_from=NOW + 2_000, due_to=NOW + 4_001, limit=1)
        assert [a.business_id for a in due] == ["a/2", "a/3", "b/1"]
        assert [a.business_id for a in client.list("billing", business_id_prefix="b")] == ["b/1"]


def test_a_read_only_token_reads_everything_and_changes_nothing(harness: Harness, server: str):
    h = harness
    create(h, "r")
    until_dead(h, "r")
    for url in ("/v1/alarms/billing/r", "/v1/alarms/billing/r/events", "/v1/alarms",
                "/v1/applications", "/v1/applications/billing"):  # fmt: skip
        assert h.call("GET", url, READER).status_code == 200, url
    before = h.store.get("billing", "r")
    for method, url, body in (
        ("POST", "/v1/alarms", {"application": "billing", "business_id": "n", "payload": "p",
                                "delay_ms": 5}),
        ("POST", "/v1/alarms/batch", {"alarms": []}),
        ("PATCH", "/v1/alarms/billing/r", {"delay_ms": 5}),
        ("DELETE", "/v1/alarms/billing/r", None),
        ("POST", "/v1/alarms/billing/r/redrive", None),
        ("POST", "/v1/alarms/redrive", {}),
        ("POST", "/v1/alarms/cancel", {}),
        ("PATCH", "/v1/applications/billing", {"max_pending": 5}),
        ("PUT", "/v1/applications/billing", {}),
    ):  # fmt: skip
        answer = h.call(method, url, READER, json=body)
        assert answer.status_code == 403, (method, url)
        assert "only read" in answer.get_json()["error"]["message"]
    assert h.store.get("billing", "r") == before
    assert h.call("GET", "/v1/whoami", READER).get_json() == {
        "authenticated": True, "applications": "*", "read_only": True
    }  # fmt: skip
    assert h.call("GET", "/v1/whoami", BILLING).get_json() == {
        "authenticated": True, "applications": ["billing"], "read_only": False
    }  # fmt: skip
    with ClockClient(server, token=READER, retries=0) as reader:
        assert reader.get("billing", "r").status == "dead"
        with pytest.raises(ClientForbidden):
            reader.redrive("billing", "r")
    with ClockClient(server, token=BILLING, retries=0) as owner:
        assert owner.redrive("billing", "r").status == "pending"
        with pytest.raises(ClientConflict) as raised:
            owner.redrive("billing", "r")
        assert raised.value.status == "pending"


def test_the_read_role_is_parsed_and_checked():
    table = parse_tokens(f"{READER}=*:read; {BILLING}=billing,orders:read", "CLOCK_TOKENS")
    reader, billing = table.lookup(READER), table.lookup(BILLING)
    assert reader is not None and reader.read_only and reader.is_admin
    assert billing is not None and billing.read_only and billing.allows("orders")
    with pytest.raises(ConfigError) as raised:
        parse_tokens(f"{READER}=*:write", "CLOCK_TOKENS")
    assert "'write' is not a role" in str(raised.value) and READER not in str(raised.value)
