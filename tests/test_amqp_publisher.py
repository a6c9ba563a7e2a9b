"""AmqpPublisher against a real RabbitMQ, and the InMemoryPublisher twin."""

from __future__ import annotations

import json
import logging
import re
import socket
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from uuid import uuid4

import pika
import pytest
from hypothesis import given
from hypothesis import strategies as st

from clock_server.broker.amqp_nodes import heartbeat_within, node_parameters
from clock_server.broker.amqp_publisher import AmqpPublisher
from clock_server.broker.confirms import Batch, ConfirmTracker, waits_on_s
from clock_server.broker.moment_queue import MomentQueue
from clock_server.broker.publisher import TimedGroup
from clock_server.errors import ConfigError
from clock_server.model import OutgoingMessage
from clock_server.testing import InMemoryPublisher, SettableClock
from clock_server.timesource import SystemClock
from tests.support import TcpProxy, close_broker_connection, eventually, named_amqp_url

BROKER_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"


def _uid() -> str:
    return uuid4().hex[:8]


def _messages(application: str, count: int) -> list[OutgoingMessage]:
    return [
        OutgoingMessage(f"{application}-{i}", application, json.dumps({"n": i}).encode())
        for i in range(count)
    ]


class Broker:
    """Test-side view of the broker through a BlockingConnection; cleans up what tests made."""

    def __init__(self) -> None:
        self.exchange = f"clock_test_{_uid()}"
        self.prefix = f"{self.exchange}."
        self.queues: set[str] = set()
        self.connection = pika.BlockingConnection(pika.URLParameters(BROKER_URL))
        self.channel = self.connection.channel()

    def app(self) -> str:
        application = f"app_{_uid()}"
        self.queues.add(self.prefix + application)
        return application

    def bind_queue(self, application: str, arguments: dict[str, object] | None = None) -> None:
        queue = self.prefix + application
        self.channel.exchange_declare(self.exchange, "direct", durable=True)
        self.channel.queue_declare(queue, durable=True, arguments=arguments)
        self.channel.queue_bind(queue, self.exchange, routing_key=application)

    def drain(self, application: str) -> list[tuple[pika.BasicProperties, bytes]]:
        received = []
        while True:
            method, properties, body = self.channel.basic_get(self.prefix + application, True)
            if method is None:
                return received
            received.append((properties, body))

    def cleanup(self) -> None:
        for queue in self.queues:
            self.channel.queue_delete(queue)
        self.channel.exchange_delete(self.exchange)
        self.connection.close()


@pytest.fixture
def broker() -> Iterator[Broker]:
    broker = Broker()  # RabbitMQ down is a failure here, not a skip
    yield broker
    broker.cleanup()


@pytest.fixture
def make_publisher(broker: Broker) -> Iterator[Callable[..., AmqpPublisher]]:
    publishers: list[AmqpPublisher] = []

    def make(url: str = BROKER_URL, ready: bool = True, **kwargs: object) -> AmqpPublisher:
        kwargs = {"exchange": broker.exchange, "queue_prefix": broker.prefix, **kwargs}
        publisher = AmqpPublisher(url, **kwargs)  # type: ignore[arg-type]
        publishers.append(publisher)
        publisher.start()
        if ready:
            assert publisher.wait_healthy(5.0)
        return publisher

    yield make
    for publisher in publishers:
        publisher.close()


@pytest.mark.rabbitmq
def test_batch_is_confirmed_and_queued_with_properties(broker, make_publisher):
    publisher = make_publisher()
    first, second = broker.app(), broker.app()
    messages = _messages(first, 300) + _messages(second, 200)
    before = int(time.time())

    assert publisher.publish_batch(messages, timeout_s=5.0) == [True] * 500

    for application, count in ((first, 300), (second, 200)):
        received = broker.drain(application)
        assert [body for _, body in received] == [m.body for m in _messages(application, count)]
        assert [p.message_id for p, _ in received] == [f"{application}-{i}" for i in range(count)]
        for properties, _ in received:
            assert properties.delivery_mode == 2
            assert properties.content_type == "application/json"
            assert before <= properties.timestamp <= time.time() + 1


@pytest.mark.rabbitmq
def test_bodies_larger_than_a_frame_arrive_whole(broker, make_publisher):
    publisher = make_publisher()
    application = broker.app()
    large = ('{"payload": "' + "é☃" * 150_000 + '"}').encode()  # 750 kB, several frames
    messages = [
        OutgoingMessage("big", application, large),
        OutgoingMessage("empty", application, b""),
        OutgoingMessage("small", application, b"{}"),
    ]
    assert publisher.publish_batch(messages, timeout_s=5.0) == [True] * 3
    # and with the large body last, where the batch's last buffer fills up
    assert publisher.publish_batch(messages[::-1], timeout_s=5.0) == [True] * 3
    received = broker.drain(application)
    sent = [("big", large), ("empty", b""), ("small", b"{}")]
    assert [(p.message_id, body) for p, body in received] == sent + sent[::-1]


@pytest.mark.rabbitmq
def test_concurrent_callers_share_one_queue_declaration(broker, make_publisher):
    publisher = make_publisher()
    application = broker.app()
    results: list[list[bool]] = []

    def publish(tag: str) -> None:
        batch = [OutgoingMessage(f"{tag}-{i}", application, b"{}") for i in range(200)]
        results.append(publisher.publish_batch(batch, timeout_s=5.0))

    threads = [threading.Thread(target=publish, args=(tag,)) for tag in "ab"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)

    assert results == [[True] * 200, [True] * 200]
    assert len(broker.drain(application)) == 400


@pytest.mark.rabbitmq
def test_unroutable_messages_are_false_and_routable_true(broker, make_publisher):
    publisher = make_publisher(declare_queues=False)
    routable, unroutable = broker.app(), f"nobody_{_uid()}"
    broker.bind_queue(routable)
    messages = [
        OutgoingMessage("m1", routable, b"{}"),
        OutgoingMessage("m2", unroutable, b"{}"),
        OutgoingMessage("m3", routable, b"{}"),
        OutgoingMessage("m4", unroutable, b"{}"),
    ]

    pending = publisher.start_batch(messages)
    assert pending.wait(5.0) == [True, False, True, False]
    assert pending.refused == [1, 3], "an unroutable message is the receiving side's refusal"
    assert [p.message_id for p, _ in broker.drain(routable)] == ["m1", "m3"]


@pytest.mark.rabbitmq
def test_nacked_messages_are_false(broker, make_publisher):
    publisher = make_publisher(declare_queues=False)
    application = broker.app()
    broker.bind_queue(application, {"x-max-length": 2, "x-overflow": "reject-publish"})

    pending = publisher.start_batch(_messages(application, 5))

    assert pending.wait(5.0) == [True, True, False, False, False]
    assert pending.refused == [2, 3, 4]


@pytest.mark.rabbitmq
def test_unreachable_broker_fails_fast(broker, make_publisher):
    publisher = make_publisher("amqp://guest:guest@127.0.0.1:1/%2F", ready=False)

    started = time.monotonic()
    pending = publisher.start_batch(_messages(broker.app(), 3))

    assert pending.wait(5.0) == [False, False, False]
    assert pending.refused == [], "no connection is the service's own trouble, not a refusal"
    assert time.monotonic() - started < 0.5
    assert not publisher.wait_healthy(0.3)
    assert not publisher.is_healthy()


@pytest.mark.rabbitmq
def test_reconnects_after_broker_closes_connection(broker, make_publisher):
    name = f"clock-test-{_uid()}"
    publisher = make_publisher(named_amqp_url(BROKER_URL, name))
    application = broker.app()
    assert publisher.publish_batch(_messages(application, 10), timeout_s=5.0) == [True] * 10

    close_broker_connection(name)

    eventually(lambda: not publisher.is_healthy(), 5.0)
    assert publisher.wait_healthy(5.0)
    assert publisher.publish_batch(_messages(application, 10), timeout_s=5.0) == [True] * 10
    assert len(broker.drain(application)) == 20


@pytest.mark.rabbitmq
def test_connection_lost_mid_batch_fails_unconfirmed(broker, make_publisher, monkeypatch):
    publisher = make_publisher()
    publish = publisher._publish

    def drop_then_publish(batch):
        # Test-only: cut the TCP stream on the IO thread as the batch goes out. Cut after the
        # publish, the batch has already been sent (the publisher sends at once), and Linux
        # still hands a socket shut for reading the broker's confirms.
        publisher._connection._transport._sock.shutdown(socket.SHUT_RDWR)
        publish(batch)

    monkeypatch.setattr(publisher, "_publish", drop_then_publish)
    started = time.monotonic()
    pending = publisher.start_batch(_messages(broker.app(), 50))

    assert pending.wait(5.0) == [False] * 50
    assert pending.refused == []
    assert time.monotonic() - started < 2.0
    monkeypatch.undo()
    assert publisher.wait_healthy(5.0)
    assert publisher.publish_batch(_messages(broker.app(), 5), timeout_s=5.0) == [True] * 5


@pytest.mark.rabbitmq
def test_missing_confirms_time_out_as_false(broker, make_publisher, monkeypatch, caplog):
    publisher = make_publisher()
    # Every confirm, read by the connection itself or by pika, is settled here.
    monkeypatch.setattr(publisher, "_settle", lambda tag, multiple, acked: None)

    with caplog.at_level(logging.WARNING, logger="clock_server.broker.amqp_publisher"):
        started = time.monotonic()
        pending = publisher.start_batch(_messages(broker.app(), 5))
        results = pending.wait(0.3)

    assert results == [False] * 5
    assert pending.refused == [], "a confirm that never came is no refusal"
    assert time.monotonic() - started < 1.0
    assert re.search(r"5 messages not confirmed \d+\.\d s after they were sent", caplog.text)


@pytest.mark.parametrize(
    ("timeout_s", "waited_s", "quiet_s", "more_s"),
    [
        (10, 10, None, 0),  # no open, unblocked connection
        (10, 10, 12, 0),  # the broker said nothing for a timeout: given up
        (10, 10, 10, 0),
        (10, 10, 0.5, 9.5),  # it still talks: until it has been quiet a timeout
        (10, 25, 0.5, 5),  # and never past three timeouts in all
        (10, 30, 0, 0),
        (0, 12, 0, 0),  # a later group took the batch's whole timeout
    ],
)
def test_a_batch_is_waited_for_while_the_broker_keeps_talking(timeout_s, waited_s, quiet_s, more_s):
    assert waits_on_s(timeout_s, waited_s, quiet_s) == pytest.approx(more_s)


@pytest.mark.parametrize(
    ("url", "asked", "heartbeat"),
    [
        ("amqp://u:p@rabbit.example/%2F", 5, 5),
        ("amqp://u:p@rabbit.example/%2F?heartbeat=600", 5, 600),  # the url's own wins
        ("amqp://u:p@rabbit.example/%2F", None, None),  # what the broker proposes
    ],
)
def test_the_heartbeat_asked_for_unless_the_url_names_one(url, asked, heartbeat):
    assert node_parameters(url, "clock", 5.0, heartbeat_s=asked).heartbeat == heartbeat


@pytest.mark.parametrize(("timeout_s", "heartbeat"), [(10, 5), (3, 1), (0.5, 1)])
def test_the_heartbeat_is_half_the_timeout_in_whole_seconds(timeout_s, heartbeat):
    assert heartbeat_within(timeout_s) == heartbeat


@pytest.mark.rabbitmq
def test_confirms_later_than_the_timeout_count_while_the_broker_confirms_others(
    broker, make_publisher
):
    """A broker whose every answer comes 1.5 s late, steadily, is behind, not gone: a batch
    waited for with a timeout of 1 s is confirmed, not published again; with 0.4 s, three
    timeouts are past before its confirm and it is given up."""
    proxy = TcpProxy(5672).start()
    publisher = make_publisher(proxy.amqp_url)
    application = broker.app()

    def one() -> list[OutgoingMessage]:
        return [OutgoingMessage(uuid4().hex, application, b"{}")]

    assert publisher.publish_batch(one(), timeout_s=5.0) == [True]  # its queue declared
    proxy.lag_s = 1.5
    stop, stream = threading.Event(), []

    def keep_publishing() -> None:
        while not stop.wait(0.1):
            stream.append(publisher.start_batch(one()))

    pacer = threading.Thread(target=keep_publishing, daemon=True)
    pacer.start()
    try:
        time.sleep(2.0)  # the stream's confirms are coming in by now, 1.5 s late
        started = time.monotonic()
        assert publisher.start_batch(one()).wait(1.0) == [True]
        assert time.monotonic() - started >= 1.4, "confirmed only once the lag had passed"
        started = time.monotonic()
        assert publisher.start_batch(one()).wait(0.4) == [False]
        assert time.monotonic() - started < 1.5
    finally:
        stop.set()
        pacer.join()
    late = [pending.wait(5.0) for pending in stream[5:]]
    assert late == [[True]] * len(late)
    proxy.cut()


@pytest.mark.rabbitmq
def test_a_lone_batch_is_waited_for_while_the_broker_sends_heartbeats(broker, make_publisher):
    """Nothing else in flight: the broker's heartbeats (a gap of a second at most here) show
    it is there while its confirm is 2.5 s late, past a timeout of 2 s. Frozen, it says
    nothing, and the batch is given up after its timeout."""
    proxy = TcpProxy(5672).start()
    publisher = make_publisher(proxy.amqp_url, heartbeat_s=1)
    application = broker.app()
    assert publisher.publish_batch(_messages(application, 1), timeout_s=5.0) == [True]
    proxy.lag_s = 2.5
    time.sleep(2.6)  # what the broker sent before the lag has come
    started = time.monotonic()
    assert publisher.publish_batch(_messages(application, 1), timeout_s=2.0) == [True]
    assert time.monotonic() - started >= 2.4
    proxy.freeze()
    time.sleep(2.1)
    started = time.monotonic()
    assert publisher.publish_batch(_messages(application, 1), timeout_s=2.0) == [False]
    assert time.monotonic() - started < 2.5
    proxy.cut()


@pytest.mark.rabbitmq
def test_a_queue_declared_as_the_channel_closes_fails_its_batch_and_nothing_else(
    broker, make_publisher, caplog
):
    proxy = TcpProxy(5672).start()
    publisher = make_publisher(proxy.amqp_url)
    proxy.lag_s = 0.5  # the declare's answer comes after the close has begun
    with caplog.at_level(logging.WARNING):
        pending = publisher.start_batch(_messages(broker.app(), 1))
        time.sleep(0.1)
        publisher.close(3.0)
    assert pending.wait(0.0) == [False]
    assert "publisher_loop_error" not in [getattr(r, "action", "") for r in caplog.records]
    proxy.cut()


@pytest.mark.rabbitmq
def test_a_batch_is_sent_before_the_io_loop_turns_again(broker, make_publisher, monkeypatch):
    publisher = make_publisher()
    publish = publisher._publish
    queued_after_publish: list[int] = []

    def publish_and_look(batch):
        publish(batch)
        queued_after_publish.append(publisher._connection._transport.get_write_buffer_size())

    monkeypatch.setattr(publisher, "_publish", publish_and_look)
    application = broker.app()

    assert publisher.publish_batch(_messages(application, 3), timeout_s=5.0) == [True] * 3
    assert queued_after_publish == [0]
    assert len(broker.drain(application)) == 3


@pytest.mark.rabbitmq
def test_acks_are_read_by_the_connection_and_nacks_by_pika(broker, make_publisher, monkeypatch):
    publisher = make_publisher(declare_queues=False)
    through_pika: list[str] = []
    on_confirm = publisher._on_confirm

    def count(channel, frame):
        through_pika.append(type(frame.method).__name__)
        on_confirm(channel, frame)

    monkeypatch.setattr(publisher, "_on_confirm", count)
    # The channel opened after this reconnect registers the counting confirm callback.
    publisher._ioloop.add_callback_threadsafe(publisher._connection.close)
    eventually(lambda: not publisher.is_healthy(), 2.0)
    assert publisher.wait_healthy(5.0)
    application = broker.app()
    broker.bind_queue(application, {"x-max-length": 2, "x-overflow": "reject-publish"})

    assert publisher.publish_batch(_messages(application, 2), timeout_s=5.0) == [True, True]
    assert publisher.publish_batch(_messages(application, 3), timeout_s=5.0) == [False] * 3
    assert through_pika and set(through_pika) == {"Nack"}
    assert len(broker.drain(application)) == 2


@pytest.mark.rabbitmq
def test_recovers_when_an_io_loop_callback_raises(broker, make_publisher, caplog):
    publisher = make_publisher()

    def boom() -> None:
        raise RuntimeError("boom")

    with caplog.at_level(logging.ERROR, logger="clock_server.broker.amqp_publisher"):
        publisher._ioloop.add_callback_threadsafe(boom)
        eventually(lambda: not publisher.is_healthy(), 2.0)
    assert "IO loop failed" in caplog.text
    assert publisher.wait_healthy(5.0)
    assert publisher.publish_batch(_messages(broker.app(), 5), timeout_s=5.0) == [True] * 5


@pytest.mark.rabbitmq
def test_close_is_bounded_and_leaves_no_thread(broker, make_publisher):
    before = set(threading.enumerate())
    publisher = make_publisher()
    application = broker.app()
    assert publisher.publish_batch(_messages(application, 100), timeout_s=5.0) == [True] * 100
    io_threads = set(threading.enumerate()) - before

    started = time.monotonic()
    publisher.close()

    assert time.monotonic() - started < 5.5
    assert len(io_threads) == 1
    assert not io_threads & set(threading.enumerate())
    assert not publisher.is_healthy()
    assert publisher.publish_batch(_messages(application, 2), timeout_s=1.0) == [False, False]
    publisher.close()


def test_in_memory_publisher_records_and_fails_on_demand():
    publisher = InMemoryPublisher()
    first = _messages("a", 3)

    assert publisher.publish_batch(first, timeout_s=1.0) == [True, True, True]
    publisher.fail_next(2)
    publisher.unroutable.add("b")
    mixed = _messages("a", 3) + _messages("b", 1)
    refusing = publisher.start_batch(mixed)
    assert refusing.wait(1.0) == [False, False, True, False]
    assert refusing.refused == [0, 1, 3]
    publisher.healthy = False
    unsettled = publisher.start_batch(first)
    assert unsettled.wait(1.0) == [False] * 3
    assert unsettled.refused == []
    assert not publisher.is_healthy()

    assert publisher.published == [*first, mixed[2]]
    assert publisher.published_for("a") == [*first, mixed[2]]
    publisher.close()
    assert publisher.closed


@given(
    sizes=st.lists(st.integers(1, 6), min_size=1, max_size=4),
    confirms=st.lists(st.tuples(st.integers(1, 24), st.booleans(), st.booleans()), max_size=12),
    returned=st.sets(st.integers(1, 24), max_size=3),
)
def test_confirms_settle_each_message_as_the_broker_said(sizes, confirms, returned):
    """Delivery tags run on across batches; a multiple confirm settles every earlier tag."""
    tracker = ConfirmTracker()
    batches, first_tag = [], 1
    for size in sizes:
        batch = Batch([OutgoingMessage(f"t{first_tag + i}", "app", b"{}") for i in range(size)])
        tracker.sent(batch)
        batches.append(batch)
        first_tag += size
    for tag in returned:
        tracker.returned(f"t{tag}")
    expected: dict[int, bool] = {}
    for tag, multiple, acked in sorted(confirms):  # the broker confirms in tag order
        tracker.confirm(tag, multiple, acked)
        for settled in range(1 if multiple else tag, tag + 1):
            if settled < first_tag:
                expected.setdefault(settled, acked and settled not in returned)
    head = tracker.oldest()
    assert head is None or not head.done.is_set()  # settled batches are let go
    outcome = []
    for batch in batches:
        batch.finish()
        outcome += batch.outcome()
    assert outcome == [expected.get(tag, False) for tag in range(1, first_tag)]


# --- several nodes, and the queue type --------------------------------------------------------


def test_an_unreachable_first_node_is_passed_over(broker, make_publisher) -> None:
    application = broker.app()
    unreachable = "amqp://guest:guest@127.0.0.1:1/%2F"
    publisher = make_publisher(f"{unreachable}, {BROKER_URL}", ready=False)
    assert publisher.wait_healthy(10.0)
    assert publisher.publish_batch(_messages(application, 3), timeout_s=5.0) == [True] * 3
    assert len(broker.drain(application)) == 3


def test_a_lost_node_is_left_for_the_next_one(broker, make_publisher) -> None:
    first, second = TcpProxy(5672).start(), TcpProxy(5672).start()
    try:
        application = broker.app()
        publisher = make_publisher(f"{first.amqp_url},{second.amqp_url}")
        assert publisher.publish_batch(_messages(application, 2), timeout_s=5.0) == [True] * 2
        assert second.held_bytes == 0 and not second.connected
        first.cut()  # the node goes away; the next one is tried at once
        eventually(lambda: second.connected and publisher.is_healthy(), 10.0)
        assert publisher.publish_batch(_messages(application, 2), timeout_s=5.0) == [True] * 2
        assert len(broker.drain(application)) == 4
    finally:
        first.cut()
        second.cut()


def test_a_url_that_names_no_node_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="names no node"):
        AmqpPublisher(" , ").start()


@pytest.mark.rabbitmq
def test_quorum_queues_are_declared_when_asked_for(broker, make_publisher) -> None:
    application = broker.app()
    publisher = make_publisher(queue_type="quorum")
    assert publisher.publish_batch(_messages(application, 2), timeout_s=10.0) == [True] * 2
    listing = subprocess.run(
        ["rabbitmqctl", "-q", "list_queues", "name", "type", "--no-table-headers"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    types = dict(line.split("\t")[:2] for line in listing.splitlines() if "\t" in line)
    assert types[broker.prefix + application] == "quorum"
    assert len(broker.drain(application)) == 2


# --- timed groups: handed over at once, each sent when its moment comes on the clock given,
# never before, and without the messages whose cutoff has passed by then -------------------


class WatchedClock(SettableClock):
    """A fake clock that counts the reads of each time. The publisher's IO thread reads it
    twice at each look at its groups' moments (which comes at least every 100 ms while a
    group waits): first to take the groups due, then, once they are sent, for the next."""

    def __init__(self) -> None:
        super().__init__()
        self._reads: Counter[int] = Counter()
        self._reads_lock = threading.Lock()

    def now_ms(self) -> int:
        now_ms = super().now_ms()
        with self._reads_lock:
            self._reads[now_ms] += 1
        return now_ms

    def reads(self, at_ms: int) -> int:
        """How often the time was read while it was `at_ms`."""
        with self._reads_lock:
            return self._reads[at_ms]


@pytest.fixture
def timed_setup(broker, make_publisher) -> tuple[AmqpPublisher, WatchedClock, str]:
    """A publisher, a fake clock for its timed groups, and an application with a bound queue."""
    application = broker.app()
    broker.bind_queue(application)
    return make_publisher(), WatchedClock(), application


def _timed(at_ms: int, messages: list[OutgoingMessage], cutoffs=None, made_at=None) -> TimedGroup:
    """A group of `messages`; the moments they were made for are appended to `made_at`."""

    def make(now_ms: int) -> list[OutgoingMessage]:
        if made_at is not None:
            made_at.append(now_ms)
        return messages

    return TimedGroup(at_ms, len(messages), make, cutoffs)


def _ids(received) -> list[str]:
    return [properties.message_id for properties, _ in received]


@pytest.mark.rabbitmq
def test_each_group_is_sent_when_its_moment_comes_on_the_clock(broker, timed_setup):
    publisher, clock, application = timed_setup
    now = clock.now_ms()
    first, second = _messages(application, 3), _messages(application, 5)[3:]
    made_at: list[int] = []

    handed = publisher.start_timed(
        [_timed(now + 100, first, made_at=made_at), _timed(now + 200, second, made_at=made_at)],
        clock,
    )

    # Our read, then two looks of the IO thread at the time, which stands still.
    eventually(lambda: clock.reads(now) >= 1 + 2 * 2)
    assert broker.drain(application) == [] and handed[0].sent_at_ms is None
    clock.set(now + 99)
    eventually(lambda: clock.reads(now + 99) >= 2 * 2)  # two looks
    assert broker.drain(application) == [] and handed[0].sent_at_ms is None
    clock.set(now + 100)
    assert handed[0].wait(5.0) == [True] * 3
    assert handed[0].sent_at_ms == now + 100
    assert _ids(broker.drain(application)) == [m.message_id for m in first]
    clock.set(now + 250)
    assert handed[1].wait(5.0) == [True, True]
    assert handed[1].sent_at_ms == now + 250
    assert _ids(broker.drain(application)) == [m.message_id for m in second]
    assert made_at == [now + 100, now + 250]  # each made for the moment it went out


@pytest.mark.rabbitmq
def test_groups_a_millisecond_apart_go_out_at_their_moments_and_are_all_confirmed(
    broker, make_publisher
):
    # While the next moment is near, the acks that came are read when it comes rather than
    # as they arrive; the last group's ack must still be read once nothing else is due.
    application = broker.app()
    broker.bind_queue(application)
    name = f"clock-test-{_uid()}"
    publisher = make_publisher(named_amqp_url(BROKER_URL, name))
    clock = SystemClock()
    start = clock.now_ms() + 50
    messages = _messages(application, 40)
    groups = [_timed(start + i, [message]) for i, message in enumerate(messages)]

    handed = publisher.start_timed(groups, clock)

    assert [batch.wait(5.0) for batch in reversed(handed)] == [[True]] * 40
    assert all(batch.sent_at_ms >= group.at_ms for batch, group in zip(handed, groups, strict=True))
    # (Not in order: the first groups went out as their queue's declaration was answered.)
    assert sorted(_ids(broker.drain(application))) == sorted(m.message_id for m in messages)
    # Reads are watched again with nothing due: a connection the broker closes is noticed.
    close_broker_connection(name)
    eventually(lambda: not publisher.is_healthy(), 5.0)
    assert publisher.wait_healthy(5.0)


def test_a_moment_queue_gives_the_due_groups_earliest_first_and_keeps_the_rest():
    clock = SettableClock()
    now = clock.now_ms()
    queue = MomentQueue(clock)
    later, first, second = (_timed(now + 5, []), _timed(now, []), _timed(now, []))
    for group in (later, first, second):
        queue.add(group, Batch([], 0))

    assert [group for group, _, _ in queue.take_due()] == [first, second]
    assert len(queue) == 1 and queue.ms_to_next() == 5
    clock.advance(7)
    assert [(group, at) for group, _, at in queue.take_due()] == [(later, now + 7)]
    assert queue.ms_to_next() is None


@pytest.mark.rabbitmq
def test_groups_on_two_clocks_each_go_out_on_their_own(broker, timed_setup):
    publisher, stopped, application = timed_setup
    messages = _messages(application, 2)
    system = SystemClock()

    (waiting,) = publisher.start_timed([_timed(stopped.now_ms() + 1, messages[:1])], stopped)
    (now,) = publisher.start_timed([_timed(system.now_ms(), messages[1:])], system)

    assert now.wait(5.0) == [True]
    assert _ids(broker.drain(application)) == [messages[1].message_id]
    stopped.advance(1)
    assert waiting.wait(5.0) == [True]


@pytest.mark.rabbitmq
def test_messages_past_their_cutoff_at_the_moment_are_withheld(broker, timed_setup):
    publisher, clock, application = timed_setup
    now = clock.now_ms()
    messages = _messages(application, 4)
    cutoffs = [None, now + 120, now + 150, now + 110]

    (timed,) = publisher.start_timed([_timed(now + 100, messages, cutoffs)], clock)
    clock.set(now + 130)

    assert timed.wait(5.0) == [True, False, True, False]
    assert timed.too_late == [1, 3] and timed.refused == []
    assert _ids(broker.drain(application)) == [messages[0].message_id, messages[2].message_id]
    # The delivery tags of what follows still match: only the sent messages took one.
    after = _messages(application, 6)[4:]
    assert publisher.publish_batch(after, timeout_s=5.0) == [True, True]
    (all_late,) = publisher.start_timed([_timed(now, after, [now, now])], clock)
    assert all_late.wait(5.0) == [False, False] and all_late.too_late == [0, 1]
    assert publisher.publish_batch(messages[:1], timeout_s=5.0) == [True]


@pytest.mark.rabbitmq
def test_a_group_whose_messages_cannot_be_made_fails_alone(broker, caplog, timed_setup):
    publisher, clock, application = timed_setup
    messages = _messages(application, 2)

    def broken(_now_ms: int) -> list[OutgoingMessage]:
        raise ValueError("no body")

    broken_group = TimedGroup(clock.now_ms(), 2, broken)
    failed, sent = publisher.start_timed([broken_group, _timed(clock.now_ms(), messages)], clock)

    assert failed.wait(5.0) == [False, False]
    assert sent.wait(5.0) == [True, True]
    assert _ids(broker.drain(application)) == [m.message_id for m in messages]
    assert "making a timed group of 2 messages failed" in caplog.text


@pytest.mark.rabbitmq
def test_a_group_given_up_on_before_its_moment_is_never_sent(broker, caplog, timed_setup):
    publisher, clock, application = timed_setup
    messages = _messages(application, 3)

    with caplog.at_level(logging.WARNING, logger="clock_server.broker.amqp_publisher"):
        (timed,) = publisher.start_timed([_timed(clock.now_ms() + 1_000, messages)], clock)
        assert timed.wait(0.0) == [False, False, False]

    assert "3 messages not confirmed before the publish timeout; they were never sent" in (
        caplog.text
    )
    later = clock.now_ms() + 2_000
    clock.set(later)
    # The IO thread looked at the group's moment; the publish below comes after, on that thread.
    eventually(lambda: clock.reads(later))
    assert publisher.publish_batch(messages[:1], timeout_s=5.0) == [True]
    assert _ids(broker.drain(application)) == [messages[0].message_id]
    assert timed.sent_at_ms is None


@pytest.mark.rabbitmq
def test_groups_handed_to_a_closed_publisher_fail_at_once(broker, make_publisher):
    publisher = make_publisher()
    publisher.close()
    clock = SettableClock()
    (timed,) = publisher.start_timed([_timed(clock.now_ms(), _messages("x", 2))], clock)
    assert timed.wait(0.1) == [False, False]
    assert timed.sent_at_ms is None


def test_withheld_messages_take_no_delivery_tag():
    tracker = ConfirmTracker()
    first = Batch([OutgoingMessage(f"a{i}", "app", b"{}") for i in range(5)])
    first.withhold([1, 3])
    tracker.sent(first)
    second = Batch([OutgoingMessage(f"b{i}", "app", b"{}") for i in range(2)])
    tracker.sent(second)

    tracker.confirm(3, multiple=True, acked=True)  # the three sent messages of the first
    tracker.confirm(4, multiple=False, acked=False)  # the first of the second

    assert first.done.is_set() and first.outcome() == [True, False, True, False, True]
    assert [m.message_id for m in first.outgoing] == ["a0", "a2", "a4"]
    assert not second.done.is_set()
    tracker.confirm(5, multiple=False, acked=True)
    assert second.outcome() == [False, True]


def test_the_twin_publishes_a_group_when_its_waiter_finds_the_moment_come():
    publisher = InMemoryPublisher()
    clock = SettableClock()
    now = clock.now_ms()
    messages = _messages("app", 3)
    (timed,) = publisher.start_timed([_timed(now + 50, messages, [None, now + 60, None])], clock)
    outcome: list[list[bool]] = []
    waiter = threading.Thread(target=lambda: outcome.append(timed.wait(1.0)))
    waiter.start()

    clock.wait_for_sleepers(1)
    assert publisher.published == []
    clock.set(now + 70)
    waiter.join(5.0)

    assert outcome == [[True, False, True]]
    assert timed.too_late == [1] and timed.sent_at_ms == now + 70
    assert publisher.published == [messages[0], messages[2]]


def test_the_twin_gives_up_on_a_group_whose_moment_is_past_the_timeout():
    publisher = InMemoryPublisher()
    clock = SettableClock()
    now = clock.now_ms()
    early, late = _messages("app", 2), _messages("app", 4)[2:]
    soon, far = publisher.start_timed([_timed(now, early), _timed(now + 2_000, late)], clock)

    assert far.wait(1.0) == [False, False]
    assert far.sent_at_ms is None
    assert soon.wait(1.0) == [True, True]
    clock.set(now + 3_000)
    assert far.wait(1.0) == [False, False]
    assert publisher.published == early  # the group given up on is never sent
