"""The lateness histogram takes a ring batch at once and counts it as per-alarm observes would;
/metrics after a known sequence of events shows exact values per application, with one process
and with two web processes."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pika
import pytest
import requests
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import delete

from clock_server.api import create_app
from clock_server.broker.amqp_publisher import AmqpPublisher
from clock_server.metrics import Metrics
from clock_server.runtime.build_api import build_services
from clock_server.runtime.build_engine import build_engine
from clock_server.settings import Settings
from clock_server.store.alarms import AlarmStore
from clock_server.store.schema import dead_letter_table, job_lease_table
from clock_server.testing import InMemoryDeadLetterPublisher, SettableClock
from tests.support import AMQP_URL, Cluster, metric_value, settle, unique

_LATENESS_S = st.lists(st.integers(min_value=0, max_value=120_000).map(lambda ms: ms / 1000))


def _histogram_lines(metrics: Metrics) -> list[str]:
    text = generate_latest(metrics.registry).decode()
    return [line for line in text.splitlines() if line.startswith("clock_ring_lateness_seconds_")]


@given(_LATENESS_S)
def test_a_batch_counts_like_one_observe_per_alarm(values: list[float]) -> None:
    batched, one_by_one = Metrics(), Metrics()
    batched.observe_lateness(("a", "amqp", value) for value in values)
    for value in values:
        one_by_one.lateness.labels("a", "amqp").observe(value)
    lines = _histogram_lines(batched)
    assert [line for line in lines if "_created" not in line] == [
        line for line in _histogram_lines(one_by_one) if "_created" not in line
    ]


def test_values_on_a_bucket_bound_count_in_that_bucket() -> None:
    metrics = Metrics()
    metrics.observe_lateness(("a", "pull", v) for v in [0.001, 0.001, 0.0011, 60.0, 61.0])
    lines = _histogram_lines(metrics)
    on = 'application="a",channel="pull"'
    assert f'clock_ring_lateness_seconds_bucket{{{on},le="0.001"}} 2.0' in lines
    assert f'clock_ring_lateness_seconds_bucket{{{on},le="0.002"}} 3.0' in lines
    assert f'clock_ring_lateness_seconds_bucket{{{on},le="60.0"}} 4.0' in lines
    assert f'clock_ring_lateness_seconds_bucket{{{on},le="+Inf"}} 5.0' in lines
    assert f"clock_ring_lateness_seconds_count{{{on}}} 5.0" in lines


def test_each_application_and_channel_is_a_series_of_its_own_and_strangers_share_one() -> None:
    metrics = Metrics()
    metrics.use_registry({"a", "b"}.__contains__)
    metrics.observe_lateness(
        [("a", "amqp", 0.1), ("a", "webhook", 0.2), ("b", "amqp", 0.3), ("x", "amqp", 0.4),
         ("y", "amqp", 0.5), ("a", "amqp", 0.6)]
    )  # fmt: skip
    count = "clock_ring_lateness_seconds_count"
    assert {
        (application, channel): metric_value(
            metrics, count, {"application": application, "channel": channel}
        )
        for application, channel in [("a", "amqp"), ("a", "webhook"), ("b", "amqp"),
                                     ("other", "amqp"), ("x", "amqp")]
    } == {("a", "amqp"): 2, ("a", "webhook"): 1, ("b", "amqp"): 1, ("other", "amqp"): 2,
          ("x", "amqp"): 0}  # fmt: skip


# --- /metrics after a known sequence of events -------------------------------------------------


def scrape(text: str) -> dict[tuple[str, str], float]:
    """(sample name, application label or "") -> value, for clock's samples."""
    return {
        (sample.name, sample.labels.get("application", "")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("clock_")
        and set(sample.labels) <= {"application", "le"}
        and "le" not in sample.labels
    }


COUNTERS = (
    "clock_alarms_created_total",
    "clock_alarms_cancelled_total",
    "clock_alarms_rung_total",
    "clock_alarms_expired_total",
    "clock_alarms_dead_total",
    "clock_alarms_redriven_total",
    "clock_dead_letters_published_total",
    "clock_pending_alarms",
)


def by_application(values: dict[tuple[str, str], float]) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for (name, application), value in values.items():
        if name in COUNTERS and value:
            out.setdefault(name, {})[application] = value
    return out


@pytest.fixture
def routed_exchange() -> Iterator[str]:
    """An exchange where applications a and b have a queue and c has none (unroutable)."""
    exchange = unique("clock_test_")
    connection = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    channel = connection.channel()
    channel.exchange_declare(exchange, "direct", durable=True)
    queues = []
    for application in ("a", "b"):
        queue = unique(f"metrics_{application}_")
        channel.queue_declare(queue, exclusive=True)
        channel.queue_bind(queue, exchange, routing_key=application)
        queues.append(queue)
    try:
        yield exchange
    finally:
        for queue in queues:
            channel.queue_delete(queue)
        channel.exchange_delete(exchange)
        connection.close()


@pytest.mark.rabbitmq
def test_metrics_after_a_known_sequence_count_each_application_exactly(
    store: AlarmStore, fake_clock: SettableClock, routed_exchange: str
) -> None:
    metrics = Metrics()
    with store.db.begin() as conn:
        conn.execute(delete(dead_letter_table))
        conn.execute(delete(job_lease_table))
    client = create_app(build_services(Settings(), store, fake_clock, metrics)).test_client()
    ring = AmqpPublisher(
        AMQP_URL,
        exchange=routed_exchange,
        declare_queues=False,
        observe_confirm=metrics.confirm_latency.observe,
    )
    ring.start()
    settings = Settings(retry_max=0, instance_id="metrics")
    engine = build_engine(
        settings,
        store,
        ring,
        fake_clock,
        metrics,
        dead_letter_publisher=InMemoryDeadLetterPublisher(),
    )
    relay = engine.dead_letters
    assert relay is not None
    try:
        assert ring.wait_healthy(10)
        due = fake_clock.now_ms() + 1_000

        def create(application: str, key: str, **extra: int) -> int:
            alarm = {"application": application, "business_id": key, "payload": "p"}
            answer = client.post("/v1/alarms", json={**alarm, "target_ring_at": due, **extra})
            return answer.status_code

        assert [create("a", f"a{i}") for i in range(5)] == [201] * 5
        assert create("a", "later", target_ring_at=due + 3_600_000) == 201
        assert create("a", "a0") == 200  # a repeat creates nothing
        batch = [{"application": "b", "business_id": f"b{i}", "payload": "p"} for i in range(3)]
        batch.append({"application": "b", "business_id": "cut", "payload": "p",
                      "latest_ring_at": due - 1})  # fmt: skip
        batch += [{"application": "c", "business_id": f"c{i}", "payload": "p"} for i in range(2)]
        answer = client.post(
            "/v1/alarms/batch", json={"alarms": [{**i, "target_ring_at": due - 2} for i in batch]}
        )
        assert [r["status"] for r in answer.get_json()["results"]] == [201] * 6
        for application, key in (("a", "a3"), ("a", "a4"), ("b", "b2"), ("a", "a4")):
            assert client.delete(f"/v1/alarms/{application}/{key}").status_code == 200
            fake_clock.advance(1)  # a repeat within the same millisecond would count again
        fake_clock.set(due)
        engine.preloader.run_once()
        settle(engine, fake_clock)
        relay.run_once()
        metrics.count_redriven("c", 1)
        text = client.get("/metrics").get_data(as_text=True)
    finally:
        ring.close(5)
    assert by_application(scrape(text)) == {
        "clock_alarms_created_total": {"a": 6, "b": 4, "c": 2},
        "clock_alarms_cancelled_total": {"a": 2, "b": 1},  # the repeated cancel is not counted
        "clock_alarms_rung_total": {"a": 3, "b": 2},
        "clock_alarms_expired_total": {"b": 1},
        "clock_alarms_dead_total": {"c": 2},
        "clock_alarms_redriven_total": {"c": 1},
        "clock_dead_letters_published_total": {"c": 2},
        "clock_pending_alarms": {"a": 1},
    }
    values = scrape(text)
    rung = "clock_ring_lateness_seconds_count"
    assert metric_value(metrics, rung, {"application": "a", "channel": "amqp"}) == 3
    assert metric_value(metrics, rung, {"application": "b", "channel": "amqp"}) == 2
    assert values[("clock_preload_duration_seconds_count", "")] == 1
    assert values[("clock_publish_confirm_seconds_count", "")] >= 1


@pytest.mark.process
@pytest.mark.mariadb
@pytest.mark.rabbitmq
def test_two_web_processes_report_the_totals_of_both(cluster: Cluster) -> None:
    server = cluster.server("metrics", CLOCK_WEB_PROCESSES="2").start()
    application = cluster.application
    due = int(time.time() * 1000) + 500
    for i in range(12):  # each on a connection of its own: the kernel spreads them
        answer = requests.post(
            server.base_url + "/v1/alarms",
            json={
                "application": application,
                "business_id": f"k{i}",
                "payload": "p",
                "target_ring_at": due + (60_000 if i < 2 else 0),
            },
            timeout=5,
        )
        assert answer.status_code == 201
    for key in ("k0", "k1", "k0"):
        assert requests.delete(f"{server.base_url}/v1/alarms/{application}/{key}", timeout=5).ok
    cluster.collector.wait_for(10, 10)
    cluster.wait_rows(lambda row: row.status != "pending", 5)
    expected = {
        "clock_alarms_created_total": {application: 12},
        "clock_alarms_cancelled_total": {application: 2},
        "clock_alarms_rung_total": {application: 10},
    }
    for _ in range(6):  # whichever process answers, each shows the sum over all of them
        response = requests.get(server.base_url + "/metrics", timeout=5)
        assert by_application(scrape(response.text)) == expected
