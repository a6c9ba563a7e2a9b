"""The SDK's side of the pull channel: ClockClient.pull and ack, and the PullConsumer, against
a real HTTP server over the API and engine of tests/test_pull.py (on the fake clock)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any, TypeVar

import pytest

from clock_client import (
    AckResult,
    AlarmMessage,
    AsyncClockClient,
    ClockClient,
    Conflict,
    Forbidden,
    PullConsumer,
    PulledMessage,
    RateLimited,
    Unavailable,
    ValidationError,
)
from clock_server.api.long_polls import LongPollSlots
from clock_server.store.alarms import AlarmStore
from clock_server.testing import SettableClock
from tests.api_support import NOW
from tests.pull_harness import APP, JOBS, OTHER, VISIBILITY_MS, Harness
from tests.support import eventually, free_port, serve_wsgi


@pytest.fixture
def harness(store: AlarmStore, fake_clock: SettableClock) -> Harness:
    return Harness(store, fake_clock)


@pytest.fixture
def server(harness: Harness) -> Iterator[str]:
    yield from serve_wsgi(harness.app)


def ready(h: Harness, *business_ids: str) -> list[int]:
    """Alarms of `jobs` handed off to its pullers at NOW + 1,000; their ids."""
    ids = [h.create(business_id, NOW + 1_000) for business_id in business_ids]
    h.clock.set(NOW + 1_000)
    h.step()
    return ids


def test_the_client_pulls_and_acks(harness: Harness, server: str):
    [alarm_id] = ready(harness, "a")
    with ClockClient(server, token=JOBS, retries=0) as client:
        [pulled] = client.pull(APP, max=5)
        assert isinstance(pulled, PulledMessage)
        assert (pulled.id, pulled.attempt, pulled.leased_until) == (
            str(alarm_id), 1, NOW + 1_000 + VISIBILITY_MS,
        )  # fmt: skip
        assert pulled.message == AlarmMessage(
            id=alarm_id, application=APP, business_id="a", payload="p-a",
            target_ring_at=NOW + 1_000, attempt=1, message_id=str(alarm_id),
            redelivered=False, published_at=NOW + 1_000,
        )  # fmt: skip
        assert pulled.body["id"] == alarm_id
        assert client.pull(APP) == []

        assert client.ack(APP, [alarm_id, "424242"]) == AckResult(
            acked=(str(alarm_id),), not_acked=("424242",)
        )
        assert client.ack(APP, [pulled.id]) == AckResult(acked=(), not_acked=(pulled.id,))
        alarm = client.get(APP, "a")
        assert (alarm.status, alarm.rung_at) == ("rung", NOW + 1_000)


def test_a_message_leased_again_is_redelivered(harness: Harness, server: str):
    ready(harness, "a")
    with ClockClient(server, token=JOBS, retries=0) as client:
        [first] = client.pull(APP)
        harness.clock.set(first.leased_until)
        [again] = client.pull(APP)
    assert (again.id, again.attempt) == (first.id, 2)
    assert again.message.redelivered and again.message.attempt == 2


def test_the_async_client_pulls_and_acks_as_the_sync_one(harness: Harness, server: str):
    [alarm_id] = ready(harness, "a")

    async def pull_then_ack() -> tuple[list[PulledMessage], AckResult, list[PulledMessage]]:
        async with AsyncClockClient(server, token=JOBS, retries=0) as client:
            pulled = await client.pull(APP, max=5, wait_s=0.1)
            acked = await client.ack(APP, [item.id for item in pulled])
            return pulled, acked, await client.pull(APP)

    pulled, acked, after = asyncio.run(pull_then_ack())
    assert [(item.id, item.message.business_id) for item in pulled] == [(str(alarm_id), "a")]
    assert acked == AckResult(acked=(str(alarm_id),), not_acked=())
    assert after == [] and harness.alarm("a")["status"] == "rung"


def test_the_client_raises_what_the_server_refuses(harness: Harness, server: str):
    with ClockClient(server, token=OTHER, retries=0) as client:
        with pytest.raises(Conflict) as conflict:
            client.pull("other")
        assert conflict.value.status == "amqp"
        with pytest.raises(Forbidden):
            client.pull(APP)
        with pytest.raises(Forbidden):
            client.ack(APP, ["1"])
    with ClockClient(server, token=JOBS, retries=0) as client:
        with pytest.raises(ValidationError) as bad:
            client.pull(APP, max=0)
        assert bad.value.field == "max"
        with pytest.raises(ValidationError) as bad:
            client.ack(APP, [])
        assert bad.value.field == "ids"


def test_a_long_poll_outlasts_the_client_timeout(harness: Harness, server: str):
    with ClockClient(server, token=JOBS, timeout=0.5, retries=0) as client:
        started = time.monotonic()
        assert client.pull(APP, wait_s=1.0) == []
        # The server waits in real time: only the time taken shows the pull outlasted 0.5 s.
        assert time.monotonic() - started >= 1.0


def test_the_consumer_acks_what_its_handler_handled(harness: Harness, server: str):
    h = harness
    ok_id, flaky_id = ready(h, "ok", "flaky")
    handled: list[AlarmMessage] = []
    failed: list[AlarmMessage] = []

    def handler(message: AlarmMessage) -> None:
        if message.business_id == "flaky" and not failed:
            failed.append(message)
            raise RuntimeError("not this time")
        handled.append(message)

    with ClockClient(server, token=JOBS, retries=0) as client:
        consumer = PullConsumer(client, APP, handler, max=10, wait_s=0.2)
        thread = threading.Thread(target=consumer.run)
        thread.start()
        try:
            eventually(lambda: len(handled) == 1 and len(failed) == 1)
            eventually(lambda: h.store.get(APP, "ok").status == "rung")
            assert h.store.get(APP, "flaky").status == "delivering"  # not acked
            h.clock.set(NOW + 1_000 + VISIBILITY_MS)  # its lease has ended
            eventually(lambda: len(handled) == 2)
            eventually(lambda: h.store.get(APP, "flaky").status == "rung")
        finally:
            consumer.stop()
            thread.join(5)
    assert not thread.is_alive()
    assert [(m.id, m.attempt, m.redelivered) for m in handled] == [
        (ok_id, 1, False),
        (flaky_id, 2, True),
    ]
    assert failed[0].id == flaky_id


E = TypeVar("E", bound=Exception)


def pulls_failing(client: ClockClient, kind: type[E]) -> list[E]:
    """The errors of `kind` that `client`'s pulls raise from now on, as they come."""
    failures: list[E] = []
    pull = client.pull

    def recording(*args: Any, **kwargs: Any) -> list[PulledMessage]:
        try:
            return pull(*args, **kwargs)
        except kind as failure:
            failures.append(failure)
            raise

    client.pull = recording  # type: ignore[method-assign]
    return failures


def test_the_consumer_stops_from_another_thread_while_the_server_is_away():
    client = ClockClient(f"http://127.0.0.1:{free_port()}", token=JOBS, retries=0)
    failures = pulls_failing(client, Unavailable)
    consumer = PullConsumer(client, APP, lambda message: None, wait_s=0.1)
    thread = threading.Thread(target=consumer.run)
    thread.start()
    eventually(lambda: failures)  # a pull failed: it waits out the backoff
    started = time.monotonic()
    consumer.stop()
    thread.join(5)
    assert not thread.is_alive() and time.monotonic() - started < 1
    with pytest.raises(RuntimeError):
        consumer.run()
    client.close()


def test_the_consumer_waits_a_jittered_backoff_that_doubles_up_to_its_cap(
    caplog: pytest.LogCaptureFixture,
):
    client = ClockClient(f"http://127.0.0.1:{free_port()}", token=JOBS, retries=0)
    failures = pulls_failing(client, Unavailable)
    consumer = PullConsumer(client, APP, lambda message: None, wait_s=0,
                            retry_first_s=0.01, retry_cap_s=0.04)  # fmt: skip
    thread = threading.Thread(target=consumer.run)
    with caplog.at_level("WARNING", logger="clock_client.pull_consumer"):
        thread.start()
        eventually(lambda: len(failures) >= 8)
        consumer.stop()
        thread.join(5)
    waits = [float(r.getMessage().split(" in ")[-1].removesuffix(" s")) for r in caplog.records]
    assert len(waits) >= 8
    ceilings = [min(0.04, 0.01 * 2**n) for n in range(len(waits))]
    assert all(0 <= wait <= ceiling for wait, ceiling in zip(waits, ceilings, strict=True))
    assert len(set(waits)) > 1, f"no jitter: {waits}"
    with pytest.raises(ValueError, match="first_s"):
        PullConsumer(client, APP, lambda message: None, retry_first_s=0)
    client.close()


def test_the_consumer_comes_back_when_too_many_pulls_wait(harness: Harness, server: str):
    h = harness
    slots = h.app.extensions["clock"].long_polls = LongPollSlots(4)  # one pull waits at once
    handled: list[AlarmMessage] = []
    with ClockClient(server, token=JOBS, retries=0) as client:
        refusals = pulls_failing(client, RateLimited)
        consumer = PullConsumer(client, APP, handled.append, wait_s=0.2)
        thread = threading.Thread(target=consumer.run)
        with slots.waiting(APP):  # another pull of jobs waits meanwhile
            thread.start()
            eventually(lambda: bool(refusals))
        assert refusals[0].retry_after_s == 1
        [alarm_id] = ready(h, "a")
        eventually(lambda: bool(handled))
        consumer.stop()
        thread.join(5)
    assert [m.id for m in handled] == [alarm_id]
    assert h.alarm("a")["status"] == "rung"


def test_the_consumer_ends_on_an_answer_trying_again_cannot_change(harness: Harness, server: str):
    with ClockClient(server, token=OTHER, retries=0) as client:
        consumer = PullConsumer(client, "other", lambda message: None, wait_s=0)
        with pytest.raises(Conflict):
            consumer.run()


def test_a_consumer_stopped_before_it_runs_returns_at_once(server: str):
    with ClockClient(server, token=JOBS, retries=0) as client:
        consumer = PullConsumer(client, APP, lambda message: None)
        consumer.stop()
        consumer.run()
        assert consumer.stopping
    with pytest.raises(ValueError):
        PullConsumer(client, APP, lambda message: None, max=101)
    with pytest.raises(ValueError):
        PullConsumer(client, APP, lambda message: None, wait_s=21)
