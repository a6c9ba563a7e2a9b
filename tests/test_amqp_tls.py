"""The publisher over TLS (amqps://), where pika's own TLS transport reads and writes the
socket: alarms are confirmed (acks, nacks and returns as over plain TCP) and consumed, and
dead letters go out the same way.

Starts one RabbitMQ node beside the machine's own broker (bench/chaos/cluster.py, never
touching the main one), with a TLS listener of its own and certificates of a CA the test
makes (tests/tls_support.py); the node and its directory are gone once the module's tests are
done. A node whose certificate the publisher does not trust is named in the log as such.
"""

from __future__ import annotations

import json
import logging
import shutil
import ssl
import subprocess
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from uuid import uuid4

import pika
import pytest

from bench.chaos.cluster import RabbitCluster
from bench.chaos.ports import free_port
from clock_client import Consumer
from clock_server.broker.amqp_nodes import node_parameters, tls_context
from clock_server.broker.amqp_publisher import AmqpPublisher
from clock_server.broker.dead_letter_publisher import AmqpDeadLetterPublisher
from clock_server.broker.publisher import TimedGroup
from clock_server.errors import ConfigError
from clock_server.model import DeadLetter, OutgoingMessage
from clock_server.timesource import SystemClock
from tests.support import eventually
from tests.tls_support import CLIENT_NAME, make_certificates


@dataclass
class TlsNode:
    node: RabbitCluster
    port: int  # the TLS listener
    tls: Path  # ca.pem, server.pem/.key, client.pem/.key

    @property
    def url(self) -> str:
        return f"amqps://guest:guest@127.0.0.1:{self.port}/%2F"

    @property
    def ca_file(self) -> str:
        return str(self.tls / "ca.pem")

    def connections(self) -> list[str]:
        """The node's connections as rabbitmqctl lists them: TLS or not, the subject of the
        client's certificate, and the client's properties (with its connection name)."""
        columns = ["ssl", "peer_cert_subject", "client_properties"]
        listing = subprocess.run(
            ["rabbitmqctl", "-q", "-n", self.node.names[0], "list_connections", *columns,
             "--no-table-headers"],
            capture_output=True, text=True, check=True, timeout=30,
        ).stdout  # fmt: skip
        return listing.splitlines()

    def consumer(self) -> pika.BlockingConnection:
        parameters = pika.URLParameters(self.url)
        parameters.ssl_options = pika.SSLOptions(ssl.create_default_context(cafile=self.ca_file))
        return pika.BlockingConnection(parameters)


@pytest.fixture(scope="module")
def tls_node() -> Iterator[TlsNode]:
    if shutil.which("rabbitmq-server", path="/usr/sbin:/usr/bin:/sbin:/bin") is None:
        pytest.skip("rabbitmq-server is not installed")
    node = RabbitCluster(size=1)
    try:
        tls = node.directory / "tls"
        make_certificates(tls)
        port = free_port()
        node.config = (
            f"listeners.ssl.default = 127.0.0.1:{port}\n"
            f"ssl_options.cacertfile = {tls / 'ca.pem'}\n"
            f"ssl_options.certfile = {tls / 'server.pem'}\n"
            f"ssl_options.keyfile = {tls / 'server.key'}\n"
            # A client certificate is asked for and verified when given, not required.
            "ssl_options.verify = verify_peer\n"
            "ssl_options.fail_if_no_peer_cert = false\n"
        )
        node.start()
        yield TlsNode(node, port, tls)
    finally:
        node.stop()
    assert not node.directory.exists()


@pytest.fixture
def publishers() -> Iterator[list[AmqpPublisher]]:
    made: list[AmqpPublisher] = []
    yield made
    for publisher in made:
        publisher.close()


def _start(publishers: list[AmqpPublisher], url: str, **kwargs: object) -> AmqpPublisher:
    publisher = AmqpPublisher(url, **kwargs)  # type: ignore[arg-type]
    publishers.append(publisher)
    publisher.start()
    return publisher


def _alarms(application: str, count: int, size: int = 0) -> list[OutgoingMessage]:
    return [
        OutgoingMessage(
            f"{application}-{i}",
            application,
            json.dumps({"alarm": i, "pad": "x" * size}).encode(),
        )
        for i in range(count)
    ]


def _drain(connection: pika.BlockingConnection, queue: str) -> list[tuple[str, bytes]]:
    channel = connection.channel()
    received = []
    while True:
        method, properties, body = channel.basic_get(queue, auto_ack=True)
        if method is None:
            channel.close()
            return received
        received.append((properties.message_id, body))


@pytest.mark.rabbitmq
def test_alarms_go_out_over_tls_confirmed_and_consumed(tls_node, publishers) -> None:
    name = f"clock-tls-{uuid4().hex[:6]}"
    publisher = _start(publishers, tls_node.url, ca_file=tls_node.ca_file, name=name)
    assert publisher.wait_healthy(10.0), "no TLS connection with the node's CA given"
    application = f"app_{uuid4().hex[:6]}"
    # One alarm; a burst; bodies that go out as several buffers; and timed groups, whose
    # acks a plain TCP connection would read at their moments.
    sent = [_alarms(application, 1), _alarms(application, 500), _alarms(application, 12, 60_000)]
    for alarms in sent:
        assert publisher.publish_batch(alarms, timeout_s=10.0) == [True] * len(alarms)
    timed = _alarms(application + "t", 30)
    now_ms = SystemClock().now_ms()
    groups = [
        TimedGroup(now_ms + 20 * (i + 1), 10, lambda _ms, i=i: timed[10 * i : 10 * (i + 1)])
        for i in range(3)
    ]
    for pending in publisher.start_timed(groups, SystemClock()):
        assert pending.wait(10.0) == [True] * 10

    assert publisher._connection is not None
    assert publisher._connection._plain_transport() is None, "pika's TLS transport, not TCP's"
    (line,) = [line for line in tls_node.connections() if name in line]
    assert line.startswith("true"), f"the broker sees no TLS: {line}"
    with tls_node.consumer() as consumer:
        received = _drain(consumer, f"clock.{application}")
        received_timed = _drain(consumer, f"clock.{application}t")
    assert received == [(m.message_id, m.body) for alarms in sent for m in alarms]
    assert received_timed == [(m.message_id, m.body) for m in timed]


@pytest.mark.rabbitmq
def test_over_tls_the_connection_reads_the_acks_and_pika_the_rest(tls_node, publishers) -> None:
    publisher = AmqpPublisher(
        tls_node.url, ca_file=tls_node.ca_file, exchange="clock.nacks", declare_queues=False
    )
    through_pika: list[str] = []
    on_confirm = publisher._on_confirm

    def count(channel, frame):
        through_pika.append(type(frame.method).__name__)
        on_confirm(channel, frame)

    publisher._on_confirm = count  # type: ignore[method-assign]
    publishers.append(publisher)
    publisher.start()
    assert publisher.wait_healthy(10.0)
    full, unbound = f"full_{uuid4().hex[:6]}", f"nobody_{uuid4().hex[:6]}"
    with tls_node.consumer() as consumer:
        channel = consumer.channel()
        channel.queue_declare(
            f"clock.{full}", durable=True,
            arguments={"x-max-length": 3, "x-overflow": "reject-publish"},
        )  # fmt: skip
        channel.queue_bind(f"clock.{full}", "clock.nacks", routing_key=full)

        assert publisher.publish_batch(_alarms(full, 2), timeout_s=10.0) == [True, True]
        assert through_pika == [], "the acks were read by the connection itself"
        # The queue takes one more; the broker nacks the rest and returns the unroutable.
        pending = publisher.start_batch(_alarms(full, 3) + _alarms(unbound, 2))
        assert pending.wait(10.0) == [True, False, False, False, False]
        assert pending.refused == [1, 2, 3, 4]
        assert "Nack" in through_pika
        queued = [m for m, _ in _drain(consumer, f"clock.{full}")]
        assert queued == [f"{full}-0", f"{full}-1", f"{full}-0"]


@pytest.mark.rabbitmq
def test_dead_letters_go_out_over_tls_with_the_ca_file(tls_node) -> None:
    publisher = AmqpDeadLetterPublisher(tls_node.url, "clock.dead", ca_file=tls_node.ca_file)
    letters = [
        DeadLetter(n, 100 + n, "orders", f"order-{n}", "{}", 1_000, None, 2_000, 3, "refused")
        for n in range(3)
    ]
    with tls_node.consumer() as consumer:
        channel = consumer.channel()
        channel.exchange_declare("clock.dead", "topic", durable=True)
        queue = channel.queue_declare("", exclusive=True).method.queue
        channel.queue_bind(queue, "clock.dead", routing_key="#")

        assert publisher.publish_dead(letters, timeout_s=5.0) == [True] * 3
        assert [m for m, _ in _drain(consumer, queue)] == ["100", "101", "102"]


def _untrusted(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if getattr(record, "action", None) == "broker_certificate_untrusted"
    ]


@pytest.mark.rabbitmq
@pytest.mark.parametrize("ca", ["system", "another CA"])
def test_a_node_whose_certificate_is_not_trusted_is_named_in_the_log(
    tls_node, publishers, caplog, tmp_path, ca
) -> None:
    ca_file = "" if ca == "system" else str(make_certificates(tmp_path / "other") / "ca.pem")
    with caplog.at_level(logging.WARNING, logger="clock_server.broker"):
        publisher = _start(publishers, tls_node.url, connect_timeout_s=2.0, ca_file=ca_file)
        (message, *_) = eventually(lambda: _untrusted(caplog), 10.0, 0.05)
        assert publisher.publish_batch(_alarms("untrusted", 1), timeout_s=1.0) == [False]
        assert not publisher.is_healthy()
        letters = [DeadLetter(1, 1, "orders", "o-1", "{}", 1_000, None, 2_000, 3, "refused")]
        dead = AmqpDeadLetterPublisher(tls_node.url, "clock.dead", 2.0, ca_file=ca_file)
        assert dead.publish_dead(letters, timeout_s=2.0) == [False]
    node = f"RabbitMQ at 127.0.0.1:{tls_node.port} was refused"
    assert message.startswith(node) and "certificate is not trusted" in message, message
    assert "CLOCK_AMQP_CA_FILE" in message
    said = _untrusted(caplog)
    assert len(said) >= 2 and all(m.startswith(node) for m in said), "and the dead letters'"


@pytest.mark.rabbitmq
def test_a_client_certificate_the_node_does_not_accept_is_named_in_the_log(
    tls_node, publishers, caplog, tmp_path
) -> None:
    other = make_certificates(tmp_path / "other")  # a client certificate of another CA
    options = {
        "ca_certs": tls_node.ca_file,
        "certfile": str(other / "client.pem"),
        "keyfile": str(other / "client.key"),
    }
    url = f"{tls_node.url}?ssl_options={urllib.parse.quote(str(options))}"
    with caplog.at_level(logging.WARNING, logger="clock_server.broker"):
        publisher = _start(publishers, url, connect_timeout_s=2.0)
        eventually(lambda: _untrusted(caplog), 10.0, 0.05)
        assert not publisher.is_healthy()
        letters = [DeadLetter(1, 1, "orders", "o-1", "{}", 1_000, None, 2_000, 3, "refused")]
        assert AmqpDeadLetterPublisher(url, "clock.dead", 2.0).publish_dead(letters, 2.0) == [False]
    # The node's alert, or (over TLS 1.3, when the connection's end came first) that end.
    refused = (
        f"RabbitMQ at 127.0.0.1:{tls_node.port} did not accept the client certificate of the "
        "URL's ssl_options (TLSV1_ALERT_UNKNOWN_CA): it must be signed by a CA of the node's "
        "ssl_options.cacertfile",
        f"RabbitMQ at 127.0.0.1:{tls_node.port} closed the TLS connection as it was being "
        "opened, as a node does with a client certificate it does not accept",
    )
    said = _untrusted(caplog)
    assert len(said) >= 2, "and the dead letters' publisher says it too"
    assert all(m.startswith(refused) for m in said), said


@pytest.mark.rabbitmq
def test_a_client_certificate_goes_in_the_urls_ssl_options(tls_node, publishers) -> None:
    name = f"clock-cert-{uuid4().hex[:6]}"
    options = {
        "ca_certs": tls_node.ca_file,
        "certfile": str(tls_node.tls / "client.pem"),
        "keyfile": str(tls_node.tls / "client.key"),
    }
    url = f"{tls_node.url}?ssl_options={urllib.parse.quote(str(options))}"
    publisher = _start(publishers, f"{url}, {url}", name=name)  # the commas of two nodes
    assert publisher.wait_healthy(10.0)
    application = f"app_{uuid4().hex[:6]}"
    assert publisher.publish_batch(_alarms(application, 3), timeout_s=10.0) == [True] * 3
    (line,) = [line for line in tls_node.connections() if name in line]
    assert line.startswith("true") and f"CN={CLIENT_NAME}" in line, line


@pytest.mark.rabbitmq
def test_the_sdks_consumer_takes_the_alarms_over_tls_with_the_ca_in_its_url(
    tls_node, publishers
) -> None:
    application = f"app_{uuid4().hex[:6]}"
    ring = {"application": application, "payload": "{}", "target_ring_at": 1_000, "attempt": 1}
    alarms = [
        OutgoingMessage(
            str(n), application, json.dumps({"id": n, "business_id": f"b{n}", **ring}).encode()
        )
        for n in range(1, 4)
    ]
    received: list[str] = []
    options = urllib.parse.quote(str({"ca_certs": tls_node.ca_file}))
    consumer = Consumer(
        f"{tls_node.url}?ssl_options={options}",
        application,
        lambda message: received.append(message.message_id),
    )
    running = threading.Thread(target=consumer.run, daemon=True)
    running.start()
    try:
        publisher = _start(publishers, tls_node.url, ca_file=tls_node.ca_file)
        assert publisher.wait_healthy(10.0)
        assert publisher.publish_batch(alarms, timeout_s=10.0) == [True] * 3
        eventually(lambda: len(received) == 3, 10.0, 0.02, lambda: f"received {received}")
        (line,) = [line for line in tls_node.connections() if consumer.connection_name in line]
    finally:
        consumer.stop()
        running.join(10)
    assert received == ["1", "2", "3"]
    assert line.startswith("true"), f"the consumer's connection is not TLS: {line}"


def test_a_ca_file_that_is_no_pem_of_certificates_is_a_config_error(tmp_path: Path) -> None:
    for content in (None, "not a certificate\n"):
        path = tmp_path / "ca.pem"
        if content is not None:
            path.write_text(content)
        with pytest.raises(ConfigError, match="CLOCK_AMQP_CA_FILE") as caught:
            tls_context(str(path))
        assert caught.value.field == "amqp_ca_file"
    assert tls_context("") is None


def test_the_ca_file_verifies_amqps_nodes_only(tmp_path: Path) -> None:
    make_certificates(tmp_path / "tls")
    context = tls_context(str(tmp_path / "tls" / "ca.pem"))
    assert context is not None and context.check_hostname
    assert context.verify_mode == ssl.CERT_REQUIRED
    node = node_parameters("amqps://u:p@rabbit.example/%2F", "clock", 5.0, context)
    assert node.port == 5671 and node.ssl_options is not None
    assert node.ssl_options.context is context
    plain = node_parameters("amqp://u:p@rabbit.example/%2F", "clock", 5.0, context)
    assert plain.ssl_options is None
    assert context.cert_store_stats()["x509_ca"] == 1  # that CA alone, not the system's
    options = urllib.parse.quote(str({"ca_certs": str(tmp_path / "tls" / "ca.pem")}))
    with pytest.raises(ConfigError, match="CLOCK_AMQP_CA_FILE"):
        node_parameters(f"amqps://u:p@rabbit.example/%2F?ssl_options={options}", "c", 5.0, context)
