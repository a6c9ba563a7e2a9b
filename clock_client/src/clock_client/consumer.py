"""Consume rung alarms of one application from RabbitMQ and hand them to a handler."""

from __future__ import annotations

import json
import logging
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import pika
import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel
from pika.spec import Basic, BasicProperties

from .models import AlarmMessage

logger = logging.getLogger(__name__)

Handler = Callable[[AlarmMessage], object]

# Upper bound on how long run() takes to notice a stop requested by a signal: the signal
# handler only sets a flag, because pika's thread-safe wake-up takes locks that the
# interrupted main thread may be holding.
_POLL_SECONDS = 0.5
_BODY_LOG_CHARS = 200


# A connection that could not be made, or was lost: another node may serve.
_NODE_LOST = (
    pika.exceptions.AMQPConnectionError,
    pika.exceptions.ConnectionClosed,
    pika.exceptions.StreamLostError,
)


class Consumer:
    """Delivers the alarms rung for ``application`` to ``handler``, one at a time.

    Consumes the durable queue ``queue_prefix + application``. ``amqp_url`` may name several
    nodes of one RabbitMQ cluster, comma-separated: when the node in use goes away, the
    consumer goes on with the next one. With ``declare=True``
    it first declares the durable direct ``exchange``, the queue and their binding
    (routing key = application), so it may start before the first alarm rings.

    ``handler(message)`` gets an AlarmMessage. When it returns, the message is acked;
    when it raises, the exception is logged and the message is requeued (redelivered
    later with ``redelivered=True``, so a handler that always fails retries forever). A
    body that is not a valid ring message is logged and dropped, never requeued.
    Delivery is at least once: deduplicate on ``message.message_id``.

    ``run()`` blocks until ``stop()`` (callable from any thread) or, when run in the
    main thread, SIGINT/SIGTERM. A Consumer runs once; it owns one connection that is
    used only by the thread calling run().
    """

    def __init__(
        self,
        amqp_url: str,
        application: str,
        handler: Handler,
        prefetch: int = 100,
        queue_prefix: str = "clock.",
        exchange: str = "clock",
        declare: bool = True,
        queue_type: str = "classic",
    ) -> None:
        if prefetch < 1:
            raise ValueError("prefetch must be at least 1")
        self.amqp_url = amqp_url
        self.application = application
        self.handler = handler
        self.prefetch = prefetch
        self.queue = f"{queue_prefix}{application}"
        self.exchange = exchange
        self.declare = declare
        # as the server's CLOCK_QUEUE_TYPE: a queue declared with another type is refused
        self.queue_arguments = {"x-queue-type": queue_type} if queue_type != "classic" else None
        self._stopping = threading.Event()
        self._lock = threading.Lock()  # guards _connection and _started
        self._connection: pika.BlockingConnection | None = None
        self._started = False
        self._cancelled_by_broker = False

    @property
    def stopping(self) -> bool:
        """True once a stop was requested."""
        return self._stopping.is_set()

    def stop(self) -> None:
        """Ask run() to return; safe from any thread and before run() starts.

        The message being handled is finished (and acked or requeued) first; messages
        prefetched but not yet handled go back to the queue.
        """
        self._stopping.set()
        with self._lock:
            connection = self._connection
            if connection is None or not connection.is_open:
                return
            try:
                # Wakes the loop at once; it checks the flag after this no-op runs.
                connection.add_callback_threadsafe(lambda: None)
            except Exception:  # closed in between: run() is ending anyway
                logger.debug("stop: connection already closed", exc_info=True)

    def run(self) -> None:
        """Consume until stopped, then close the channel and connection.

        Raises RuntimeError when called twice, and pika's AMQPError when no node can be
        reached, when the connection is lost and there is no other node to go on with, or
        when the broker cancels the consumer (e.g. the queue was deleted); unacked messages
        are then redelivered to the next consumer.
        """
        with self._lock:
            if self._started:
                raise RuntimeError("a Consumer runs once; create a new one")
            self._started = True
        restore = self._install_signal_handlers()
        try:
            self._run_on_nodes()
        finally:
            restore()
        logger.info("consumer of %s stopped", self.queue)

    def _run_on_nodes(self) -> None:
        """Consume on the first node that answers; when its connection fails or is lost, go
        on with the next. Raises once every node in turn has failed (at once, with one)."""
        nodes = [url.strip() for url in self.amqp_url.split(",") if url.strip()]
        node, failed_in_a_row = 0, 0
        while not self._stopping.is_set():
            try:
                connection = pika.BlockingConnection(pika.URLParameters(nodes[node]))
                failed_in_a_row = 0
                self._consume_on(connection)
                return
            except _NODE_LOST as error:
                failed_in_a_row += 1
                if failed_in_a_row >= len(nodes):
                    raise
                node = (node + 1) % len(nodes)
                logger.warning("RabbitMQ node lost (%s); consuming %s on node %d of %d",
                               error, self.queue, node + 1, len(nodes))  # fmt: skip

    def _consume_on(self, connection: pika.BlockingConnection) -> None:
        with self._lock:
            self._connection = connection
        try:
            self._consume(connection)
        finally:
            with self._lock:
                self._connection = None
            if connection.is_open:
                connection.close()

    def _consume(self, connection: pika.BlockingConnection) -> None:
        channel = connection.channel()
        channel.basic_qos(prefetch_count=self.prefetch)
        if self.declare:
            channel.exchange_declare(self.exchange, exchange_type="direct", durable=True)
            channel.queue_declare(self.queue, durable=True, arguments=self.queue_arguments)
            channel.queue_bind(self.queue, self.exchange, routing_key=self.application)
        channel.add_on_cancel_callback(self._on_broker_cancel)
        channel.basic_consume(self.queue, self._on_message)
        logger.info("consuming %s", self.queue)
        while not self._stopping.is_set() and not self._cancelled_by_broker:
            connection.process_data_events(time_limit=_POLL_SECONDS)
        if channel.is_open:
            # Cancels the consumer and returns prefetched, unhandled messages to the queue.
            channel.close()
        if self._cancelled_by_broker:
            raise pika.exceptions.ConsumerCancelled(
                f"broker cancelled the consumer of {self.queue}"
            )

    def _on_broker_cancel(self, method_frame: Any) -> None:
        # The queue was deleted (or the node holding it went away): nothing more will come.
        logger.error("broker cancelled the consumer of %s", self.queue)
        self._cancelled_by_broker = True

    def _on_message(
        self,
        channel: BlockingChannel,
        method: Basic.Deliver,
        properties: BasicProperties,
        body: bytes,
    ) -> None:
        tag = method.delivery_tag
        if self._stopping.is_set():
            # Prefetched messages keep being dispatched after a stop; hand them back.
            channel.basic_reject(tag, requeue=True)
            return
        try:
            message = _parse(body, properties.message_id, bool(method.redelivered))
        except ValueError as exc:
            logger.error(
                "dropping malformed message %s on %s: %s; body=%r",
                properties.message_id,
                self.queue,
                exc,
                body[:_BODY_LOG_CHARS],
            )
            channel.basic_reject(tag, requeue=False)
            return
        try:
            self.handler(message)
        except Exception:
            logger.exception(
                "handler failed for alarm %s (%s/%s); requeueing",
                message.message_id,
                message.application,
                message.business_id,
            )
            channel.basic_nack(tag, requeue=True)
            return
        channel.basic_ack(tag)

    def _install_signal_handlers(self) -> Callable[[], None]:
        """Route SIGINT/SIGTERM to a stop when in the main thread; returns the undo."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None

        def on_signal(signum: int, frame: FrameType | None) -> None:
            logger.info("received %s, stopping", signal.Signals(signum).name)
            self._stopping.set()

        previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}

        def restore() -> None:
            for sig, handler in previous.items():
                # None means a handler not installed from Python; the default is closest.
                signal.signal(sig, signal.SIG_DFL if handler is None else handler)

        return restore


def _parse(body: bytes, message_id: str | None, redelivered: bool) -> AlarmMessage:
    try:
        data: Any = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    return AlarmMessage.from_body(data, message_id=message_id, redelivered=redelivered)
