"""The webhook channel end to end: an application configured over the admin API, its alarms
rung by the engine on the fake clock and POSTed to a real HTTP receiver in this process,
signed per Standard Webhooks; retries, Retry-After, timeouts, death, the cutoff, cancels
while delivering, and a slow endpoint beside another application. On SQLite and MariaDB."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import orjson
import pytest
import standardwebhooks

from clock_client import AlarmMessage, ClockClient, WebhookVerificationError, verify_webhook
from clock_client import ValidationError as ClientValidationError
from clock_client.webhooks import verify
from clock_server.api import create_app
from clock_server.api.tokens import load_tokens
from clock_server.metrics import Metrics
from clock_server.model import Claim, NewAlarm
from clock_server.runtime.build_api import build_services
from clock_server.settings import Settings
from clock_server.slot_space import slot_of
from clock_server.store.alarms import AlarmStore
from clock_server.store.claims import SqlClaimStore
from clock_server.store.history import AlarmHistory
from clock_server.testing import SettableClock
from tests.api_support import OpenApiChecker
from tests.support import metric_value, serve_wsgi, settle
from tests.webhook_harness import ADMIN, HOOKS, TOKENS, Harness, real_now_ms
from tests.webhook_receiver import Answer, Received, Receiver, Wire, raw_receiving, receiving


@pytest.fixture
def harness(store: AlarmStore, fake_clock: SettableClock) -> Iterator[Harness]:
    fake_clock.set(real_now_ms())
    h = Harness(store, fake_clock)
    yield h
    h.close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with receiving() as r:
        yield r


def scripted(*answers: Answer) -> Any:
    """A policy answering the n-th call with answers[n] (the last one from then on)."""
    calls: list[int] = []

    def policy(_received: Received) -> Answer:
        calls.append(1)
        return answers[min(len(calls), len(answers)) - 1]

    return policy


# --- the registry --------------------------------------------------------------------------


def test_the_webhook_channel_needs_a_url_and_gets_a_secret_that_can_be_rotated(harness: Harness):
    h = harness
    missing = h.call("PUT", "/v1/applications/hooks", json={"channel": "webhook"})
    assert missing.status_code == 400 and missing.get_json()["error"]["field"] == "webhook_url"
    wrong = h.call("PUT", "/v1/applications/hooks", json={"channel": "smtp"})
    assert wrong.status_code == 400 and wrong.get_json()["error"]["field"] == "channel"
    ftp = h.call("PUT", "/v1/applications/hooks", json={"webhook_url": "ftp://example.com/x"})
    assert ftp.status_code == 400 and ftp.get_json()["error"]["field"] == "webhook_url"
    assert h.call("GET", "/v1/applications/hooks").status_code == 404  # nothing was written
    stored = h.configure("hooks", channel="webhook", webhook_url="http://127.0.0.1:9/hook")
    assert (stored["channel"], stored["webhook_secret_set"]) == ("webhook", True)
    assert "webhook_secret" not in stored
    first = h.secret("hooks")
    assert first.startswith("whsec_")
    rotated = h.call("POST", "/v1/applications/hooks/webhook-secret").get_json()
    assert rotated["webhook_secret"].startswith("whsec_") and rotated["webhook_secret"] != first
    assert h.secret("hooks") == rotated["webhook_secret"]
    assert h.call("GET", "/v1/applications/hooks/webhook-secret", HOOKS).status_code == 403
    assert h.call("POST", "/v1/applications/hooks/webhook-secret", HOOKS).status_code == 403


def test_a_replaced_secret_signs_beside_the_new_one_for_its_overlap(
    harness: Harness, receiver: Receiver
):
    h = harness
    t0 = h.clock.now_ms()
    rotate = "/v1/applications/hooks/webhook-secret"
    h.configure("hooks", channel="webhook", webhook_url=receiver.url())
    old = h.secret("hooks")
    refusals = [({"overlap_s": -1}, "overlap_s"), ({"overlap_s": 8 * 86_400}, "overlap_s"),
                ({"overlap_s": "60"}, "overlap_s"), ({"overlap": 60}, "overlap")]  # fmt: skip
    for body, field in refusals:
        refused = h.call("POST", rotate, json=body)
        assert refused.status_code == 400 and refused.get_json()["error"]["field"] == field
    assert h.secret("hooks") == old  # nothing changed

    rotated = h.call("POST", rotate, json={"overlap_s": 60}).get_json()
    new = rotated["webhook_secret"]
    assert new != old and rotated["previous_secret_signs_until"] == t0 + 60_000
    h.create("during", target_ring_at=t0 + 1_000)
    h.create("after", target_ring_at=t0 + 60_000)
    h.ring_at(t0 + 1_000)
    [during] = receiver.wait_for(1)
    assert len(during.headers["webhook-signature"].split(" ")) == 2
    for secret in (old, new):
        assert verify_webhook(secret, during.headers, during.body).business_id == "during"

    h.ring_at(t0 + 60_000)
    after = receiver.wait_for(2)[1]
    assert len(after.headers["webhook-signature"].split(" ")) == 1
    assert verify_webhook(new, after.headers, after.body).business_id == "after"
    with pytest.raises(WebhookVerificationError):
        verify_webhook(old, after.headers, after.body)
    read = h.call("GET", rotate).get_json()
    assert (read["webhook_secret"], read["previous_secret_signs_until"]) == (new, None)

    at_once = h.call("POST", rotate, json={"overlap_s": 0}).get_json()
    assert at_once["previous_secret_signs_until"] is None
    h.create("then", target_ring_at=t0 + 61_000)
    h.ring_at(t0 + 61_000)
    then = receiver.wait_for(3)[2]
    assert len(then.headers["webhook-signature"].split(" ")) == 1
    assert verify_webhook(at_once["webhook_secret"], then.headers, then.body)


def test_the_calls_are_as_the_openapi_document_describes(harness: Harness, receiver: Receiver):
    """Each call's headers and body validate against the document's webhook: a plain alarm,
    and a count-triggered one signed with two secrets during a rotation's overlap."""
    h = harness
    t0 = h.clock.now_ms()
    h.configure("hooks", channel="webhook", webhook_url=receiver.url())
    h.call("POST", "/v1/applications/hooks/webhook-secret", json={"overlap_s": 60})
    h.create("plain", target_ring_at=t0 + 1_000)
    h.create("counted", target_ring_at=t0 + 1_000, ring_after_count=5)
    h.ring_at(t0 + 1_000)
    calls = receiver.wait_for(2)
    document = h.call("GET", "/openapi.json", None).get_json()
    check = OpenApiChecker(document)
    hook = ("webhooks", "alarm", "post")
    parameters = document["webhooks"]["alarm"]["post"]["parameters"]
    for call in calls:
        for index, parameter in enumerate(parameters):
            assert parameter["in"] == "header" and parameter["required"]
            check.validate(
                call.headers[parameter["name"]], *hook, "parameters", str(index), "schema"
            )
        check.validate(orjson.loads(call.body), *hook, "requestBody", "content", "application/json",
                       "schema")  # fmt: skip
    assert {len(call.headers["webhook-signature"].split(" ")) for call in calls} == {2}
    assert {orjson.loads(call.body).get("trigger") for call in calls} == {None, "time"}


def test_private_targets_are_refused_unless_the_server_allows_them(
    store: AlarmStore, fake_clock: SettableClock
):
    settings = Settings(tokens=TOKENS)  # CLOCK_WEBHOOK_ALLOW_PRIVATE off, the default
    tokens = load_tokens(settings.tokens, "")
    services = build_services(settings, store, fake_clock, Metrics(), tokens=tokens)
    client = create_app(services).test_client()
    for url in ("http://127.0.0.1:8080/x", "http://10.0.0.7/x", "http://169.254.169.254/x"):
        refused = client.put(
            "/v1/applications/hooks",
            json={"channel": "webhook", "webhook_url": url},
            headers={"Authorization": f"Bearer {ADMIN}"},
        )
        assert refused.status_code == 400, url
        assert refused.get_json()["error"]["field"] == "webhook_url"


# --- ringing -------------------------------------------------------------------------------


def test_an_alarm_is_posted_at_its_time_signed_and_rung_on_a_2xx(
    harness: Harness, receiver: Receiver
):
    h = harness
    t0 = h.clock.now_ms()
    h.configure("hooks", channel="webhook", webhook_url=receiver.url())
    created = h.create("order-1", target_ring_at=t0 + 5_000)
    h.ring_at(t0 + 4_900)  # past the lock-ahead lead
    assert receiver.received == []  # never early
    assert h.alarm("order-1")["status"] == "pending"
    h.ring_at(t0 + 5_000)
    [call] = receiver.wait_for(1)
    assert call.webhook_id == str(created["id"]) and call.attempt == 1
    assert call.headers["content-type"] == "application/json"
    secret = h.secret("hooks")
    body = standardwebhooks.Webhook(secret).verify(call.body, call.headers)
    message = verify(secret, call.headers, call.body)
    assert message == AlarmMessage.from_body(body, message_id=call.webhook_id, redelivered=False)
    assert message.business_id == "order-1" and message.published_at == t0 + 5_000
    alarm = h.alarm("order-1")
    assert (alarm["status"], alarm["rung_at"]) == ("rung", t0 + 5_000)
    assert h.publisher.published == []  # not on RabbitMQ
    tampered = call.body.replace(b"order-1", b"order-2")
    with pytest.raises(Exception, match="signature"):
        verify(secret, call.headers, tampered)


def test_a_500_is_retried_with_backoff_and_the_same_webhook_id(harness: Harness):
    h = harness
    t0 = h.clock.now_ms()
    with receiving(scripted(Answer(500), Answer(502), Answer(204))) as receiver:
        h.configure("hooks", channel="webhook", webhook_url=receiver.url())
        h.create("order-2", target_ring_at=t0 + 1_000)
        h.ring_at(t0 + 1_000)
        receiver.wait_for(1)
        after_first = h.alarm("order-2")
        assert (after_first["status"], after_first["retry_times"]) == ("pending", 1)
        # Equal jitter: the first retry waits between half and all of the 1 s base.
        assert t0 + 1_500 <= after_first["next_try_time"] <= t0 + 2_000
        h.ring_at(after_first["next_try_time"])
        receiver.wait_for(2)
        h.ring_at(h.alarm("order-2")["next_try_time"])
        calls = receiver.wait_for(3)
    assert [c.attempt for c in calls] == [1, 2, 3]
    assert len({c.webhook_id for c in calls}) == 1
    assert [orjson.loads(c.body)["attempt"] for c in calls] == [1, 2, 3]
    assert h.alarm("order-2")["status"] == "rung"
    events = AlarmHistory(h.store).events("hooks", "order-2")
    failed = [e.detail["error"] for e in events if e.kind == "attempt_failed"]
    assert failed == ["HTTP 500", "HTTP 502"]
    # The per-minute statistics: two failed attempts and one ring, counted when answered
    # (the ring batches' hand-offs count nothing), with the lateness of the ring.
    counted = [one for (_, app), one in h.metrics.minutes.take().items() if app == "hooks"]
    assert [sum(getattr(one, name) for one in counted) for name in ("rung", "failed")] == [1, 2]
    assert sum(sum(one.lateness) for one in counted) == 1
    # /metrics: one ring's lateness; the failed calls are webhook calls, not broker refusals.
    assert _lateness_counts(h.metrics) == {"webhook": 1}
    assert metric_value(h.metrics, "clock_publish_failures_total") == 0
    outcomes = {"2xx": 1, "5xx": 2}
    for outcome, count in outcomes.items():
        calls = {"application": "hooks", "outcome": outcome}
        assert metric_value(h.metrics, "clock_webhook_calls_total", calls) == count


def test_lateness_runs_to_the_start_of_the_call_not_to_its_answer(harness: Harness):
    """A receiver that takes 5 s to answer 2xx is not the engine being late: the lateness
    (per-minute statistics and /metrics alike) ends when the delivering call starts."""
    h = harness
    t0 = h.clock.now_ms()
    with receiving(lambda _r: Answer(204, sleep_s=30.0)) as receiver:
        h.configure("hooks", channel="webhook", webhook_url=receiver.url(), webhook_timeout_s=60)
        h.create("slow-answer", target_ring_at=t0 + 1_000)
        h.clock.set(t0 + 1_000)
        h.engine.preloader.run_once()
        settle(h.engine, h.clock)
        receiver.wait_for(1)
        h.clock.set(t0 + 6_000)  # the receiver is still thinking
        receiver.release()
        h.wait_for_calls()
    assert h.alarm("slow-answer")["status"] == "rung"
    counted = [one for (_, app), one in h.metrics.minutes.take().items() if app == "hooks"]
    rung = [(one.rung, one.lateness_sum_ms) for one in counted if one.rung]
    assert rung == [(1, 0)]
    assert _lateness_counts(h.metrics) == {"webhook": 1}
    assert _lateness_sums(h.metrics)["webhook"] == 0.0


def test_a_wait_for_a_free_call_behind_a_slow_receiver_is_not_the_engine_s_lateness(
    harness: Harness,
):
    """With its one call in flight held by a slow receiver, an application's next alarm due
    waits for that call to end: that wait is the receiver's, in
    clock_webhook_slot_wait_seconds, not the engine's lateness."""
    h = harness
    t0 = h.clock.now_ms()

    def first_slow(received: Received) -> Answer:
        return Answer(200, sleep_s=30.0 if b'"first"' in received.body else 0.0)

    with receiving(first_slow) as receiver:
        h.configure("hooks", channel="webhook", webhook_url=receiver.url(),
                    webhook_max_in_flight=1, webhook_timeout_s=60)  # fmt: skip
        h.create("first", target_ring_at=t0 + 1_000)
        h.create("second", target_ring_at=t0 + 1_000)
        h.clock.set(t0 + 1_000)
        h.engine.preloader.run_once()
        settle(h.engine, h.clock)
        receiver.wait_for(1)  # the first call holds the application's one call
        h.clock.set(t0 + 4_000)  # the second waited 3 s for it
        receiver.release()
        receiver.wait_for(2)
        h.wait_for_calls()
    assert {h.alarm(key)["status"] for key in ("first", "second")} == {"rung"}
    assert _lateness_counts(h.metrics) == {"webhook": 2}
    assert _lateness_sums(h.metrics)["webhook"] == 0.0
    waited = {"application": "hooks"}
    assert metric_value(h.metrics, "clock_webhook_slot_wait_seconds_count", waited) == 1
    assert metric_value(h.metrics, "clock_webhook_slot_wait_seconds_sum", waited) == 3.0
    counted = [one for (_, app), one in h.metrics.minutes.take().items() if app == "hooks"]
    assert sum(one.lateness_sum_ms for one in counted) == 0


def test_a_delivery_rate_s_delay_is_not_the_engine_s_lateness(harness: Harness):
    """Held back by its application's rate, a call's lateness counts from when the rate let
    it go; the hold is counted apart, as the throttle delay."""
    h = harness
    t0 = h.clock.now_ms()
    with receiving() as receiver:
        h.configure(
            "hooks",
            channel="webhook",
            webhook_url=receiver.url(),
            ring_rate_per_s=1,
            ring_burst=1,
        )
        for key in ("r1", "r2", "r3"):
            h.create(key, target_ring_at=t0 + 1_000)
        for step in range(3):
            h.ring_at(t0 + 1_000 * (step + 1))
            receiver.wait_for(step + 1)
        h.wait_for_calls()
    assert {h.alarm(key)["status"] for key in ("r1", "r2", "r3")} == {"rung"}
    assert _lateness_counts(h.metrics) == {"webhook": 3}
    assert _lateness_sums(h.metrics)["webhook"] == 0.0
    held_s = metric_value(h.metrics, "clock_ring_throttle_delay_seconds_sum")
    assert held_s == pytest.approx(1.0 + 2.0)
    counted = [one for (_, app), one in h.metrics.minutes.take().items() if app == "hooks"]
    assert sum(one.rung for one in counted) == 3
    assert sum(one.lateness_sum_ms for one in counted) == 0


def _lateness_counts(metrics: Metrics) -> dict[str, float]:
    counts = _lateness_by_channel(metrics, "clock_ring_lateness_seconds_count")
    return {channel: count for channel, count in counts.items() if count}


def _lateness_sums(metrics: Metrics) -> dict[str, float]:
    return _lateness_by_channel(metrics, "clock_ring_lateness_seconds_sum")


def _lateness_by_channel(metrics: Metrics, name: str) -> dict[str, float]:
    """`name`'s samples summed by channel over every application label."""
    found: dict[str, float] = {}
    for family in metrics.registry.collect():
        for sample in family.samples:
            if sample.name == name:
                channel = sample.labels["channel"]
                found[channel] = found.get(channel, 0.0) + sample.value
    return found


def test_a_redriven_alarm_is_a_delivery_of_its_own_webhook_id(store: AlarmStore, fake_clock):
    fake_clock.set(real_now_ms())
    h = Harness(store, fake_clock, retry_max=0)
    t0 = h.clock.now_ms()
    try:
        with receiving(scripted(Answer(500), Answer(204))) as receiver:
            h.configure("hooks", channel="webhook", webhook_url=receiver.url())
            h.create("order-9", target_ring_at=t0 + 1_000)
            h.ring_at(t0 + 1_000)
            receiver.wait_for(1)
            assert h.alarm("order-9")["status"] == "dead"
            assert h.call("POST", "/v1/alarms/hooks/order-9/redrive").status_code == 200
            h.ring_at(h.alarm("order-9")["next_try_time"])
            calls = receiver.wait_for(2)
    finally:
        h.close()
    alarm_id = h.alarm("order-9")["id"]
    assert [c.webhook_id for c in calls] == [str(alarm_id), f"{alarm_id}-r1"]
    assert h.alarm("order-9")["status"] == "rung"


def test_retry_after_of_a_503_is_honoured(harness: Harness):
    h = harness
    t0 = h.clock.now_ms()
    busy = Answer(503, (("Retry-After", "30"),))
    with receiving(scripted(busy, Answer(200))) as receiver:
        h.configure("hooks", channel="webhook", webhook_url=receiver.url())
        h.create("order-3", target_ring_at=t0 + 1_000)
        h.ring_at(t0 + 1_000)
        receiver.wait_for(1)
        retry_at = h.alarm("order-3")["next_try_time"]
        assert retry_at >= t0 + 1_000 + 30_000  # not the 1 s backoff
        h.ring_at(retry_at - 100)
        assert len(receiver.received) == 1
        h.ring_at(retry_at)
        receiver.wait_for(2)
    assert h.alarm("order-3")["status"] == "rung"


def test_a_timeout_is_a_failed_attempt_and_the_last_one_makes_it_dead(
    store: AlarmStore, fake_clock: SettableClock
):
    fake_clock.set(real_now_ms())
    h = Harness(store, fake_clock, retry_max=1)
    t0 = h.clock.now_ms()
    try:
        with receiving(scripted(Answer(200, sleep_s=1.0), Answer(500))) as receiver:
            h.configure(
                "hooks", channel="webhook", webhook_url=receiver.url(), webhook_timeout_s=0.2
            )
            h.create("order-4", target_ring_at=t0 + 1_000)
            h.ring_at(t0 + 1_000)
            h.ring_at(h.alarm("order-4")["next_try_time"])
            receiver.wait_for(2)
    finally:
        h.close()
    alarm = h.alarm("order-4")
    assert (alarm["status"], alarm["retry_times"]) == ("dead", 1)
    events = AlarmHistory(h.store).events("hooks", "order-4")
    errors = [(e.kind, e.detail.get("error")) for e in events if e.kind != "created"]
    assert errors[0][0] == "attempt_failed" and "timed out" in errors[0][1]
    assert errors[1:] == [("attempt_failed", "HTTP 500"), ("dead", "HTTP 500")]


OK_HEAD = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"


def trickled_first(wire: Wire, n: int) -> None:
    """The first answer's status line a byte every 0.1 s (3.8 s in all); the others at once."""
    wire.trickle(OK_HEAD, 0.1) if n == 0 else wire.send(OK_HEAD)


def test_a_trickled_answer_fails_at_its_deadline_and_is_retried_then_rung_once(
    harness: Harness,
):
    h = harness
    t0 = h.clock.now_ms()
    with raw_receiving(trickled_first) as receiver:
        h.configure("hooks", channel="webhook", webhook_url=receiver.url(), webhook_timeout_s=1)
        h.create("order-10", target_ring_at=t0 + 1_000)
        started = time.monotonic()
        h.ring_at(t0 + 1_000)
        assert time.monotonic() - started < 1.1 + 0.5  # the call, then recording it
        after_first = h.alarm("order-10")
        assert (after_first["status"], after_first["retry_times"]) == ("pending", 1)
        assert t0 + 1_500 <= after_first["next_try_time"] <= t0 + 2_000  # the 1 s backoff
        h.ring_at(after_first["next_try_time"] - 1)
        assert len(receiver.arrivals) == 1  # not before its backoff
        h.ring_at(after_first["next_try_time"])
        assert len(receiver.arrivals) == 2
    alarm = h.alarm("order-10")
    assert (alarm["status"], alarm["retry_times"]) == ("rung", 1)
    assert alarm["rung_at"] == after_first["next_try_time"]
    events = AlarmHistory(h.store).events("hooks", "order-10")
    assert [(e.kind, e.detail.get("error")) for e in events if e.kind != "created"] == [
        ("attempt_failed", "timed out after 1 s (reading status and headers)"),
        ("rung", None),
    ]


def test_a_slow_endpoint_frees_its_only_slot_at_the_deadline(harness: Harness):
    """With one call in flight at a time, the second alarm's call starts as soon as the
    first one's deadline passes, not when its trickling answer would have ended."""
    h = harness
    t0 = h.clock.now_ms()
    with raw_receiving(trickled_first) as receiver:
        h.configure(
            "hooks",
            channel="webhook",
            webhook_url=receiver.url(),
            webhook_timeout_s=1,
            webhook_max_in_flight=1,
        )
        h.create("order-11", target_ring_at=t0 + 1_000)
        h.create("order-12", target_ring_at=t0 + 1_000)
        h.ring_at(t0 + 1_000)
        first, second = receiver.arrivals
    assert second - first < 1.1
    statuses = sorted(h.alarm(key)["status"] for key in ("order-11", "order-12"))
    assert statuses == ["pending", "rung"]


def test_past_its_cutoff_a_retry_is_expired_and_never_sent(harness: Harness):
    h = harness
    t0 = h.clock.now_ms()
    with receiving(scripted(Answer(500))) as receiver:
        h.configure("hooks", channel="webhook", webhook_url=receiver.url())
        h.create("order-5", target_ring_at=t0 + 1_000, latest_ring_at=t0 + 1_200)
        h.ring_at(t0 + 1_000)
        receiver.wait_for(1)
        h.ring_at(h.alarm("order-5")["next_try_time"])  # at least 500 ms later: past 1_200
        assert len(receiver.received) == 1
    assert h.alarm("order-5")["status"] == "expired"


def test_a_cancel_while_delivering_is_409_and_during_a_backoff_is_taken(harness: Harness):
    h = harness
    t0 = h.clock.now_ms()
    hanging = Answer(500, sleep_s=3.0)
    with receiving(scripted(hanging)) as receiver:
        h.configure("hooks", channel="webhook", webhook_url=receiver.url())
        h.create("order-6", target_ring_at=t0 + 1_000)
        h.clock.set(t0 + 1_000)
        h.engine.preloader.run_once()
        settle(h.engine, h.clock)
        receiver.wait_for(1)
        alarm = h.alarm("order-6")
        assert alarm["status"] == "delivering"
        refused = h.call("DELETE", "/v1/alarms/hooks/order-6")
        assert refused.status_code == 409 and "delivering" in refused.get_json()["error"]["message"]
        receiver.release()
        h.wait_for_calls()
    assert h.alarm("order-6")["status"] == "pending"  # the 500: backing off
    assert h.call("DELETE", "/v1/alarms/hooks/order-6").status_code == 200
    h.ring_at(t0 + 60_000)
    assert len(receiver.received) == 1


def test_a_slow_endpoint_never_holds_back_another_application(harness: Harness):
    """`slow` does not answer until the test ends, and its calls pile up to its bound; `fast`
    rings 500 alarms due over the same moments, each received while slow's calls still
    hang, and each published at its due time on the engine's clock."""
    h = harness
    t0 = h.clock.now_ms()
    moments = [t0 + 1_000 + 100 * step for step in range(10)]  # beyond the lock-ahead lead
    with receiving(lambda _r: Answer(200, sleep_s=60.0)) as slow_end, receiving() as fast_end:
        h.configure("slow", channel="webhook", webhook_url=slow_end.url(), webhook_max_in_flight=2)
        h.configure("fast", channel="webhook", webhook_url=fast_end.url())
        for at_ms in moments:
            for n in range(5):
                h.create(f"s-{at_ms}-{n}", application="slow", target_ring_at=at_ms)
            for n in range(50):
                h.create(f"f-{at_ms}-{n}", application="fast", target_ring_at=at_ms)
        h.engine.preloader.run_once()
        for step, at_ms in enumerate(moments, start=1):
            h.clock.set(at_ms)
            settle(h.engine, h.clock)
            fast_end.wait_for(50 * step)
        fast = [orjson.loads(c.body) for c in fast_end.received]
        assert sorted(m["published_at"] - m["target_ring_at"] for m in fast) == [0] * 500
        assert len(slow_end.received) == 2  # its bound on calls in flight: the rest wait
        slow_end.release()
        h.wait_for_calls()
    statuses = h.call("GET", "/v1/alarms?application=fast&limit=1000").get_json()["alarms"]
    assert [a["status"] for a in statuses] == ["rung"] * 500


def test_the_sdk_configures_the_channel_and_reads_and_rotates_the_secret(
    harness: Harness, receiver: Receiver
):
    h = harness
    t0 = h.clock.now_ms()
    with contextmanager(serve_wsgi)(h.app) as url, ClockClient(url, ADMIN) as client:
        configured = client.configure("hooks", channel="webhook", webhook_url=receiver.url())
        assert (configured.channel, configured.webhook_url) == ("webhook", receiver.url())
        assert configured.webhook_secret_set and configured.settings["channel"] == "webhook"
        first = client.webhook_secret("hooks")
        rotated = client.webhook_secret("hooks", rotate=True, overlap_s=0)
        assert first and rotated and first != rotated == client.webhook_secret("hooks")
        with pytest.raises(ClientValidationError) as refused:
            client.configure("hooks", channel="carrier-pigeon")
        assert refused.value.field == "channel"
    h.create("order-8", target_ring_at=t0 + 1_000)
    h.ring_at(t0 + 1_000)
    [call] = receiver.wait_for(1)
    assert verify_webhook(rotated, call.headers, call.body).business_id == "order-8"
    with pytest.raises(WebhookVerificationError):  # rotated with no overlap: it stopped at once
        verify_webhook(first, call.headers, call.body)


def test_calls_never_started_are_given_back_pending_and_due_now(store: AlarmStore):
    claims = SqlClaimStore(store)
    now = 1_700_000_000_000
    for key in ("a", "b"):
        store.create(NewAlarm("hooks", key, "p", now, None), now - 1_000)
    taken = claims.load_due(now, 10)
    with claims.ring_transaction() as tx:
        tx.lock_live(taken)
        tx.hand_off([(c.id, now + 15_000) for c in taken], now, keep_claim=True)
    handed = [c._replace(version=c.version + 1) for c in taken]
    stale = handed[1]._replace(version=handed[1].version - 1)
    assert claims.give_back_deliveries([handed[0], stale], now + 20) == 1
    a, b = store.get("hooks", "a"), store.get("hooks", "b")
    assert (a.status, a.next_try_time) == ("pending", now + 20)
    assert (b.status, b.next_try_time) == ("delivering", now + 15_000)
    assert claims.load_due(now + 20, 10) == [
        Claim(now + 20, a.id, handed[0].version + 1, "hooks", slot_of("hooks", "a"))
    ]


class _BrokenSender:
    """A sender with a bug: every send raises."""

    def send(self, request: Any) -> Any:
        raise RuntimeError("bug in the sender")

    def close(self) -> None:
        pass


def test_a_sender_that_raises_makes_a_failed_attempt_not_a_stuck_alarm(
    harness: Harness, receiver: Receiver
):
    h = harness
    t0 = h.clock.now_ms()
    h.engine.webhooks.sender = _BrokenSender()  # type: ignore[union-attr]
    h.configure("hooks", channel="webhook", webhook_url=receiver.url())
    h.create("order-9", target_ring_at=t0 + 1_000)
    h.ring_at(t0 + 1_000)
    alarm = h.alarm("order-9")
    assert (alarm["status"], alarm["retry_times"]) == ("pending", 1)
    [failed] = [e for e in AlarmHistory(h.store).events("hooks", "order-9") if e.kind != "created"]
    assert failed.kind == "attempt_failed" and "bug in the sender" in failed.detail["error"]
