"""What an on-call engineer reads on /metrics, exactly, after a known sequence of events on a
real server with two web processes: lateness by application and channel (an unregistered
application as `other`; a webhook's for its 2xx call alone), webhook calls by outcome and
their durations, pull messages waiting, each process's CPU and memory, and no loop errors;
from whichever process answers."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pika
import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import delete

from clock_server.metrics import LOOPS, OTHER
from clock_server.store.db import open_database
from clock_server.store.schema import application_table
from tests.support import AMQP_URL, Cluster, eventually, free_port, unique
from tests.webhook_receiver import Answer, Received, Receiver

Labels = frozenset[tuple[str, str]]

# What the receiver answers, by the alarm's payload; a call times out after 0.5 s.
ANSWERS = {"ok": Answer(200), "missing": Answer(404), "broken": Answer(500)}
SLOW = Answer(200, sleep_s=3.0)


def samples(text: str) -> dict[tuple[str, Labels], float]:
    """(sample name, its labels) -> value, for clock's samples."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("clock_")
    }


def value(found: dict[tuple[str, Labels], float], name: str, **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    def answer(received: Received) -> Answer:
        return ANSWERS.get(json.loads(received.body)["payload"], SLOW)

    server = Receiver(answer).start()
    try:
        yield server
    finally:
        server.stop()


def put(base_url: str, application: str, **settings: Any) -> None:
    answer = requests.put(f"{base_url}/v1/applications/{application}", json=settings, timeout=5)
    assert answer.status_code in (200, 201), answer.text


def create(base_url: str, application: str, payloads: list[str], due_ms: int) -> None:
    for i, payload in enumerate(payloads):  # each on a connection of its own: both processes
        alarm = {"application": application, "business_id": f"k{i}", "payload": payload}
        answer = requests.post(
            base_url + "/v1/alarms", json={**alarm, "target_ring_at": due_ms}, timeout=5
        )
        assert answer.status_code == 201, answer.text


@pytest.mark.process
@pytest.mark.mariadb
@pytest.mark.rabbitmq
def test_two_web_processes_show_each_application_and_channel_exactly(
    cluster: Cluster, receiver: Receiver
) -> None:
    server = cluster.server(
        "metrics",
        CLOCK_WEB_PROCESSES="2",
        CLOCK_RETRY_MAX="0",
        CLOCK_APPLICATION_REFRESH_S="0.1",
        CLOCK_WEBHOOK_ALLOW_PRIVATE="true",
    ).start()
    base = server.base_url
    amqp_app, stranger = cluster.application, unique("stranger")
    hooks, gone, pulls = unique("hooks"), unique("gone"), unique("pulls")
    put(base, amqp_app)
    put(base, hooks, channel="webhook", webhook_url=receiver.url(), webhook_timeout_s=0.5)
    put(base, gone, channel="webhook", webhook_url=f"http://127.0.0.1:{free_port()}/hook")
    put(base, pulls, channel="pull")
    # Due well after the engine's copy of the registry is read again (every 0.1 s).
    due = int(time.time() * 1000) + 1_500
    create(base, amqp_app, ["a"] * 4, due)
    create(base, stranger, ["s"] * 3, due)
    _unregister(cluster.database_url, stranger)  # alarms of an application no longer listed
    create(base, hooks, ["ok", "missing", "broken", "slow"], due)
    create(base, gone, ["g"], due)
    create(base, pulls, ["p"] * 2, due)
    try:
        cluster.collector.wait_for(4, 10)
        finished = {"rung", "dead"}
        cluster.wait_rows(
            lambda row: row.status in ({"delivering"} if row.application == pulls else finished),
            15,
        )

        def scraped() -> dict[tuple[str, Labels], float]:
            found = samples(requests.get(base + "/metrics", timeout=5).text)
            assert value(found, "clock_pull_messages_waiting", application=pulls) == 2
            return found

        texts = [eventually(scraped, 10, 0.1) for _ in range(6)]
        # A web process shows its own CPU and memory once it has answered a scrape: scrape
        # until both have (the kernel spreads the connections, not in turn).
        texts.append(eventually(lambda: _both_web_processes(scraped()), 10, 0.05))
    finally:
        receiver.release()
        _delete_queue(f"clock.{stranger}")
    lateness = "clock_ring_lateness_seconds_count"
    calls = "clock_webhook_calls_total"
    for found in texts:  # whichever process answered, the totals of all
        assert {
            (dict(labels)["application"], dict(labels)["channel"]): count
            for (name, labels), count in found.items()
            if name == lateness
        } == {
            (amqp_app, "amqp"): 4,
            (OTHER, "amqp"): 3,
            (hooks, "webhook"): 1,  # the one call answered 2xx: failed calls are not rings
            (pulls, "pull"): 2,
        }
        assert {
            (dict(labels)["application"], dict(labels)["outcome"]): count
            for (name, labels), count in found.items()
            if name == calls
        } == {
            (hooks, "2xx"): 1,
            (hooks, "4xx"): 1,
            (hooks, "5xx"): 1,
            (hooks, "timeout"): 1,
            (gone, "refused"): 1,
        }
        assert value(found, "clock_webhook_call_seconds_count", application=hooks) == 4
        assert value(found, "clock_webhook_call_seconds_count", application=gone) == 1
        assert value(found, "clock_pull_messages_waiting", application=pulls) == 2
        assert value(found, "clock_pull_oldest_waiting_seconds", application=pulls) > 0
        assert value(found, "clock_alarms_rung_total", application=amqp_app) == 4
        assert value(found, "clock_alarms_dead_total", application=hooks) == 3
        # The broker refused nothing: failed webhook calls are counted as calls only.
        assert value(found, "clock_publish_failures_total") == 0
        assert {
            dict(labels)["loop"]: count
            for (name, labels), count in found.items()
            if name == "clock_loop_errors_total"
        } == dict.fromkeys(LOOPS, 0)
    [last] = texts[-1:]
    for name in ("clock_process_resident_memory_bytes", "clock_process_cpu_seconds_total"):
        shown = {(dict(labels)["kind"], dict(labels)["pid"]): v
                 for (metric, labels), v in last.items() if metric == name}  # fmt: skip
        assert sorted(kind for kind, _pid in shown) == ["supervisor", "web", "web"]
        assert all(v > 0 for v in shown.values())


def _both_web_processes(found: dict[tuple[str, Labels], float]) -> dict[tuple[str, Labels], float]:
    """`found`, which shows the memory of two web processes."""
    pids = {
        dict(labels)["pid"]
        for (name, labels) in found
        if name == "clock_process_resident_memory_bytes" and ("kind", "web") in labels
    }
    assert len(pids) == 2, f"web processes seen: {len(pids)}"
    return found


def _unregister(database_url: str, application: str) -> None:
    db = open_database(database_url, pool_size=1)
    try:
        with db.begin() as conn:
            table = application_table
            assert conn.execute(delete(table).where(table.c.name == application)).rowcount == 1
    finally:
        db.dispose()


def _delete_queue(queue: str) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    try:
        connection.channel().queue_delete(queue)
    finally:
        connection.close()
