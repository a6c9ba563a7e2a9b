"""AsyncClockClient: ClockClient's contract over httpx, against the canned local server (encoding,
errors, the retry policy), then against the live server."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar
from uuid import uuid4

import pytest

from clock_client import (
    AsyncClockClient,
    CappedCount,
    Conflict,
    NotFound,
    RateLimited,
    Unavailable,
    ValidationError,
    WhoAmI,
)
from tests.client_support import T0, CannedServer, alarm_json, error_json, serve_canned

T = TypeVar("T")


def run(base_url: str, work: Callable[[AsyncClockClient], Awaitable[T]], **kwargs: Any) -> T:
    """`work` done with a client of `base_url` in a fresh event loop; the client closed."""

    async def main() -> T:
        kwargs.setdefault("backoff_factor", 0.01)
        async with AsyncClockClient(base_url, **kwargs) as client:
            return await work(client)

    return asyncio.run(main())


@pytest.fixture
def canned() -> Iterator[CannedServer]:
    yield from serve_canned()


def test_create_sends_the_same_request_as_the_sync_client(canned: CannedServer) -> None:
    canned.reply(201, alarm_json())
    alarm = run(
        canned.base_url,
        lambda c: c.create("billing", "order-1", "{}", target_ring_at=T0, latest_ring_at=T0 + 1),
        token="secret",
    )
    assert alarm.id == 1 and alarm.target_ring_at == T0
    [sent] = canned.requests
    assert (sent.method, sent.path) == ("POST", "/v1/alarms")
    assert sent.body == {
        "application": "billing",
        "business_id": "order-1",
        "payload": "{}",
        "target_ring_at": T0,
        "latest_ring_at": T0 + 1,
    }
    assert sent.headers["Authorization"] == "Bearer secret"


def test_errors_are_typed_as_in_the_sync_client(canned: CannedServer) -> None:
    canned.reply(409, error_json("conflict", "already rung", status="rung"))
    with pytest.raises(Conflict) as caught:
        run(canned.base_url, lambda c: c.cancel("billing", "b"))
    assert (caught.value.status, caught.value.status_code) == ("rung", 409)

    canned.reply(429, error_json("rate_limited", "slow down", retry_after_s=3))
    with pytest.raises(RateLimited) as limited:
        run(canned.base_url, lambda c: c.create("billing", "b", "p", delay=1))
    assert limited.value.retry_after_s == 3

    with pytest.raises(ValidationError, match="business_id"):
        run(canned.base_url, lambda c: c.get("billing", ".."))


def test_idempotent_calls_retry_gateway_errors_and_update_is_sent_once(
    canned: CannedServer,
) -> None:
    canned.reply(503, error_json("unavailable", "try later"))
    canned.reply(502, "<html>bad gateway</html>")
    canned.reply(200, alarm_json())
    assert run(canned.base_url, lambda c: c.get("billing", "b"), retries=3).id == 1
    assert len(canned.requests) == 3

    canned.reply(503, error_json("unavailable", "db down"))
    canned.reply(200, alarm_json())
    with pytest.raises(Unavailable) as caught:
        run(canned.base_url, lambda c: c.update("billing", "b", delay=5), retries=3)
    assert caught.value.status_code == 503
    assert [r.method for r in canned.requests[3:]] == ["PATCH"]


def test_retries_are_bounded_then_unavailable(canned: CannedServer) -> None:
    for _ in range(5):
        canned.reply(503, error_json("unavailable", "db down"))
    with pytest.raises(Unavailable) as caught:
        run(canned.base_url, lambda c: c.get("billing", "b"), retries=2)
    assert caught.value.status_code == 503
    assert len(canned.requests) == 3


def test_a_read_timeout_is_retried_for_get_but_not_for_update(canned: CannedServer) -> None:
    canned.reply(200, alarm_json(), delay=0.6)
    canned.reply(200, alarm_json())
    assert run(canned.base_url, lambda c: c.get("billing", "b"), timeout=0.2, retries=1).id == 1
    assert len(canned.requests) == 2

    canned.reply(200, alarm_json(), delay=0.6)
    with pytest.raises(Unavailable) as caught:
        run(canned.base_url, lambda c: c.update("billing", "b", payload="x"), timeout=0.2)
    assert (caught.value.status_code, caught.value.code) == (None, "timeout")
    assert len(canned.requests) == 3


def test_connection_refused_is_unavailable_without_status() -> None:
    with socket.socket() as probe:  # a port nobody listens on once closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(Unavailable) as caught:
        run(f"http://127.0.0.1:{port}", lambda c: c.get("billing", "b"), retries=1)
    assert (caught.value.status_code, caught.value.code) == (None, "connection_error")


def test_health_returns_the_report_also_when_503(canned: CannedServer) -> None:
    report = {"status": "unavailable", "database": "down", "broker": "ok", "channels": {}}
    for _ in range(4):  # a 503 is retried first, as by the sync client
        canned.reply(503, report)
    assert run(canned.base_url, lambda c: c.health()) == report


def test_list_follows_cursors_lazily(canned: CannedServer) -> None:
    canned.reply(200, {"alarms": [alarm_json(1), alarm_json(2)], "next_cursor": "c2"})
    canned.reply(200, {"alarms": [alarm_json(3)], "next_cursor": None})

    async def first_two_then_all(client: AsyncClockClient) -> tuple[list[int], int, list[int]]:
        pages = client.list(application="billing", limit=2)
        first = [(await anext(pages)).id, (await anext(pages)).id]
        asked = len(canned.requests)  # before the second page is needed
        rest = [alarm.id async for alarm in pages]
        return first, asked, rest

    assert run(canned.base_url, first_two_then_all) == ([1, 2], 1, [3])
    assert canned.requests[1].query["cursor"] == ["c2"]


def _app() -> str:
    return f"a{uuid4().hex[:10]}"


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@pytest.fixture
def live_url(live_server: Any) -> str:
    return str(live_server.base_url)


def test_live_create_get_update_cancel(live_url: str) -> None:
    app = _app()

    async def work(client: AsyncClockClient) -> None:
        due = _now_ms() + 3_600_000
        first = await client.create(app, "k", "old", target_ring_at=due)
        assert await client.create(app, "k", "ignored", delay=5) == first
        assert await client.get(app, "k") == first
        moved = await client.update(app, "k", payload="new", delay=7200)
        assert (moved.payload, moved.status) == ("new", "pending")
        assert (await client.cancel(app, "k")).status == "cancelled"
        with pytest.raises(Conflict):
            await client.update(app, "k", payload="too late")
        with pytest.raises(NotFound):
            await client.get(app, "nope")
        kinds = [event.kind for event in await client.events(app, "k")]
        assert kinds[0] == "created" and kinds[-1] == "cancelled"

    run(live_url, work, timeout=10.0)


def test_live_batch_list_and_bulk_cancel(live_url: str) -> None:
    app = _app()

    async def work(client: AsyncClockClient) -> None:
        items = [
            {"application": app, "business_id": f"b{n}", "payload": str(n), "delay": 3600}
            for n in range(5)
        ]
        results = await client.batch_create(items)
        assert [result.status for result in results] == [201] * 5
        listed = [alarm.business_id async for alarm in client.list(app, limit=2)]
        assert sorted(listed) == [f"b{n}" for n in range(5)]
        assert await client.cancel_where(app) == 5
        assert {alarm.status async for alarm in client.list(app)} == {"cancelled"}

    run(live_url, work, timeout=10.0)


def test_live_applications_and_what_the_server_says_of_itself(live_url: str) -> None:
    app = "0" + _app()  # the overview lists the first applications by name

    async def work(client: AsyncClockClient) -> None:
        configured = await client.configure(app, max_pending=10)
        assert (configured.name, configured.max_pending, configured.registered) == (
            app, 10, True,
        )  # fmt: skip
        assert (await client.application(app)).max_pending == 10
        assert app in [found.name for found in await client.applications(counts=False)]
        await client.create(app, "o", "p", delay=3600)
        overview = await client.overview()
        assert overview.by_application[app]["pending"] == CappedCount(1, False)
        stats = await client.stats(minutes=2, application=app)
        assert stats.applications == (app,) and len(stats.series["*"]) == 2
        assert stats.left_out == 0
        assert await client.whoami() == WhoAmI(False, "*", False)
        assert (await client.health())["status"] == "ok"
        assert (await client.live())["status"] == "ok"
        assert (await client.ready())["database"] == "ok"
        assert "clock_" in await client.metrics()
        assert "/v1/whoami" in (await client.openapi())["paths"]
        await client.cancel(app, "o")

    run(live_url, work, timeout=10.0)


def test_live_calls_run_concurrently_on_one_client(live_url: str) -> None:
    app = _app()

    async def work(client: AsyncClockClient) -> None:
        created = await asyncio.gather(
            *(client.create(app, f"c{n}", "p", delay=3600) for n in range(20))
        )
        assert len({alarm.id for alarm in created}) == 20
        assert await client.cancel_where(app) == 20

    run(live_url, work, timeout=10.0)
