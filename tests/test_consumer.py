"""clock_client.Consumer against a real RabbitMQ: delivery, ack, requeue, poison, stop, and
connecting again when its connection is lost or closed by the broker."""

from __future__ import annotations

import json
import logging
import os
import queue
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pika
import pika.exceptions
import pytest

import clock_client
from clock_client import AlarmMessage, Consumer
from clock_client.backoff import Backoff
from tests.support import TcpProxy, close_broker_connection, eventually, named_amqp_url

BROKER_URL = os.environ.get("CLOCK_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")
REPO_ROOT = Path(__file__).resolve().parents[1]
# Where clock_client is imported from (its src folder): a subprocess is given it too.
CLIENT_ROOT = Path(clock_client.__file__).resolve().parents[1]
WAIT_S = 5.0


def _uid() -> str:
    return uuid4().hex[:10]


def _ring_body(alarm_id: int, application: str, **overrides: Any) -> bytes:
    body = {
        "id": alarm_id,
        "application": application,
        "business_id": f"order-{alarm_id}",
        "payload": json.dumps({"n": alarm_id}),
        "target_ring_at": 1_700_000_000_000 + alarm_id,
        "attempt": 1,
    }
    body.update(overrides)
    return json.dumps(body).encode()


class Broker:
    """The test's own view of one unique exchange/queue; deletes both at cleanup."""

    def __init__(self) -> None:
        self.exchange = f"clock_test_{_uid()}"
        self.queue_prefix = f"{self.exchange}."
        self.application = f"app{_uid()}"
        self.queue = self.queue_prefix + self.application
        self.connection = pika.BlockingConnection(pika.URLParameters(BROKER_URL))
        self.channel = self.connection.channel()
        self.channel.confirm_delivery()

    def declare(self) -> None:
        self.channel.exchange_declare(self.exchange, "direct", durable=True)
        self.channel.queue_declare(self.queue, durable=True)
        self.channel.queue_bind(self.queue, self.exchange, routing_key=self.application)

    def publish(self, body: bytes, message_id: str | None = None) -> None:
        properties = pika.BasicProperties(
            message_id=message_id, content_type="application/json", delivery_mode=2
        )
        # mandatory + confirms: fails loudly if the message was not routed to the queue.
        self.channel.basic_publish(
            self.exchange, self.application, body, properties=properties, mandatory=True
        )

    def counts(self) -> tuple[int, int] | None:
        """(ready messages, consumers) of the queue, or None if it does not exist."""
        channel = self.connection.channel()
        try:
            ok = channel.queue_declare(self.queue, passive=True)
        except pika.exceptions.ChannelClosedByBroker:
            return None  # a passive declare of a missing queue closes the channel
        channel.close()
        return ok.method.message_count, ok.method.consumer_count

    def consumer(self, handler: Callable[[AlarmMessage], object], **kwargs: Any) -> Consumer:
        return Consumer(
            BROKER_URL,
            self.application,
            handler,
            queue_prefix=self.queue_prefix,
            exchange=self.exchange,
            **kwargs,
        )

    def cleanup(self) -> None:
        self.channel.queue_delete(self.queue)
        self.channel.exchange_delete(self.exchange)
        self.connection.close()


class Running:
    """A Consumer running in a thread; stop() joins it and re-raises what run() raised."""

    def __init__(self, consumer: Consumer) -> None:
        self.consumer = consumer
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            self.consumer.run()
        except BaseException as exc:  # handed to the test thread by stop()
            self.error = exc

    def join(self, timeout: float = WAIT_S) -> float:
        """Wait for run() to return; gives the seconds it took."""
        started = time.monotonic()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"run() still running after {timeout}s"
        return time.monotonic() - started

    def stop(self, timeout: float = WAIT_S) -> float:
        self.consumer.stop()
        took = self.join(timeout)
        if self.error is not None:
            raise self.error
        return took


@pytest.fixture
def broker() -> Iterator[Broker]:
    broker = Broker()  # RabbitMQ down is a failure here, not a skip
    yield broker
    broker.cleanup()


@pytest.fixture
def start(broker: Broker) -> Iterator[Callable[[Consumer], Running]]:
    """Starts consumers in threads and waits until each is registered with the broker."""
    started: list[Running] = []

    def _start(consumer: Consumer) -> Running:
        running = Running(consumer)
        started.append(running)
        eventually(
            lambda: running.error is not None or (broker.counts() or (0, 0))[1] == 1, WAIT_S, 0.02
        )
        if running.error is not None:
            raise running.error
        return running

    yield _start
    for running in started:
        running.consumer.stop()
        running.thread.join(WAIT_S)


def test_message_from_body_uses_alarm_id_when_message_id_missing() -> None:
    message = AlarmMessage.from_body(
        json.loads(_ring_body(7, "billing")), message_id=None, redelivered=False
    )
    assert message.message_id == "7"
    assert message.target_ring_datetime.year == 2023


def test_message_from_body_reads_published_at_when_the_server_sends_it() -> None:
    sent = AlarmMessage.from_body(
        json.loads(_ring_body(7, "billing", published_at=1_700_000_000_009)),
        message_id="7",
        redelivered=False,
    )
    assert sent.published_at == 1_700_000_000_009
    older = AlarmMessage.from_body(
        json.loads(_ring_body(7, "billing")), message_id="7", redelivered=False
    )
    assert older.published_at is None
    with pytest.raises(ValueError, match="'published_at'"):
        AlarmMessage.from_body(
            json.loads(_ring_body(7, "billing", published_at="soon")),
            message_id="7",
            redelivered=False,
        )


def test_message_from_body_rejects_wrong_types() -> None:
    with pytest.raises(ValueError, match="'attempt'"):
        AlarmMessage.from_body(
            json.loads(_ring_body(7, "billing", attempt="1")), message_id="7", redelivered=False
        )


@pytest.mark.rabbitmq
def test_consumer_started_first_declares_queue_and_gets_typed_message(
    broker: Broker, start: Callable[[Consumer], Running]
) -> None:
    received: queue.Queue[AlarmMessage] = queue.Queue()
    running = start(broker.consumer(received.put))  # declares exchange, queue, binding

    broker.publish(_ring_body(42, broker.application), message_id="42")

    message = received.get(timeout=WAIT_S)
    assert message == AlarmMessage(
        id=42,
        application=broker.application,
        business_id="order-42",
        payload='{"n": 42}',
        target_ring_at=1_700_000_000_042,
        attempt=1,
        message_id="42",
        redelivered=False,
    )
    running.stop()
    # An unacked message would be back in the queue once the consumer's channel closed.
    assert broker.counts() == (0, 0)


@pytest.mark.rabbitmq
def test_handler_exception_requeues_and_message_is_redelivered(
    broker: Broker, start: Callable[[Consumer], Running], caplog: pytest.LogCaptureFixture
) -> None:
    broker.declare()
    seen: queue.Queue[AlarmMessage] = queue.Queue()

    def flaky(message: AlarmMessage) -> None:
        seen.put(message)
        if not message.redelivered:
            raise RuntimeError("downstream is down")

    broker.publish(_ring_body(1, broker.application), message_id="1")
    with caplog.at_level(logging.ERROR, logger="clock_client.consumer"):
        running = start(broker.consumer(flaky))
        first, second = seen.get(timeout=WAIT_S), seen.get(timeout=WAIT_S)
        running.stop()

    assert (first.message_id, first.redelivered) == ("1", False)
    assert (second.message_id, second.redelivered) == ("1", True)
    assert seen.empty()
    assert broker.counts() == (0, 0)
    assert any("downstream is down" in r.exc_text for r in caplog.records if r.exc_text)


@pytest.mark.rabbitmq
def test_poison_messages_are_dropped_not_looped(
    broker: Broker, start: Callable[[Consumer], Running], caplog: pytest.LogCaptureFixture
) -> None:
    broker.declare()
    for poison in (b"not json", b"[1, 2]", b'{"id": "x"}', b"\xff\xfe"):
        broker.publish(poison, message_id="poison")
    broker.publish(_ring_body(5, broker.application), message_id="5")
    received: queue.Queue[AlarmMessage] = queue.Queue()

    def dropped() -> list[logging.LogRecord]:
        return [r for r in caplog.records if "dropping malformed message" in r.getMessage()]

    with caplog.at_level(logging.ERROR, logger="clock_client.consumer"):
        running = start(broker.consumer(received.put))
        assert received.get(timeout=WAIT_S).id == 5
        eventually(lambda: len(dropped()) >= 4, WAIT_S, 0.02)
        running.stop()

    assert received.empty()
    # A poison message requeued would be back in the queue, or dropped twice.
    assert broker.counts() == (0, 0)
    assert len(dropped()) == 4


@pytest.mark.rabbitmq
def test_stop_from_another_thread_ends_run_promptly(
    broker: Broker, start: Callable[[Consumer], Running]
) -> None:
    running = start(broker.consumer(lambda message: None))
    assert running.stop() < 1.5
    assert broker.counts() == (0, 0)


@pytest.mark.rabbitmq
def test_stop_finishes_message_in_hand_and_returns_the_rest(
    broker: Broker, start: Callable[[Consumer], Running]
) -> None:
    broker.declare()
    in_handler = threading.Event()
    done: list[int] = []

    def slow(message: AlarmMessage) -> None:
        in_handler.set()
        time.sleep(0.5)
        done.append(message.id)

    for alarm_id in (1, 2, 3):
        broker.publish(_ring_body(alarm_id, broker.application), message_id=str(alarm_id))
    running = start(broker.consumer(slow))
    assert in_handler.wait(WAIT_S)
    running.stop()

    assert done == [1]
    assert broker.counts() == (2, 0)  # 1 acked; 2 and 3 prefetched, then handed back


@pytest.mark.rabbitmq
def test_handler_may_stop_its_own_consumer(broker: Broker) -> None:
    broker.declare()
    handled: list[int] = []
    consumer: Consumer

    def once(message: AlarmMessage) -> None:
        handled.append(message.id)
        consumer.stop()

    for alarm_id in (1, 2):
        broker.publish(_ring_body(alarm_id, broker.application), message_id=str(alarm_id))
    consumer = broker.consumer(once)
    running = Running(consumer)  # it may be done before a wait for it to register would look
    running.join()
    assert running.error is None
    assert handled == [1]
    assert broker.counts() == (1, 0)


@pytest.mark.rabbitmq
def test_stop_before_run_returns_at_once_and_run_is_once_only(broker: Broker) -> None:
    consumer = broker.consumer(lambda message: None)
    consumer.stop()
    running = Running(consumer)
    assert running.join() < 2
    assert running.error is None
    with pytest.raises(RuntimeError, match="runs once"):
        consumer.run()


@pytest.mark.rabbitmq
def test_deleting_the_queue_ends_run_with_consumer_cancelled(
    broker: Broker, start: Callable[[Consumer], Running]
) -> None:
    running = start(broker.consumer(lambda message: None))
    broker.channel.queue_delete(broker.queue)
    running.join()
    assert isinstance(running.error, pika.exceptions.ConsumerCancelled)


@pytest.mark.rabbitmq
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_stops_consumer_running_in_main_thread(broker: Broker, signum: int) -> None:
    script = textwrap.dedent(
        f"""
        from clock_client import Consumer
        Consumer({BROKER_URL!r}, {broker.application!r}, print,
                 queue_prefix={broker.queue_prefix!r}, exchange={broker.exchange!r}).run()
        print("stopped cleanly", flush=True)
        """
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(CLIENT_ROOT), str(REPO_ROOT)])},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        eventually(
            lambda: process.poll() is not None or (broker.counts() or (0, 0))[1] == 1, WAIT_S, 0.02
        )
        assert process.poll() is None, process.communicate()
        process.send_signal(signum)
        out, err = process.communicate(timeout=WAIT_S)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode == 0, err
    assert "stopped cleanly" in out
    assert broker.counts() == (0, 0)


@pytest.mark.rabbitmq
def test_a_consumer_goes_on_with_the_next_node_when_its_node_goes_away(
    broker: Broker, start: Callable[[Consumer], Running]
) -> None:
    first, second = TcpProxy(5672).start(), TcpProxy(5672).start()
    try:
        received: queue.Queue[AlarmMessage] = queue.Queue()
        consumer = Consumer(
            f"{first.amqp_url},{second.amqp_url}",
            broker.application,
            received.put,
            queue_prefix=broker.queue_prefix,
            exchange=broker.exchange,
        )
        running = start(consumer)
        broker.publish(_ring_body(1, broker.application), message_id="1")
        assert received.get(timeout=WAIT_S).id == 1
        assert not second.connected
        first.cut()  # the node goes away
        eventually(lambda: second.connected and (broker.counts() or (0, 0))[1] == 1, WAIT_S, 0.02)
        broker.publish(_ring_body(2, broker.application), message_id="2")
        after = [received.get(timeout=WAIT_S)]
        while after[-1].id != 2:
            after.append(received.get(timeout=WAIT_S))
        # 1's ack may have been lost with the node: then it comes again, marked as such.
        assert all(message.id == 1 and message.redelivered for message in after[:-1])
        running.stop()
    finally:
        first.cut()
        second.cut()


def _received_until(received: queue.Queue[AlarmMessage], alarm_id: int) -> list[AlarmMessage]:
    """What the handler got up to the message of `alarm_id`."""
    got = [received.get(timeout=WAIT_S)]
    while got[-1].id != alarm_id:
        got.append(received.get(timeout=WAIT_S))
    return got


@pytest.mark.rabbitmq
def test_a_connection_closed_by_the_broker_is_made_again_and_consumes(
    broker: Broker, start: Callable[[Consumer], Running]
) -> None:
    name = f"clock-test-consumer-{_uid()}"
    received: queue.Queue[AlarmMessage] = queue.Queue()
    consumer = Consumer(named_amqp_url(BROKER_URL, name), broker.application, received.put,
                        queue_prefix=broker.queue_prefix, exchange=broker.exchange,
                        reconnect_first_s=0.05)  # fmt: skip
    running = start(consumer)
    broker.publish(_ring_body(1, broker.application), message_id="1")
    assert received.get(timeout=WAIT_S).id == 1

    close_broker_connection(name)
    eventually(lambda: (broker.counts() or (0, 0))[1] == 1 and running.error is None, WAIT_S)
    broker.publish(_ring_body(2, broker.application), message_id="2")
    after = _received_until(received, 2)
    # 1's ack may have been lost with the connection: then it comes again, marked as such.
    assert all(message.id == 1 and message.redelivered for message in after[:-1])
    assert running.thread.is_alive() and running.error is None
    running.stop()


def _warnings_of_the_consumer(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "clock_client.consumer"]


@pytest.mark.rabbitmq
def test_with_one_node_it_waits_for_the_node_to_come_back(
    broker: Broker, start: Callable[[Consumer], Running], caplog: pytest.LogCaptureFixture
) -> None:
    proxy = TcpProxy(5672).start()
    try:
        received: queue.Queue[AlarmMessage] = queue.Queue()
        consumer = Consumer(proxy.amqp_url, broker.application, received.put,
                            queue_prefix=broker.queue_prefix, exchange=broker.exchange,
                            reconnect_first_s=0.05, reconnect_cap_s=0.2)  # fmt: skip
        with caplog.at_level(logging.WARNING, logger="clock_client.consumer"):
            running = start(consumer)
            proxy.cut()  # the node goes away, and refuses connections for a while
            eventually(lambda: len(_warnings_of_the_consumer(caplog)) >= 3, WAIT_S)
            assert running.error is None and running.thread.is_alive()
            proxy.start()  # and comes back on the same address
            eventually(lambda: proxy.connected and (broker.counts() or (0, 0))[1] == 1, WAIT_S)
        broker.publish(_ring_body(1, broker.application), message_id="1")
        assert received.get(timeout=WAIT_S).id == 1
        assert running.stop() < 1.5
    finally:
        proxy.cut()


@pytest.mark.rabbitmq
def test_max_reconnects_ends_run_after_that_many_failures_in_a_row(
    broker: Broker, start: Callable[[Consumer], Running]
) -> None:
    proxy = TcpProxy(5672).start()
    try:
        consumer = Consumer(proxy.amqp_url, broker.application, lambda message: None,
                            queue_prefix=broker.queue_prefix, exchange=broker.exchange,
                            reconnect_first_s=0.01, max_reconnects=2)  # fmt: skip
        running = start(consumer)
        proxy.cut()
        running.join()
        assert isinstance(running.error, pika.exceptions.AMQPConnectionError)
    finally:
        proxy.cut()


@pytest.mark.rabbitmq
@pytest.mark.parametrize(
    ("url", "refusal"),
    [
        (BROKER_URL.replace("guest:guest@", "guest:not-the-password@"), "ACCESS_REFUSED"),
        (BROKER_URL.rsplit("/", 1)[0] + "/no-such-vhost", "NOT_ALLOWED"),
    ],
    ids=["credentials", "virtual-host"],
)
def test_a_refusal_of_the_broker_ends_run_at_once(url: str, refusal: str) -> None:
    consumer = Consumer(url, f"app{_uid()}", lambda message: None, reconnect_first_s=0.01)
    running = Running(consumer)
    running.join()
    assert isinstance(running.error, pika.exceptions.AMQPConnectionError), running.error
    assert refusal in str(running.error)


def test_the_backoff_is_capped_exponential_with_jitter() -> None:
    backoff = Backoff(first_s=0.5, cap_s=4.0, rng=random.Random(7))
    ceilings = [min(4.0, 0.5 * 2**n) for n in range(8)]
    waits = [backoff.next_s() for _ in ceilings]
    assert all(0 <= wait <= ceiling for wait, ceiling in zip(waits, ceilings, strict=True))
    assert len(set(waits)) == len(waits)  # drawn, not fixed
    many = [backoff.next_s() for _ in range(200)]
    assert max(many) <= 4.0 < 2 * max(many)  # capped, and the cap is reached for
    backoff.reset()
    assert backoff.next_s() <= 0.5 and backoff.failures == 1
    with pytest.raises(ValueError, match="first_s"):
        Backoff(first_s=2.0, cap_s=1.0)


def test_message_from_body_reads_what_a_count_triggered_alarm_says() -> None:
    message = AlarmMessage.from_body(
        json.loads(_ring_body(7, "billing", trigger="count", count=3)),
        message_id="7",
        redelivered=False,
    )
    assert (message.trigger, message.count) == ("count", 3)
    with pytest.raises(ValueError, match="'count'"):
        AlarmMessage.from_body(
            json.loads(_ring_body(7, "billing", trigger="count", count="3")),
            message_id="7",
            redelivered=False,
        )


@pytest.mark.rabbitmq
def test_a_consumer_declares_and_reads_a_quorum_queue(
    broker: Broker, start: Callable[[Consumer], Running]
) -> None:
    received: queue.Queue[AlarmMessage] = queue.Queue()
    running = start(broker.consumer(received.put, queue_type="quorum"))
    broker.publish(_ring_body(7, broker.application), message_id="7")
    assert received.get(timeout=WAIT_S).id == 7
    running.stop()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker, match="x-queue-type"):
        broker.connection.channel().queue_declare(broker.queue, durable=True)  # as classic
