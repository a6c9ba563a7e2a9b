"""ClockClient: the HTTP contract against a canned local server, then against the real one.

The first half runs a tiny http.server on 127.0.0.1 that answers from a script, to pin
down request encoding, error mapping and the retry policy. The second half needs the
``live_server`` fixture (tests/conftest.py): a running clock server backed by a real
database and RabbitMQ.
"""

from __future__ import annotations

import queue
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import uuid4

import pika
import pika.exceptions
import pytest

from clock_client import (
    Alarm,
    AlarmEvent,
    AlarmMessage,
    Application,
    ApplicationCounts,
    CappedCount,
    ClockClient,
    ClockError,
    Conflict,
    Consumer,
    Forbidden,
    NotFound,
    StatsMinute,
    Unauthorized,
    Unavailable,
    ValidationError,
    WhoAmI,
)
from tests.client_support import T0, CannedServer, serve_canned
from tests.client_support import alarm_json as _alarm_json
from tests.client_support import error_json as _error
from tests.support import eventually


@pytest.fixture
def canned() -> Iterator[CannedServer]:
    yield from serve_canned()


@pytest.fixture
def make_client() -> Iterator[Callable[..., ClockClient]]:
    clients: list[ClockClient] = []

    def _make(base_url: str, **kwargs: Any) -> ClockClient:
        kwargs.setdefault("backoff_factor", 0.01)
        client = ClockClient(base_url, **kwargs)
        clients.append(client)
        return client

    yield _make
    for client in clients:
        client.close()


def test_create_encodes_times_and_returns_typed_alarm(
    canned: CannedServer, make_client: Callable[..., ClockClient]
) -> None:
    canned.reply(201, _alarm_json(7, latest_ring_at=T0 + 1000))
    client = make_client(canned.base_url)
    target = datetime(2030, 3, 17, 17, 46, 40, 123000, tzinfo=UTC)

    alarm = client.create("billing", "order-7", "{}", target_ring_at=target, latest_ring_at=T0)

    assert alarm == Alarm.from_dict(_alarm_json(7, latest_ring_at=T0 + 1000))
    assert alarm.latest_ring_datetime == datetime.fromtimestamp((T0 + 1000) / 1000, UTC)
    [sent] = canned.requests
    assert (sent.method, sent.path) == ("POST", "/v1/alarms")
    assert sent.headers["Content-Type"] == "application/json"
    assert "Authorization" not in sent.headers
    assert sent.body == {
        "application": "billing",
        "business_id": "order-7",
        "payload": "{}",
        "target_ring_at": 1_900_000_000_123,
        "latest_ring_at": T0,
    }


@pytest.mark.parametrize(
    ("delay", "delay_ms"), [(timedelta(seconds=1.5), 1500), (0.25, 250), (3, 3000)]
)
def test_create_sends_delay_in_ms(
    canned: CannedServer,
    make_client: Callable[..., ClockClient],
    delay: float | timedelta,
    delay_ms: int,
) -> None:
    canned.reply(201, _alarm_json())
    make_client(canned.base_url, token="s3cret").create("billing", "b", "p", delay=delay)
    [sent] = canned.requests
    assert sent.body["delay_ms"] == delay_ms
    assert "target_ring_at" not in sent.body
    assert sent.headers["Authorization"] == "Bearer s3cret"


def test_naive_datetime_is_refused_before_sending(
    canned: CannedServer, make_client: Callable[..., ClockClient]
) -> None:
    client = make_client(canned.base_url)
    with pytest.raises(ValueError, match="timezone-aware"):
        client.create("billing", "b", "p", target_ring_at=datetime(2030, 1, 1))
    assert canned.requests == []


@pytest.mark.parametrize(
    ("status", "body", "error_type", "code", "field_name"),
    [
        (400, _error("validation_error", "bad", "latest_ring_at"), ValidationError,
         "validation_error", "latest_ring_at"),
        (400, _error("invalid_json", "not JSON"), ValidationError, "invalid_json", None),
        (413, _error("payload_too_large", "big", "payload"), ValidationError,
         "payload_too_large", "payload"),
        (401, _error("unauthorized", "no token"), Unauthorized, "unauthorized", None),
        (403, _error("forbidden", "not yours"), Forbidden, "forbidden", None),
        (404, _error("not_found", "no such alarm"), NotFound, "not_found", None),
        (503, _error("unavailable", "db down"), Unavailable, "unavailable", None),
    ],
)  # fmt: skip
def test_error_bodies_map_to_typed_errors(
    canned: CannedServer,
    make_client: Callable[..., ClockClient],
    status: int,
    body: dict[str, Any],
    error_type: type[ClockError],
    code: str,
    field_name: str | None,
) -> None:
    canned.reply(status, body)
    with pytest.raises(error_type) as caught:
        make_client(canned.base_url, retries=0).get("billing", "b")
    error = caught.value
    assert (error.status_code, error.code, error.field) == (status, code, field_name)
    assert error.message == body["error"]["message"]
    assert error.body == body


def test_conflict_carries_current_status(
    canned: CannedServer, make_client: Callable[..., ClockClient]
) -> None:
    canned.reply(409, _error("conflict", "alarm already rang", status="rung"))
    with pytest.raises(Conflict) as caught:
        make_client(canned.base_url).update("billing", "b", payload="x")
    assert (caught.value.status, caught.value.status_code) == ("rung", 409)


@pytest.mark.parametrize(
    ("status", "error_type"), [(500, ClockError), (404, NotFound), (502, Unavailable)]
)
def test_non_json_error_body_still_gives_a_useful_error(
    canned: CannedServer,
    make_client: Callable[..., ClockClient],
    status: int,
    error_type: type[ClockError],
) -> None:
    canned.reply(status, "<html><body>proxy says boom</body></html>")
    with pytest.raises(error_type) as caught:
        make_client(canned.base_url, retries=0).get("billing", "b")
    assert type(caught.value) is error_type
    assert caught.value.status_code == status
    assert "proxy says boom" in caught.value.message
    assert str(status) in str(caught.value)


def test_malformed_success_body_is_a_clock_error(
    canned: CannedServer, make_client: Callable[..., ClockClient]
) -> None:
    canned.reply(200, {"id": "not-an-int"})
    with pytest.raises(ClockError) as caught:
        make_client(canned.base_url).get("billing", "b")
    assert caught.value.code == "bad_response"


@pytest.mark.parametrize("status", [502, 503, 504])
@pytest.mark.parametrize(
    "call",
    [
        lambda c: c.create("billing", "b", "p", delay=1),
        lambda c: c.get("billing", "b"),
        lambda c: c.cancel("billing", "b"),
    ],
    ids=["create-POST", "get-GET", "cancel-DELETE"],
)
def test_idempotent_calls_retry_gateway_errors(
    canned: CannedServer,
    make_client: Callable[..., ClockClient],
    call: Callable[[ClockClient], Alarm],
    status: int,
) -> None:
    canned.reply(status, _error("unavailable", "try later"))
    canned.reply(status, "<html>bad gateway</html>")
    canned.reply(200, _alarm_json())
    assert call(make_client(canned.base_url, retries=3)).id == 1
    assert len(canned.requests) == 3


def test_retries_are_bounded_then_unavailable(
    canned: CannedServer, make_client: Callable[..., ClockClient]
) -> None:
    for _ in range(5):
        canned.reply(503, _error("unavailable", "db down"))
    with pytest.raises(Unavailable) as caught:
        make_client(canned.base_url, retries=2).get("billing", "b")
    assert caught.value.status_code == 503
    assert len(canned.requests) == 3


def test_update_is_never_retried(
    canned: CannedServer, make_client: Callable[..., ClockClient]
) -> None:
    canned.reply(503, _error("unavailable", "db down"))
    canned.reply(200, _alarm_json())
    with pytest.raises(Unavailable):
        make_client(canned.base_url, retries=3).update("billing", "b", delay=5)
    assert [r.method for r in canned.requests] == ["PATCH"]


def test_read_timeout_retries_get_but_not_update(
    canned: CannedServer, make_client: Callable[..., ClockClient]
) -> None:
    client = make_client(canned.base_url, timeout=0.2, retries=1)
    canned.reply(200, _alarm_json(), delay=0.6)
    canned.reply(200, _alarm_json())
    assert client.get("billing", "b").id == 1
    assert len(canned.requests) == 2

    canned.reply(200, _alarm_json(), delay=0.6)
    with pytest.raises(Unavailable) as caught:
        client.update("billing", "b", payload="x")
    assert caught.value.status_code is None
    assert caught.value.code == "timeout"
    assert len(canned.requests) == 3


def test_connection_refused_is_unavailable_without_status(
    make_client: Callable[..., ClockClient],
) -> None:
    with socket.socket() as probe:  # a port nobody listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = make_client(f"http://127.0.0.1:{port}", retries=1)
    with pytest.raises(Unavailable) as caught:
        client.get("billing", "b")
    assert (caught.value.status_code, caught.value.code) == (None, "connection_error")


def test_update_sends_only_given_fields(
    canned: CannedServer, make_client: Callable[..., ClockClient]
) -> None:
    client = make_client(canned.base_url)
    canned.reply(200, _alarm_json())
    canned.reply(200, _alarm_json())
    client.update("billing", "b", payload="new", target_ring_at=T0)
    client.update("billing", "b", clear_latest_ring_at=True)
    assert [r.body for r in canned.requests] == [
        {"target_ring_at": T0, "payload": "new"},
        {"latest_ring_at": None},
    ]


def test_path_segments_are_quoted(
    canned: CannedServer, make_client: Callable[..., ClockClient]
) -> None:
    canned.reply(200, _alarm_json())
    make_client(canned.base_url).cancel("billing", "a b?c#d")
    assert [(r.method, r.path) for r in canned.requests] == [
        ("DELETE", "/v1/alarms/billing/a%20b%3Fc%23d")
    ]


def test_events_are_typed_and_asked_for_by_the_quoted_key(
    canned: CannedServer, make_client: Callable[..., ClockClient]
) -> None:
    failed = {"attempt": 2, "error": "not confirmed", "retry_at": T0 + 900, "new": [1]}
    canned.reply(
        200,
        {
            "events": [
                {"at": T0, "kind": "created", "actor": "billing", "detail": {}},
                {"at": T0 + 5, "kind": "attempt_failed", "actor": "clock", "detail": failed},
            ]
        },
    )
    canned.reply(200, {"events": [{"at": "soon", "kind": "x", "actor": "y", "detail": {}}]})
    canned.reply(200, {"events": None})
    client = make_client(canned.base_url)
    created, attempt = client.events("billing", "a/b c")
    assert created == AlarmEvent(T0, "created", "billing", {})
    assert (created.attempt, created.error, created.at_datetime) == (
        None,
        None,
        datetime.fromtimestamp(T0 / 1000, UTC),
    )
    assert (attempt.kind, attempt.attempt, attempt.error) == ("attempt_failed", 2, "not confirmed")
    assert attempt.detail["new"] == [1]  # kept, for details a newer server adds
    assert [(r.method, r.path) for r in canned.requests] == [
        ("GET", "/v1/alarms/billing/a%2Fb%20c/events")
    ]
    for _ in range(2):
        with pytest.raises(ClockError) as caught:
            client.events("billing", "b")
        assert caught.value.code == "bad_response"


def test_list_follows_cursors_lazily(
    canned: CannedServer, make_client: Callable[..., ClockClient]
) -> None:
    canned.reply(200, {"alarms": [_alarm_json(1), _alarm_json(2)], "next_cursor": "c1"})
    canned.reply(200, {"alarms": [_alarm_json(3)], "next_cursor": None})
    alarms = make_client(canned.base_url).list(application="billing", status="pending", limit=2)
    assert canned.requests == []  # nothing fetched until iterated
    assert [a.id for a in alarms] == [1, 2, 3]
    assert [r.query for r in canned.requests] == [
        {"limit": ["2"], "application": ["billing"], "status": ["pending"]},
        {"limit": ["2"], "application": ["billing"], "status": ["pending"], "cursor": ["c1"]},
    ]


def test_batch_create_maps_each_result_and_chunks_by_1000(
    canned: CannedServer, make_client: Callable[..., ClockClient]
) -> None:
    items = [
        {"application": "billing", "business_id": f"b{i}", "payload": "p", "delay": 1}
        for i in range(1001)
    ]
    bad = {"status": 400, **_error("validation_error", "no time", "target_ring_at")}
    first = [{"status": 201, "alarm": _alarm_json(1)}, bad]
    first += [{"status": 200, "alarm": _alarm_json(2)}] * 998
    canned.reply(200, {"results": first})
    canned.reply(200, {"results": [{"status": 201, "alarm": _alarm_json(3)}]})

    results = make_client(canned.base_url).batch_create(items)

    assert [len(r.body["alarms"]) for r in canned.requests] == [1000, 1]
    assert canned.requests[0].body["alarms"][0]["delay_ms"] == 1000
    assert len(results) == 1001
    assert (results[0].created, results[0].ok, results[0].alarm.id) == (True, True, 1)  # type: ignore[union-attr]
    assert (results[1].ok, results[1].alarm, results[1].status) == (False, None, 400)
    assert isinstance(results[1].error, ValidationError)
    assert results[1].error.field == "target_ring_at"
    assert (results[2].created, results[2].ok) == (False, True)
    assert results[1000].alarm is not None and results[1000].alarm.id == 3


def test_health_returns_the_report_also_when_503(
    canned: CannedServer, make_client: Callable[..., ClockClient]
) -> None:
    down = {"status": "unavailable", "database": "down", "broker": "ok"}
    canned.reply(200, {"status": "ok", "database": "ok", "broker": "ok"})
    canned.reply(503, down)
    client = make_client(canned.base_url, retries=0)
    assert client.health()["status"] == "ok"
    assert client.health() == down


def test_health_returns_a_degraded_report(
    canned: CannedServer, make_client: Callable[..., ClockClient]
) -> None:
    degraded = {
        "status": "degraded",
        "database": "ok",
        "broker": "down",
        "channels": {"amqp": "down", "webhook": "ok"},
    }
    canned.reply(200, degraded)
    assert make_client(canned.base_url, retries=0).health() == degraded
    assert [request.path for request in canned.requests] == ["/healthz"]


def _overview_json(**overrides: Any) -> dict[str, Any]:
    def counted(count: int, capped: bool = False) -> dict[str, Any]:
        return {"count": count, "capped": capped}

    overview = {
        "now": T0,
        "count_cap": 100_000,
        "application_count_cap": 10_000,
        "by_status": {"pending": counted(100_000, True), "dead": counted(12)},
        "overdue": counted(0),
        "due": [{"within_ms": 60_000, **counted(310)}, {"within_ms": 300_000, **counted(900)}],
        "by_application": [{"application": "orders", "pending": counted(10_000, True)}],
        "lateness": {"window_ms": 300_000, "sample": 0, "p50_ms": None},
        "health": {"database": "ok", "broker": "ok", "live_engines": 1, "engines": []},
    }
    return overview | overrides


def test_overview_and_whoami_are_typed(
    canned: CannedServer, make_client: Callable[..., ClockClient]
) -> None:
    client = make_client(canned.base_url, retries=0)
    canned.reply(200, _overview_json())
    overview = client.overview()
    assert (overview.now, overview.count_cap) == (T0, 100_000)
    assert overview.by_status["pending"] == CappedCount(100_000, True)
    assert overview.due == {60_000: CappedCount(310, False), 300_000: CappedCount(900, False)}
    assert overview.by_application == {"orders": {"pending": CappedCount(10_000, True)}}
    assert overview.lateness["p50_ms"] is None and overview.health["live_engines"] == 1
    canned.reply(200, {"authenticated": True, "applications": ["a", "b"], "read_only": True})
    assert client.whoami() == WhoAmI(True, ("a", "b"), True)
    assert [r.path for r in canned.requests] == ["/v1/overview", "/v1/whoami"]
    canned.reply(200, _overview_json(pull_ack={"window_ms": 300_000, "sample": 2, "p50_ms": 9}))
    assert client.overview().pull_ack["p50_ms"] == 9


def test_stats_are_typed_and_ask_for_their_minutes_and_application(
    canned: CannedServer, make_client: Callable[..., ClockClient]
) -> None:
    client = make_client(canned.base_url, retries=0)
    minute = {
        "minute": T0,
        "created": 12,
        "rung": 11,
        "failed": 1,
        "creates_per_s": 0.2,
        "rings_per_s": 0.183,
        "lateness_p50_ms": 2.1,
        "lateness_p99_ms": None,
    }
    answer = {
        "minute_ms": 60_000,
        "from": T0,
        "to": T0 + 60_000,
        "applications": ["orders"],
        "left_out": 7,
        "series": {"*": [minute], "orders": [minute]},
    }
    canned.reply(200, answer)
    stats = client.stats(minutes=1, application="orders")
    assert (stats.minute_ms, stats.from_ms, stats.to_ms) == (60_000, T0, T0 + 60_000)
    assert (stats.applications, stats.left_out) == (("orders",), 7)
    assert stats.series["orders"] == (StatsMinute(T0, 12, 11, 1, 0.2, 0.183, 2.1, None),)
    canned.reply(200, {**answer, "series": {"*": [{"minute": T0}]}})
    with pytest.raises(ClockError) as malformed:
        client.stats()
    assert malformed.value.code == "bad_response"
    assert [r.path for r in canned.requests] == ["/v1/stats", "/v1/stats"]
    assert [r.query for r in canned.requests] == [
        {"minutes": ["1"], "application": ["orders"]},
        {"minutes": ["60"]},
    ]


@pytest.mark.parametrize(
    "answer",
    [
        _overview_json(overdue={"count": "0", "capped": False}),
        _overview_json(due=[{"count": 1, "capped": False}]),
        {"authenticated": True, "applications": "orders", "read_only": False},
        {"authenticated": "yes", "applications": "*", "read_only": False},
    ],
    ids=["overview-count-not-int", "overview-due-without-window", "whoami-apps", "whoami-flag"],
)
def test_a_malformed_overview_or_whoami_is_a_bad_response(
    canned: CannedServer, make_client: Callable[..., ClockClient], answer: dict[str, Any]
) -> None:
    canned.reply(200, answer)
    client = make_client(canned.base_url, retries=0)
    with pytest.raises(ClockError) as caught:
        client.overview() if "now" in answer else client.whoami()
    assert caught.value.code == "bad_response"


# --- applications, canned ------------------------------------------------------------------


def _application_json(name: str = "billing", **overrides: Any) -> dict[str, Any]:
    application = {
        "name": name,
        "create_rate_per_s": 5.0,
        "create_burst": 10,
        "max_pending": None,
        "ring_rate_per_s": None,
        "ring_burst": None,
        "retry_base_s": 0.5,
        "retry_cap_s": None,
        "retry_max": 3,
        "default_cutoff_ms": None,
        "retention_days": 7,  # an integer where a number goes is a number
        "created_at": T0,
        "updated_at": T0 + 1,
        "registered": True,
        "counts": {"pending": 4, "due_next_minute": 1, "overdue": 2, "dead": 1},
    }
    application.update(overrides)
    return application


def test_applications_and_application_return_typed_applications(
    canned: CannedServer, make_client: Callable[..., ClockClient]
) -> None:
    unregistered = _application_json(
        "orders",
        **dict.fromkeys(["create_rate_per_s", "create_burst", "retry_base_s", "retry_max"]),
        retention_days=None,
        created_at=None,
        updated_at=None,
        registered=False,
    )
    canned.reply(200, {"applications": [_application_json(), unregistered]})
    canned.reply(200, _application_json(future_field="ignored"))
    client = make_client(canned.base_url)
    billing, orders = client.applications()
    assert billing == Application(
        name="billing",
        create_rate_per_s=5.0,
        create_burst=10,
        max_pending=None,
        ring_rate_per_s=None,
        ring_burst=None,
        retry_base_s=0.5,
        retry_cap_s=None,
        retry_max=3,
        default_cutoff_ms=None,
        retention_days=7.0,
        registered=True,
        counts=ApplicationCounts(pending=4, due_next_minute=1, overdue=2, dead=1),
        created_at=T0,
        updated_at=T0 + 1,
    )
    assert billing.settings["retry_max"] == 3 and len(billing.settings) == 15
    assert not orders.registered and orders.created_at is None
    assert {k: v for k, v in orders.settings.items() if v is not None} == {"channel": "amqp"}
    assert client.application("bil/ling") == billing
    assert [(r.method, r.path) for r in canned.requests] == [
        ("GET", "/v1/applications"),
        ("GET", "/v1/applications/bil%2Fling"),
    ]


@pytest.mark.parametrize(
    "body",
    [{"applications": None}, {"applications": [{"name": "x"}]},
     {"applications": [_application_json(counts=[])]},
     {"applications": [_application_json(registered="yes")]},
     {"applications": [_application_json(create_rate_per_s="5")]},
     {"applications": [_application_json(create_burst=True)]}],
)  # fmt: skip
def test_a_malformed_application_is_a_clock_error(
    canned: CannedServer, make_client: Callable[..., ClockClient], body: dict[str, Any]
) -> None:
    canned.reply(200, body)
    with pytest.raises(ClockError) as caught:
        make_client(canned.base_url).applications()
    assert caught.value.code == "bad_response"


def test_configure_patches_only_the_settings_given(
    canned: CannedServer, make_client: Callable[..., ClockClient]
) -> None:
    canned.reply(200, _application_json(max_pending=100, retry_max=None))
    application = make_client(canned.base_url).configure("billing", max_pending=100, retry_max=None)
    assert (application.max_pending, application.retry_max) == (100, None)
    [request] = canned.requests
    assert (request.method, request.path) == ("PATCH", "/v1/applications/billing")
    assert request.body == {"max_pending": 100, "retry_max": None}


def test_configure_registers_with_a_put_when_the_application_is_unknown(
    canned: CannedServer, make_client: Callable[..., ClockClient]
) -> None:
    canned.reply(404, _error("not_found", "no application 'billing' is registered"))
    canned.reply(201, _application_json(max_pending=100))
    application = make_client(canned.base_url).configure("billing", max_pending=100)
    assert application.max_pending == 100
    assert [(r.method, r.body) for r in canned.requests] == [
        ("PATCH", {"max_pending": 100}),
        ("PUT", {"max_pending": 100}),
    ]


def test_configure_without_settings_registers_or_reads(
    canned: CannedServer, make_client: Callable[..., ClockClient]
) -> None:
    client = make_client(canned.base_url)
    canned.reply(200, _application_json())
    assert client.configure("billing").name == "billing"
    canned.reply(404, _error("not_found", "no application 'billing' is registered"))
    canned.reply(201, _application_json())
    assert client.configure("billing").registered
    assert [(r.method, r.body) for r in canned.requests] == [
        ("GET", None),
        ("GET", None),
        ("PUT", {}),
    ]


def test_configure_with_replace_puts_every_setting(
    canned: CannedServer, make_client: Callable[..., ClockClient]
) -> None:
    canned.reply(200, _application_json())
    make_client(canned.base_url).configure("billing", replace=True, retry_max=3)
    assert [(r.method, r.body) for r in canned.requests] == [("PUT", {"retry_max": 3})]


def test_configure_refuses_a_setting_it_does_not_know_without_sending(
    canned: CannedServer, make_client: Callable[..., ClockClient]
) -> None:
    with pytest.raises(TypeError, match="max_pendings"):
        make_client(canned.base_url).configure("billing", max_pendings=3)
    assert canned.requests == []


@pytest.mark.parametrize(
    ("status", "body", "error_type", "field_name"),
    [
        (400, _error("validation_error", "create_burst needs create_rate_per_s", "create_burst"),
         ValidationError, "create_burst"),
        (401, _error("unauthorized", "no token"), Unauthorized, None),
        (403, _error("forbidden", "only an admin token"), Forbidden, None),
    ],
)  # fmt: skip
def test_configure_errors_are_typed_and_not_followed_by_a_put(
    canned: CannedServer,
    make_client: Callable[..., ClockClient],
    status: int,
    body: dict[str, Any],
    error_type: type[ClockError],
    field_name: str | None,
) -> None:
    canned.reply(status, body)
    with pytest.raises(error_type) as caught:
        make_client(canned.base_url).configure("billing", create_burst=3)
    assert (caught.value.status_code, caught.value.field) == (status, field_name)
    assert [r.method for r in canned.requests] == ["PATCH"]


def test_application_not_registered_is_not_found(
    canned: CannedServer, make_client: Callable[..., ClockClient]
) -> None:
    canned.reply(404, _error("not_found", "no application 'billing' is registered"))
    with pytest.raises(NotFound) as caught:
        make_client(canned.base_url).application("billing")
    assert (caught.value.status_code, caught.value.code) == (404, "not_found")


def test_put_is_retried_and_patch_is_not(
    canned: CannedServer, make_client: Callable[..., ClockClient]
) -> None:
    client = make_client(canned.base_url, retries=3)
    canned.reply(503, _error("unavailable", "db down"))
    canned.reply(200, _application_json())
    client.configure("billing", replace=True, max_pending=1)
    assert [r.method for r in canned.requests] == ["PUT", "PUT"]
    canned.requests.clear()
    canned.reply(503, _error("unavailable", "db down"))
    canned.reply(200, _application_json())
    with pytest.raises(Unavailable):
        client.configure("billing", max_pending=1)
    assert [r.method for r in canned.requests] == ["PATCH"]


# --- against the real server --------------------------------------------------------------


def _app() -> str:
    return f"t{uuid4().hex[:10]}"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.fixture
def live(live_server: Any) -> Iterator[ClockClient]:
    with ClockClient(live_server.base_url, timeout=10.0) as client:
        yield client


def test_live_create_is_idempotent(live: ClockClient) -> None:
    app = _app()
    first = live.create(app, "order-1", '{"n": 1}', target_ring_at=_now_ms() + 3_600_000)
    again = live.create(app, "order-1", "different", delay=5)
    assert (first.application, first.business_id, first.status) == (app, "order-1", "pending")
    assert again == first  # the stored alarm, unchanged
    assert live.get(app, "order-1") == first


@pytest.mark.parametrize("unit", ["€", "中", "😀", "\x01"], ids=["euro", "cjk", "emoji", "control"])
def test_live_a_payload_under_the_limit_is_taken_escaped(live: ClockClient, unit: str) -> None:
    """Through waitress at the default 64 KiB: 60,000 bytes of payload that the SDK's JSON
    (ensure_ascii) writes as up to 360,000 bytes."""
    app = _app()
    payload = unit * (60_000 // len(unit.encode()))
    alarm = live.create(app, "escaped", payload, target_ring_at=_now_ms() + 3_600_000)
    assert alarm.payload == payload and live.get(app, "escaped").payload == payload
    changed = live.update(app, "escaped", payload=payload[::-1])
    assert changed.payload == payload[::-1]
    assert live.cancel(app, "escaped").status == "cancelled"


def test_live_create_with_delay(live: ClockClient) -> None:
    before = _now_ms()
    app = _app()
    alarm = live.create(app, "d", "p", delay=timedelta(minutes=1))
    after = _now_ms()
    assert before + 60_000 <= alarm.target_ring_at <= after + 60_000
    assert alarm.latest_ring_at is None and alarm.rung_at is None and alarm.retry_times == 0
    # Due while the session's server still runs: it would ring into a queue nobody deletes.
    assert live.cancel(app, "d").status == "cancelled"


def test_live_batch_create_with_one_bad_item(live: ClockClient) -> None:
    app = _app()
    due = _now_ms() + 3_600_000
    items: list[dict[str, Any]] = [
        {"application": app, "business_id": "a", "payload": "1", "target_ring_at": due},
        # a cutoff before its target: a rule of each item's own, not of the batch's shape
        {
            "application": app,
            "business_id": "bad",
            "payload": "2",
            "target_ring_at": due,
            "latest_ring_at": due - 1,
        },
        {"application": app, "business_id": "c", "payload": "3", "delay": 3600},
    ]
    results = live.batch_create(items)
    assert [r.status for r in results] == [201, 400, 201]
    assert isinstance(results[1].error, ValidationError) and results[1].alarm is None
    assert [r.alarm.business_id for r in results if r.alarm] == ["a", "c"]
    assert [r.status for r in live.batch_create(items)] == [200, 400, 200]
    with pytest.raises(NotFound):
        live.get(app, "bad")
    no_time = {"application": app, "business_id": "no-time", "payload": "4"}
    with pytest.raises(ValidationError) as refused:  # not a create request: the whole batch
        live.batch_create([{**items[0], "business_id": "d"}, no_time])
    assert refused.value.field == "alarms.1.target_ring_at"
    for business_id in ("d", "no-time"):
        with pytest.raises(NotFound):
            live.get(app, business_id)


def test_live_update_and_cancel(live: ClockClient) -> None:
    app = _app()
    live.create(app, "u", "old", delay=3600)
    new_target = _now_ms() + 7_200_000
    updated = live.update(app, "u", payload="new", target_ring_at=new_target)
    assert (updated.payload, updated.target_ring_at, updated.status) == (
        "new",
        new_target,
        "pending",
    )
    assert live.get(app, "u") == updated

    cancelled = live.cancel(app, "u")
    assert (cancelled.id, cancelled.status) == (updated.id, "cancelled")
    assert live.cancel(app, "u").status == "cancelled"  # cancel is idempotent
    with pytest.raises(Conflict) as caught:
        live.update(app, "u", payload="too late")
    assert (caught.value.status, caught.value.status_code) == ("cancelled", 409)


def test_live_not_found(live: ClockClient) -> None:
    with pytest.raises(NotFound) as caught:
        live.get(_app(), "nope")
    assert (caught.value.status_code, caught.value.code) == (404, "not_found")
    with pytest.raises(NotFound):
        live.cancel(_app(), "nope")


def test_live_validation_error_names_the_field(live: ClockClient) -> None:
    due = _now_ms() + 60_000
    with pytest.raises(ValidationError) as caught:
        live.create(_app(), "v", "p", target_ring_at=due, latest_ring_at=due - 1)
    assert (caught.value.status_code, caught.value.field) == (400, "latest_ring_at")
    with pytest.raises(ValidationError) as caught:
        live.create("not a valid app!", "v", "p", delay=1)
    assert caught.value.field == "application"


def test_live_list_paginates(live: ClockClient) -> None:
    app = _app()
    live.batch_create(
        [{"application": app, "business_id": f"k{i:02}", "payload": "", "delay": 3600}
         for i in range(25)]
    )  # fmt: skip
    first = live.list_page(application=app, limit=10)
    assert len(first.alarms) == 10 and first.next_cursor is not None
    listed = list(live.list(application=app, limit=10))
    assert sorted(a.business_id for a in listed) == [f"k{i:02}" for i in range(25)]
    assert len({a.id for a in listed}) == 25
    assert list(live.list(application=app, status="cancelled")) == []


def test_live_health(live: ClockClient) -> None:
    assert live.health()["status"] == "ok"


def test_live_probes_metrics_and_openapi(live: ClockClient) -> None:
    alive = live.live()
    assert alive["status"] == "ok" and alive["stalled"] == [] and alive["loops"]
    assert live.ready() == {"status": "ok", "database": "ok"}
    assert "clock_" in live.metrics()
    document = live.openapi()
    assert document["openapi"].startswith("3.1") and "/v1/alarms" in document["paths"]


def test_live_whoami_on_a_server_without_tokens(live: ClockClient) -> None:
    assert live.whoami() == WhoAmI(authenticated=False, applications="*", read_only=False)


def test_live_overview_counts_an_application_s_alarms(live: ClockClient) -> None:
    app = "0" + _app()  # the overview lists the first applications by name
    live.create(app, "o", "p", delay=3600)
    overview = live.overview()
    assert overview.by_application[app]["pending"] == CappedCount(1, False)
    assert overview.by_status["pending"].count >= 1
    assert overview.due and all(within_ms > 0 for within_ms in overview.due)
    assert overview.health["database"] == "ok" and overview.now >= _now_ms() - 60_000
    live.cancel(app, "o")


def _delete_queue(amqp_url: str, queue_name: str) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    try:
        connection.channel().queue_delete(queue_name)
    finally:
        connection.close()


def _consumer_count(amqp_url: str, queue_name: str) -> int:
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    try:
        return connection.channel().queue_declare(queue_name, passive=True).method.consumer_count
    except pika.exceptions.ChannelClosedByBroker:
        return 0  # not declared yet
    finally:
        connection.close()


@pytest.mark.rabbitmq
def test_live_alarm_rings_to_consumer_not_before_its_time(
    live: ClockClient, live_server: Any
) -> None:
    app = _app()
    prefix = getattr(live_server, "queue_prefix", "clock.")
    received: queue.Queue[tuple[AlarmMessage, int]] = queue.Queue()
    consumer = Consumer(
        live_server.amqp_url,
        app,
        lambda message: received.put((message, _now_ms())),
        queue_prefix=prefix,
        exchange=live_server.exchange,
    )
    errors: list[BaseException] = []

    def run() -> None:
        try:
            consumer.run()
        except BaseException as exc:  # reported by the assertions below
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:

        def consuming() -> bool:
            if errors:
                raise errors[0]
            return _consumer_count(live_server.amqp_url, prefix + app) >= 1

        eventually(consuming, 5, 0.05, "consumer did not start")

        alarm = live.create(app, "ring-me", '{"hello": "world"}', target_ring_at=_now_ms() + 300)
        message, received_ms = received.get(timeout=15)
    finally:
        consumer.stop()
        thread.join(5)
        _delete_queue(live_server.amqp_url, prefix + app)

    assert not thread.is_alive() and not errors, errors
    assert (message.id, message.message_id) == (alarm.id, str(alarm.id))
    assert (message.application, message.business_id) == (app, "ring-me")
    assert (message.payload, message.target_ring_at) == ('{"hello": "world"}', alarm.target_ring_at)
    assert message.attempt == 1  # the broker took the first publish
    assert message.published_at is not None
    assert alarm.target_ring_at <= message.published_at <= received_ms
    assert (message.trigger, message.count) == (None, None)  # not a count-triggered alarm
    assert received_ms >= alarm.target_ring_at

    def rung() -> Alarm:
        current = live.get(app, "ring-me")
        assert current.status == "rung", f"still {current.status}"
        return current

    current = eventually(rung, 5, 0.05)
    assert current.rung_at is not None and current.rung_at >= alarm.target_ring_at


def test_live_configure_registers_then_changes_only_what_it_is_given(live: ClockClient) -> None:
    app = _app()
    with pytest.raises(NotFound):
        live.application(app)
    created = live.configure(app, create_rate_per_s=50, create_burst=100, retry_max=4)
    assert created.registered and created.name == app
    assert (created.create_rate_per_s, created.create_burst, created.retry_max) == (50, 100, 4)
    assert created.max_pending is None and created.counts == ApplicationCounts(0, 0, 0, 0)
    changed = live.configure(app, max_pending=1000, retry_max=None)
    assert changed.settings == {
        **created.settings,
        "max_pending": 1000,
        "retry_max": None,
    }
    assert live.application(app) == changed
    replaced = live.configure(app, replace=True, retention_days=2)
    assert replaced.settings == {
        **dict.fromkeys(created.settings),
        "channel": "amqp",
        "retention_days": 2.0,
    }


def test_live_applications_list_counts(live: ClockClient) -> None:
    app = _app()
    live.configure(app)
    due = _now_ms() + 3_600_000
    live.batch_create(
        [{"application": app, "business_id": f"k{i}", "payload": "", "target_ring_at": due}
         for i in range(3)]
    )  # fmt: skip
    found = {application.name: application for application in live.applications()}
    assert found[app].counts == ApplicationCounts(pending=3, due_next_minute=0, overdue=0, dead=0)
    assert live.application(app).counts.pending == 3  # type: ignore[union-attr]
    uncounted = {application.name: application for application in live.applications(counts=False)}
    assert uncounted.keys() == found.keys()
    assert uncounted[app].counts is None and uncounted[app].registered


def test_live_configure_errors_name_the_field(live: ClockClient) -> None:
    app = _app()
    with pytest.raises(ValidationError) as caught:
        live.configure(app, create_burst=5)  # a burst without its rate
    assert (caught.value.status_code, caught.value.field) == (400, "create_burst")
    with pytest.raises(NotFound):
        live.application(app)  # registered nothing
    live.configure(app, retry_base_s=2.0)
    with pytest.raises(ValidationError) as caught:
        live.configure(app, retry_cap_s=1.0)
    assert caught.value.field == "retry_cap_s"
    with pytest.raises(ValidationError) as caught:
        live.configure(app, max_pending=0)
    assert caught.value.field == "max_pending"
    with pytest.raises(ValidationError) as caught:
        live.application("not a valid app!")
    assert caught.value.field == "application"


@pytest.mark.parametrize("name", [".", ".."])
def test_dot_names_are_refused_before_anything_is_sent(
    canned: CannedServer, make_client: Callable[..., ClockClient], name: str
) -> None:
    """A path segment "." or ".." is removed on the way, so a cancel of ("..", "alarms/x/y")
    once reached /v1/alarms/alarms/x/y: another alarm of the caller's."""
    client = make_client(canned.base_url)
    calls: list[Callable[[], object]] = [
        lambda: client.cancel(name, "alarms/x/y"),
        lambda: client.get(name, "b"),
        lambda: client.update(name, "b", payload="p"),
        lambda: client.events(name, "b"),
        lambda: client.application(name),
        lambda: client.cancel("app", name),
    ]
    for call in calls:
        with pytest.raises(ValidationError) as refused:
            call()
        assert refused.value.field in ("application", "business_id")
        assert repr(name) in refused.value.message
    assert canned.requests == []
