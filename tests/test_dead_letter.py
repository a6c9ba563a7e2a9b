"""A dead alarm is published to the dead-letter exchange with its last error, at least once,
even when the broker was down when it died; on SQLite and MariaDB, with the real RabbitMQ."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pika
import pytest
import requests
from sqlalchemy import delete, update

from clock_server.broker.amqp_publisher import AmqpPublisher
from clock_server.broker.dead_letter_publisher import AmqpDeadLetterPublisher
from clock_server.engine.dead_letter_relay import RELAY_LEASE_S, DeadLetterRelay
from clock_server.metrics import Metrics
from clock_server.model import NOT_CONFIRMED, Claim, DeadLetter, NewAlarm
from clock_server.runtime.build import build
from clock_server.runtime.build_engine import build_engine
from clock_server.settings import Settings
from clock_server.store.alarms import AlarmStore
from clock_server.store.claims import SqlClaimStore
from clock_server.store.dead_letters import SqlDeadLetterOutbox
from clock_server.store.purge import SqlJobLease
from clock_server.store.schema import alarm_table, dead_letter_table, job_lease_table
from clock_server.testing import InMemoryDeadLetterPublisher, SettableClock
from tests.support import (
    AMQP_URL,
    Cluster,
    delete_exchange,
    eventually,
    free_port,
    metric_value,
    settle,
    unique,
)

pytestmark = pytest.mark.rabbitmq

APP = {"application": "app"}


@dataclass
class DeadLetterQueue:
    """A queue bound to a fresh dead-letter exchange with `#`, as an operator would bind."""

    exchange: str
    queue: str
    channel: pika.adapters.blocking_connection.BlockingChannel

    def take(self, count: int, timeout_s: float = 5.0) -> list[tuple[pika.BasicProperties, dict]]:
        """`count` messages, in order, or fail; then check that no more is there."""
        got: list[tuple[pika.BasicProperties, dict]] = []

        def all_came() -> bool:
            method, properties, body = self.channel.basic_get(self.queue, auto_ack=True)
            if method is not None:
                got.append((properties, json.loads(body)))
            return len(got) >= count

        eventually(all_came, timeout_s, 0.02, lambda: f"{len(got)} of {count} dead letters came")
        assert self.channel.basic_get(self.queue, auto_ack=True)[0] is None, "one too many"
        return got


@pytest.fixture
def dead_queue() -> Iterator[DeadLetterQueue]:
    exchange, queue = unique("clock_dead_test_"), unique("dead_letters_")
    connection = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    channel = connection.channel()
    channel.exchange_declare(exchange, "topic", durable=True)
    channel.queue_declare(queue, exclusive=True)
    channel.queue_bind(queue, exchange, routing_key="#")
    try:
        yield DeadLetterQueue(exchange, queue, channel)
    finally:
        channel.queue_delete(queue)
        channel.exchange_delete(exchange)
        connection.close()


@pytest.fixture
def db(store: AlarmStore) -> Iterator[AlarmStore]:
    """The store with an empty outbox and no job lease, before and after."""

    def clean() -> None:
        with store.db.begin() as conn:
            conn.execute(delete(dead_letter_table))
            conn.execute(delete(job_lease_table))

    clean()
    yield store
    clean()


def relay(
    store: AlarmStore,
    clock: SettableClock,
    publisher: object,
    metrics: Metrics | None = None,
    owner: str = "server-1",
    batch: int = 500,
) -> DeadLetterRelay:
    return DeadLetterRelay(
        SqlDeadLetterOutbox(store),
        SqlJobLease(store),
        publisher,  # type: ignore[arg-type]
        clock,
        metrics or Metrics(),
        owner=owner,
        publish_timeout_s=5,
        batch=batch,
    )


def die(store: AlarmStore, clock: SettableClock, business_id: str, error: str) -> int:
    """An alarm that dies now, recorded by a ring transaction as the engine records it."""
    alarm, _ = store.create(
        NewAlarm("app", business_id, f"payload of {business_id}", clock.now_ms(), None),
        clock.now_ms(),
    )
    kill(store, clock, alarm.id, error)
    return alarm.id


def kill(store: AlarmStore, clock: SettableClock, alarm_id: int, error: str) -> None:
    claims = SqlClaimStore(store, dead_letters=True)
    now_ms = clock.now_ms()
    (claim,) = [c for c in claims.load_due(now_ms, 100) if c.id == alarm_id]
    with claims.ring_transaction() as tx:
        assert [row.id for row in tx.lock_live([claim])] == [alarm_id]
        tx.mark_dead([alarm_id], now_ms, error)


def test_a_dead_alarm_reaches_a_queue_bound_to_the_dead_letter_exchange_with_its_error(
    db: AlarmStore, fake_clock: SettableClock, dead_queue: DeadLetterQueue, caplog
) -> None:
    """Publishes to an exchange where the application has no queue come back unroutable; after
    its one retry the alarm is dead, logged at ERROR, counted, and published to `clock.dead`."""
    ring_exchange = unique("clock_test_")
    ring_publisher = AmqpPublisher(AMQP_URL, exchange=ring_exchange, declare_queues=False)
    ring_publisher.start()
    metrics = Metrics()
    settings = Settings(
        retry_max=1,
        retry_base_s=1,
        retry_cap_s=1,
        instance_id="e1",
        amqp_url=AMQP_URL,
        dead_letter_exchange=dead_queue.exchange,
    )
    engine = build_engine(settings, db, ring_publisher, fake_clock, metrics)
    dead_letters = engine.dead_letters
    assert dead_letters is not None
    try:
        assert ring_publisher.wait_healthy(10)
        target = fake_clock.now_ms()
        alarm, _ = db.create(NewAlarm("app", "order-7", '{"n": 7}', target, None), target)
        engine.preloader.run_once()
        settle(engine, fake_clock)
        retry = db.get("app", "order-7")
        assert (retry.status, retry.retry_times) == ("pending", 1)
        fake_clock.set(retry.next_try_time)
        with caplog.at_level(logging.ERROR, logger="clock_server.engine.ringer"):
            engine.preloader.run_once()
            settle(engine, fake_clock)
        died_at = fake_clock.now_ms()
        assert db.get("app", "order-7").status == "dead"
        assert engine.dead_letter_waker._event.is_set(), "the ring batch did not wake the relay"
        assert dead_letters.run_once() == dead_letters.interval_s
    finally:
        ring_publisher.close(5)
        delete_exchange(ring_exchange)
    ((properties, body),) = dead_queue.take(1)
    assert body == {
        "id": alarm.id,
        "application": "app",
        "business_id": "order-7",
        "payload": '{"n": 7}',
        "target_ring_at": target,
        "latest_ring_at": None,
        "died_at": died_at,
        "attempts": 2,
        "error": NOT_CONFIRMED,
    }
    assert properties.message_id == str(alarm.id)
    assert properties.delivery_mode == 2 and properties.content_type == "application/json"
    assert properties.headers == {
        "x-clock-error": NOT_CONFIRMED,
        "x-clock-attempts": 2,
        "x-clock-died-at": died_at,
    }
    (record,) = [r for r in caplog.records if getattr(r, "action", None) == "alarm_dead"]
    assert record.levelno == logging.ERROR and str(alarm.id) in record.getMessage()
    assert metric_value(metrics, "clock_alarms_dead_total", APP) == 1
    assert metric_value(metrics, "clock_dead_letters_published_total", APP) == 1
    assert SqlDeadLetterOutbox(db).count() == 0


def test_a_dead_letter_waits_for_the_broker_and_arrives_once_it_is_back(
    db: AlarmStore, fake_clock: SettableClock, dead_queue: DeadLetterQueue
) -> None:
    alarm_id = die(db, fake_clock, "b1", "publisher unavailable: no connection to the broker")
    metrics = Metrics()
    nobody = f"amqp://guest:guest@127.0.0.1:{free_port()}/%2F"
    away = relay(db, fake_clock, AmqpDeadLetterPublisher(nobody, dead_queue.exchange), metrics)
    assert away.run_once() == away.interval_s
    assert SqlDeadLetterOutbox(db).count() == 1
    assert metric_value(metrics, "clock_dead_letters_published_total", APP) == 0
    fake_clock.advance(1_000)
    back = relay(db, fake_clock, AmqpDeadLetterPublisher(AMQP_URL, dead_queue.exchange), metrics)
    back.run_once()
    ((properties, body),) = dead_queue.take(1)
    assert (body["id"], body["error"]) == (
        alarm_id,
        "publisher unavailable: no connection to the broker",
    )
    assert properties.message_id == str(alarm_id)
    assert SqlDeadLetterOutbox(db).count() == 0
    assert metric_value(metrics, "clock_dead_letters_published_total", APP) == 1


def test_a_restart_publishes_what_is_left_once_and_a_redriven_alarm_that_dies_again_twice(
    db: AlarmStore, fake_clock: SettableClock, dead_queue: DeadLetterQueue
) -> None:
    ids = [die(db, fake_clock, f"b{i}", "nacked") for i in range(3)]
    publisher = AmqpDeadLetterPublisher(AMQP_URL, dead_queue.exchange)
    before = relay(db, fake_clock, publisher, batch=2)
    assert before.run_once() == 0.0  # a full batch: more may be left
    assert [body["id"] for _, body in dead_queue.take(2)] == ids[:2]
    # The server stops; another takes the relay over once the lease has lapsed.
    fake_clock.advance(int(RELAY_LEASE_S * 1000) + 1)
    after = relay(db, fake_clock, publisher, owner="server-2", batch=2)
    assert after.run_once() == after.interval_s
    assert [body["id"] for _, body in dead_queue.take(1)] == ids[2:]
    # Re-driven (due again with a fresh budget), it dies again later: a second letter.
    fake_clock.advance(5_000)
    with db.db.begin() as conn:
        conn.execute(
            update(alarm_table)
            .where(alarm_table.c.id == ids[0])
            .values(status="pending", retry_times=0, next_try_time=fake_clock.now_ms())
        )
    kill(db, fake_clock, ids[0], "nacked again")
    after.run_once()
    ((_, body),) = dead_queue.take(1)
    assert (body["id"], body["died_at"], body["error"]) == (
        ids[0],
        fake_clock.now_ms(),
        "nacked again",
    )


def test_only_the_lease_holder_relays_and_only_confirmed_letters_leave_the_outbox(
    db: AlarmStore, fake_clock: SettableClock
) -> None:
    ids = [die(db, fake_clock, f"b{i}", "nacked") for i in range(3)]
    first, second = InMemoryDeadLetterPublisher(), InMemoryDeadLetterPublisher()
    holder = relay(db, fake_clock, first, owner="server-1")
    other = relay(db, fake_clock, second, owner="server-2")
    first.fail_next(1)  # the broker refuses the oldest: nothing after it goes either
    holder.run_once()
    assert other.run_once() == other.interval_s
    assert first.published == [] and second.published == []
    assert SqlDeadLetterOutbox(db).count() == 3
    holder.run_once()
    assert [letter.alarm_id for letter in first.published] == ids
    assert second.published == [] and SqlDeadLetterOutbox(db).count() == 0


def test_the_outbox_keeps_the_alarm_as_it_was_when_it_died(
    db: AlarmStore, fake_clock: SettableClock
) -> None:
    alarm_id = die(db, fake_clock, "kept", "nacked")
    died_at = fake_clock.now_ms()
    with db.db.begin() as conn:  # changed afterwards (a re-drive with a new payload)
        conn.execute(update(alarm_table).values(payload="changed", status="pending"))
    (letter,) = SqlDeadLetterOutbox(db).next_letters(10)
    assert letter._replace(letter_id=0) == DeadLetter(
        0, alarm_id, "app", "kept", "payload of kept", died_at, None, died_at, 1, "nacked"
    )


def test_without_a_dead_letter_exchange_no_letter_is_written_and_no_relay_runs(
    db: AlarmStore, fake_clock: SettableClock, sqlite_url: str
) -> None:
    alarm, _ = db.create(NewAlarm("app", "b", "p", fake_clock.now_ms(), None), fake_clock.now_ms())
    claims = SqlClaimStore(db)
    with claims.ring_transaction() as tx:
        tx.lock_live([Claim(alarm.target_ring_at, alarm.id, 0, "app")])
        tx.mark_dead([alarm.id], fake_clock.now_ms())
    assert SqlDeadLetterOutbox(db).count() == 0
    runtime = build(Settings(database_url=sqlite_url, dead_letter_exchange=""), serve_http=False)
    try:
        assert runtime.engine is not None and runtime.engine.dead_letters is None
        assert runtime.engine.ringer.batches.on_dead is None
    finally:
        runtime.store.close()


@pytest.mark.process
@pytest.mark.mariadb
def test_a_server_publishes_a_dead_letter_within_a_second_or_so_of_the_death(
    cluster: Cluster, dead_queue: DeadLetterQueue
) -> None:
    """The whole path in a clock-server process: the ring batch marks the alarm dead and wakes
    the relay, which publishes it; /metrics counts both."""
    server = cluster.server(
        "dying",
        CLOCK_DEAD_LETTER_EXCHANGE=dead_queue.exchange,
        CLOCK_DECLARE_QUEUES="false",
        CLOCK_RETRY_MAX="0",
    ).start()
    target = int(time.time() * 1000) + 300
    alarm = {"application": "unbound", "business_id": "x", "payload": "p", "target_ring_at": target}
    answer = requests.post(server.base_url + "/v1/alarms", json=alarm, timeout=5)
    assert answer.status_code == 201
    ((_, body),) = dead_queue.take(1, timeout_s=3)
    assert (body["id"], body["attempts"], body["error"]) == (answer.json()["id"], 1, NOT_CONFIRMED)
    assert body["died_at"] - target < 1_500
    # The consumer may have the letter before the relay has its confirm and counts it.
    published = 'clock_dead_letters_published_total{application="unbound"} 1.0'

    def counted() -> str | None:
        text = requests.get(server.base_url + "/metrics", timeout=5).text
        return text if published in text else None

    metrics = eventually(counted, 3, 0.05, "the relay never counted the dead letter published")
    assert 'clock_alarms_dead_total{application="unbound"} 1.0' in metrics
