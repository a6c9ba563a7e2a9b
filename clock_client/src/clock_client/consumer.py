"""Consume rung alarms of one application from RabbitMQ and hand them to a handler. Needs the
``amqp`` extra (pika)."""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import pika
import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel
from pika.spec import Basic, BasicProperties

from .backoff import Backoff
from .models import AlarmMessage, Handler

logger = logging.getLogger(__name__)

# Upper bound on how long run() takes to notice a stop requested by a signal: the signal
# handler only sets a flag, because pika's thread-safe wake-up takes locks that the
# interrupted main thread may be holding.
_POLL_SECONDS = 0.5
_BODY_LOG_CHARS = 200


# A connection that could not be made, or was lost (also found by an ack or a reject on it):
# the node, or another, may serve again.
_NODE_LOST = (
    pika.exceptions.AMQPConnectionError,
    pika.exceptions.ConnectionClosed,
    pika.exceptions.StreamLostError,
    pika.exceptions.ConnectionWrongStateError,
    pika.exceptions.ChannelWrongStateError,
)
# Refused for the credentials or the virtual host: trying again cannot change that. pika
# raises these for any disconnection during the handshake (a broker restarting, too), and
# names the broker's reply only in their text: 403 ACCESS_REFUSED or 530 NOT_ALLOWED.
_PROBABLY_REFUSED = (
    pika.exceptions.ProbableAuthenticationError,
    pika.exceptions.ProbableAccessDeniedError,
    pika.exceptions.AuthenticationError,
)
_REFUSALS = ("ACCESS_REFUSED", "NOT_ALLOWED")
_BACKOFF_SLICE_S = 0.1  # how soon a stop ends a wait between reconnections


class Consumer:
    """Delivers the alarms rung for ``application`` to ``handler``, one at a time.

    Consumes the durable queue ``queue_prefix + application``. ``amqp_url`` may name several
    nodes of one RabbitMQ cluster, comma-separated. When a connection cannot be made or is
    lost (the broker restarts, a node goes away, an operator closes it), the consumer
    connects again, to the next node if there are several, after a wait drawn at random up
    to ``reconnect_first_s``, doubling with each failure in a row up to ``reconnect_cap_s``;
    after ``max_reconnects`` failures in a row (None: never) run() raises. With
    ``declare=True`` it first declares the durable direct ``exchange``, the queue and their
    binding (routing key = application), so it may start before the first alarm rings.
    Its connection is named ``connection_name`` (default ``clock-consumer <application>``)
    in RabbitMQ's management page and ``rabbitmqctl list_connections``, unless the URL's
    ``client_properties`` name it.

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
        *,
        reconnect_first_s: float = 0.5,
        reconnect_cap_s: float = 30.0,
        max_reconnects: int | None = None,
        connection_name: str | None = None,
    ) -> None:
        if prefetch < 1:
            raise ValueError("prefetch must be at least 1")
        if max_reconnects is not None and max_reconnects < 0:
            raise ValueError("max_reconnects must be None or at least 0")
        self.amqp_url = amqp_url
        self.application = application
        self.handler = handler
        self.prefetch = prefetch
        self.queue = f"{queue_prefix}{application}"
        self.exchange = exchange
        self.declare = declare
        self.connection_name = connection_name or f"clock-consumer {application}"
        # as the server's CLOCK_QUEUE_TYPE: a queue declared with another type is refused
        self.queue_arguments = {"x-queue-type": queue_type} if queue_type != "classic" else None
        self._stopping = threading.Event()
        self._lock = threading.Lock()  # guards _connection and _started
        self._connection: pika.BlockingConnection | None = None
        self._started = False
        self._cancelled_by_broker = False
        self._backoff = Backoff(reconnect_first_s, reconnect_cap_s)
        self.max_reconnects = max_reconnects

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

        Raises RuntimeError when called twice, and pika's AMQPError when the broker refuses
        the credentials or the virtual host, refuses a declaration (a queue of another type),
        cancels the consumer (e.g. the queue was deleted), or after ``max_reconnects``
        failed connections in a row; unacked messages are then redelivered to the next
        consumer.
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
        """Consume on the first node that answers; when its connection fails or is lost, wait
        the backoff and connect again, to the next node if there are several."""
        nodes = [url.strip() for url in self.amqp_url.split(",") if url.strip()]
        node = 0
        while not self._stopping.is_set():
            try:
                parameters = pika.URLParameters(nodes[node])
                named = {"connection_name": self.connection_name}
                parameters.client_properties = {**named, **(parameters.client_properties or {})}
                connection = pika.BlockingConnection(parameters)
                self._consume_on(connection)
                return
            except _NODE_LOST as error:
                if _refused(error) or (
                    self.max_reconnects is not None
                    and self._backoff.failures >= self.max_reconnects
                ):
                    raise
                node = (node + 1) % len(nodes)
                wait_s = self._backoff.next_s()
                logger.warning("RabbitMQ connection lost or refused (%r); consuming %s again on "
                               "node %d of %d in %.2f s", error, self.queue, node + 1, len(nodes),
                               wait_s)  # fmt: skip
                self._wait(wait_s)

    def _wait(self, seconds: float) -> None:
        """Sleep `seconds`, or until a stop. Sliced rather than an Event wait: a signal handler
        sets the stop, and must not need a lock the interrupted main thread may hold."""
        deadline = time.monotonic() + seconds
        while not self._stopping.is_set() and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, _BACKOFF_SLICE_S))

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
        self._backoff.reset()
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


def _refused(error: Exception) -> bool:
    """Whether the broker refused the credentials or the virtual host."""
    return isinstance(error, _PROBABLY_REFUSED) and any(
        refusal in str(error) for refusal in _REFUSALS
    )


def _parse(body: bytes, message_id: str | None, redelivered: bool) -> AlarmMessage:
    try:
        data: Any = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    return AlarmMessage.from_body(data, message_id=message_id, redelivered=redelivered)
