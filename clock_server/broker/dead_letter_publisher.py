"""Publishing dead alarms to the dead-letter exchange (the interface is
broker.publisher.DeadLetterPublisher).

Dead letters are few, and each batch of them goes out on a connection of its own, opened by
the relay's thread and closed when the batch is confirmed: a blocking channel in confirm mode
(one round trip per message, about 1,000 a second on a local broker) needs no IO thread,
keeps no idle connection to watch, and a broker that was down is simply tried again next
time.

The exchange is a durable topic exchange, routed by application: an operator binds `#` for
every application (a new one included) or an application's name for its own. Nothing else
is declared; messages are not `mandatory`, so while no queue is bound the broker confirms
and drops them (the alarms stay `dead` in the database, to be found and re-driven).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence

import orjson
import pika
from pika.adapters.blocking_connection import BlockingChannel
from pika.exchange_type import ExchangeType

from clock_server.broker.amqp_nodes import (
    certificate_refusal,
    heartbeat_within,
    node_parameters,
    node_urls,
    tls_context,
)
from clock_server.broker.connection_log import ConnectionLog, describe, node_name
from clock_server.model import DeadLetter

log = logging.getLogger(__name__)

CONTENT_TYPE = "application/json"


class AmqpDeadLetterPublisher:
    """Publishes dead letters to `exchange`; `url` may name several nodes of one cluster,
    comma-separated, tried in turn; `ca_file` (PEM) holds the CA certificates its amqps://
    nodes are verified with, read here. Use it from one thread at a time."""

    def __init__(
        self,
        url: str,
        exchange: str,
        connect_timeout_s: float = 5.0,
        name: str = "clock-dead-letters",
        ca_file: str = "",
    ) -> None:
        self.exchange = exchange
        self._tls = tls_context(ca_file)
        self._url = url
        self._connect_timeout_s = connect_timeout_s
        self._name = name
        self._log = ConnectionLog(name)
        self._node = "-"  # the node connected to last, host:port

    def publish_dead(self, letters: Sequence[DeadLetter], timeout_s: float) -> list[bool]:
        """Publish the letters in order, each confirmed before the next; the flags of those
        after a failure are False (they are tried again later, in the same order)."""
        outcome = [False] * len(letters)
        if not letters:
            return outcome
        connection = self._connect(timeout_s)
        if connection is None:
            return outcome
        try:
            channel = connection.channel()
            channel.confirm_delivery()
            channel.exchange_declare(self.exchange, ExchangeType.topic, durable=True)
            for index, letter in enumerate(letters):
                _publish(channel, self.exchange, letter)
                outcome[index] = True
        except (pika.exceptions.AMQPError, OSError) as error:
            cause = describe(error)
            log.warning("%s: dead letters not confirmed: %s", self._name, cause,
                        extra=self._log.fields(self._node, "dead_letter_publish_failed",
                                               reason=cause))  # fmt: skip
        finally:
            with contextlib.suppress(pika.exceptions.AMQPError, OSError):
                connection.close()
        return outcome

    def _connect(self, timeout_s: float) -> pika.BlockingConnection | None:
        """A connection to the first node that takes one; each node that does not is a
        failure of this connection (one line when it goes down, one when it is back)."""
        for url in node_urls(self._url):
            params = self._parameters(url, timeout_s)
            node = node_name(params.host, params.port)
            try:
                connection = pika.BlockingConnection(params)
            except (pika.exceptions.AMQPError, OSError) as error:
                if (refusal := certificate_refusal(params, error)) is not None:
                    self._log.abandoned()
                    log.error(
                        "%s", refusal, extra=self._log.fields(node, "broker_certificate_untrusted")
                    )
                else:
                    self._log.failed(node, error)
                continue
            self._node = node
            self._log.connected(node)
            return connection
        return None

    def _parameters(self, url: str, timeout_s: float) -> pika.URLParameters:
        params = node_parameters(url, self._name, self._connect_timeout_s, self._tls)
        # A broker that stops answering shows as missed heartbeats; one that blocks
        # publishers (a resource alarm) as this timeout.
        params.heartbeat = heartbeat_within(timeout_s)
        params.blocked_connection_timeout = timeout_s
        return params


def _publish(channel: BlockingChannel, exchange: str, letter: DeadLetter) -> None:
    properties = pika.BasicProperties(
        content_type=CONTENT_TYPE,
        delivery_mode=pika.DeliveryMode.Persistent,
        message_id=str(letter.alarm_id),
        timestamp=int(time.time()),
        headers={
            "x-clock-error": letter.error,
            "x-clock-attempts": letter.attempts,
            "x-clock-died-at": letter.died_at,
        },
    )
    channel.basic_publish(exchange, letter.application, dead_letter_body(letter), properties)


def dead_letter_body(letter: DeadLetter) -> bytes:
    """The message body: the alarm, when and after how many attempts it died, and why."""
    return orjson.dumps(
        {
            "id": letter.alarm_id,
            "application": letter.application,
            "business_id": letter.business_id,
            "payload": letter.payload,
            "target_ring_at": letter.target_ring_at,
            "latest_ring_at": letter.latest_ring_at,
            "died_at": letter.died_at,
            "attempts": letter.attempts,
            "error": letter.error,
        }
    )
