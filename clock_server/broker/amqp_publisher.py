"""RabbitMQ publisher with pipelined publisher confirms, driven by a dedicated IO thread."""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import pika
from pika import spec
from pika.adapters.select_connection import IOLoop
from pika.channel import Channel
from pika.exchange_type import ExchangeType

from clock_server.broker.amqp_connection import PublishingConnection
from clock_server.broker.amqp_frames import message_frames, publish_method_frame
from clock_server.broker.amqp_nodes import (
    certificate_refusal,
    node_parameters,
    node_urls,
    tls_context,
)
from clock_server.broker.confirms import Batch, ConfirmTracker, waits_on_s
from clock_server.broker.connection_log import ConnectionLog, node_name
from clock_server.broker.moment_queue import MomentQueue
from clock_server.broker.publisher import PendingBatch, TimedBatch, TimedGroup
from clock_server.model import OutgoingMessage
from clock_server.timesource import Clock

log = logging.getLogger(__name__)

_MIN_BACKOFF_S = 0.5
_MAX_BACKOFF_S = 5.0
_WRITE_BUFFER_BYTES = 256 * 1024
# A timed group's moment is looked at again at least this often (ms of real time): its clock
# may be a test's, which moves by steps, or the wall clock, which NTP may step.
_RECHECK_MS = 100
# With the next moment this close, the acks of the groups sent are read when it comes, not
# as they arrive: at a steady rate, one wake-up of the IO thread per moment instead of two.
_READ_AT_NEXT_MOMENT_MS = 2


def _since_sent(batch: Batch) -> str:
    """How long a batch given up on had been out: a later group of a timed batch is waited
    for with what is left of the batch's publish timeout, which may be nothing."""
    if batch.sent_at is None:
        return "before the publish timeout; they were never sent"
    return f"{time.monotonic() - batch.sent_at:.1f} s after they were sent"


class _PendingAmqpBatch:
    def __init__(self, publisher: AmqpPublisher, batch: Batch) -> None:
        self._publisher = publisher
        self._batch = batch

    def wait(self, timeout_s: float) -> list[bool]:
        batch = self._batch
        if batch.size and not self._settles(timeout_s) and (missing := batch.finish()):
            publisher = self._publisher
            log.warning(
                "%s: %d messages not confirmed %s",
                publisher.name,
                missing,
                _since_sent(batch),
                extra=publisher.fields("publish_unconfirmed"),
            )
        self._publisher._forget(batch)
        observe = self._publisher.observe_confirm
        if observe is not None and (seconds := batch.confirm_seconds()) is not None:
            observe(seconds)
        return batch.outcome()

    def _settles(self, timeout_s: float) -> bool:
        """Whether every confirm comes: within `timeout_s`, or later while the broker keeps
        talking on the connection (`waits_on_s`)."""
        done, started = self._batch.done, time.monotonic()
        wait_s = timeout_s
        while not done.wait(wait_s):
            waited_s = time.monotonic() - started
            wait_s = waits_on_s(timeout_s, waited_s, self._publisher.quiet_s())
            if wait_s <= 0.0:
                return False
        return True

    @property
    def sent_at_ms(self) -> int | None:
        return self._batch.sent_at_ms

    @property
    def too_late(self) -> list[int]:
        return self._batch.too_late

    @property
    def refused(self) -> list[int]:
        return self._batch.refused()


class AmqpPublisher:
    """Publishes to a durable direct exchange; one IO thread owns the pika SelectConnection.

    Callers hand batches to the IO thread with ``add_callback_threadsafe`` and wait for the
    confirms; the connection is re-established with backoff until ``close()``. ``url`` may
    name several nodes of one cluster, comma-separated: a connection that fails or is lost is
    tried again on the next node. ``queue_type`` is the type of the queues it declares,
    ``classic`` or ``quorum``; ``name`` names the connection in the broker's management UI
    and in every log line about it.
    ``observe_confirm`` is given, for each batch the broker confirmed entirely, the seconds
    from sending it to its last confirm. ``ca_file`` (PEM) holds the CA certificates that
    ``amqps://`` nodes are verified with, instead of the system's. ``heartbeat_s`` is the
    AMQP heartbeat asked for when the url names none: a live broker then sends something at
    least every half of it, which is how a publish past its timeout tells a broker behind
    from one that stopped (`confirms.waits_on_s`).
    """

    def __init__(
        self,
        url: str,
        exchange: str = "clock",
        declare_queues: bool = True,
        queue_prefix: str = "clock.",
        connect_timeout_s: float = 5.0,
        queue_type: str = "classic",
        name: str = "clock-publisher",
        observe_confirm: Callable[[float], None] | None = None,
        ca_file: str = "",
        heartbeat_s: int | None = None,
    ) -> None:
        self._name = name
        self._heartbeat_s = heartbeat_s
        self._log = ConnectionLog(name)
        self._lost_reason: BaseException | None = None  # why the channel closed, if it did
        self._ca_file = ca_file
        self.observe_confirm = observe_confirm
        self._url = url
        self._queue_arguments = {"x-queue-type": queue_type} if queue_type != "classic" else None
        self._exchange = exchange
        self._declare_queues = declare_queues
        self._queue_prefix = queue_prefix
        self._connect_timeout_s = connect_timeout_s
        self._nodes: list[pika.URLParameters] = []
        self._node = 0  # the index in _nodes of the node connected or tried last
        self._failed_in_a_row = 0  # connections failed or lost since the channel was last ready
        self._ioloop: IOLoop | None = None
        self._thread: threading.Thread | None = None
        self._connection: PublishingConnection | None = None
        self._channel: Channel | None = None
        self._backoff_s = _MIN_BACKOFF_S
        self._reconnect_timer: Any = None
        self._ready = threading.Event()
        self._blocked = False  # the broker said connection.blocked (a memory or disk alarm)
        self._lock = threading.Lock()
        self._stopping = False
        self._inflight: set[Batch] = set()
        self._confirms = ConfirmTracker()
        self._declared: set[str] = set()
        self._moments: dict[int, MomentQueue] = {}  # by id() of their clock
        self._moment_timer: Any = None

    def start(self) -> None:
        """Start the IO thread, which connects (and keeps reconnecting) in the background."""
        if self._thread is not None:
            raise RuntimeError("AmqpPublisher already started")
        tls = tls_context(self._ca_file)
        self._nodes = [
            node_parameters(url, self._name, self._connect_timeout_s, tls, self._heartbeat_s)
            for url in node_urls(self._url)
        ]
        self._ioloop = IOLoop()
        self._thread = threading.Thread(target=self._run, name=f"amqp-{self._name}", daemon=True)
        self._thread.start()

    def wait_healthy(self, timeout_s: float) -> bool:
        """Block until the channel is ready or ``timeout_s`` passes; returns ``is_healthy()``."""
        return self._ready.wait(timeout_s)

    def is_healthy(self) -> bool:
        """True only while the channel is open, the exchange is declared and the broker has
        not blocked the connection."""
        return self._ready.is_set() and not self._blocked

    def quiet_s(self) -> float | None:
        """Seconds since the broker last sent anything on the current connection; None
        while the publisher is not ready (no channel, a blocked connection)."""
        connection = self._connection
        if connection is None or connection.heard_at is None or not self.is_healthy():
            return None
        return time.monotonic() - connection.heard_at

    def publish_batch(self, messages: Sequence[OutgoingMessage], timeout_s: float) -> list[bool]:
        """Publish all messages, then wait for their confirms; one flag per message, in order."""
        return self.start_batch(messages).wait(timeout_s)

    def start_batch(self, messages: Sequence[OutgoingMessage]) -> PendingBatch:
        """Hand the messages to the IO thread and return at once; wait() gives the outcome."""
        batch = Batch(list(messages))
        if messages and not self._submit(batch):
            batch.finish()
        return _PendingAmqpBatch(self, batch)

    def start_timed(self, groups: Sequence[TimedGroup], clock: Clock) -> list[TimedBatch]:
        """Hand every group to the IO thread at once and return; its timer sends each when its
        moment comes on `clock`: one wake-up of the IO thread per group, none of the caller's."""
        timed = [(group, Batch([], group.size)) for group in groups]
        with self._lock:
            handed = not self._stopping and self._ioloop is not None and self.is_healthy()
            if handed:
                assert self._ioloop is not None
                self._inflight.update(batch for _, batch in timed)
                self._ioloop.add_callback_threadsafe(
                    functools.partial(self._send_all_when_due, timed, clock)
                )
        if not handed:
            for _, batch in timed:
                batch.finish()
        return [_PendingAmqpBatch(self, batch) for _, batch in timed]

    @property
    def name(self) -> str:
        """The connection's name, in RabbitMQ and in the log."""
        return self._name

    def fields(self, action: str) -> dict[str, Any]:
        """The `extra` of a log line about this publisher: the action, the connection's name
        and the node it is on (or was tried last)."""
        return self._log.fields(self._node_name(), action)

    def _node_name(self) -> str:
        if not self._nodes:
            return "-"
        node = self._nodes[self._node]
        return node_name(node.host, node.port)

    def _forget(self, batch: Batch) -> None:
        with self._lock:
            self._inflight.discard(batch)

    def close(self, timeout_s: float = 5.0) -> None:
        """Fail what is still in flight, close the connection and join the IO thread, within
        `timeout_s` however the broker answers (a broker that stopped answering never sends
        the Close-Ok)."""
        with self._lock:
            already_stopping = self._stopping
            self._stopping = True
        if self._thread is None or self._ioloop is None:
            return
        if not already_stopping:
            self._ioloop.add_callback_threadsafe(functools.partial(self._shutdown, timeout_s))
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            log.warning("%s: AMQP publisher thread still running after close()", self._name,
                        extra=self.fields("publisher_close_late"))  # fmt: skip

    def _submit(self, batch: Batch) -> bool:
        with self._lock:
            if self._stopping or self._ioloop is None or not self.is_healthy():
                return False
            self._inflight.add(batch)
            # Under the lock: close() cannot have queued the shutdown, so the loop still runs.
            self._ioloop.add_callback_threadsafe(functools.partial(self._start_batch, batch))
        return True

    # Everything below runs on the IO thread.

    def _run(self) -> None:
        assert self._ioloop is not None
        self._connect()
        while True:
            try:
                self._ioloop.start()
                break
            except Exception:
                log.exception("%s: AMQP publisher IO loop failed; starting a new connection",
                              self._name, extra=self.fields("publisher_loop_error"))  # fmt: skip
                self._abandon_connection()
        self._on_lost()
        self._ioloop.close()

    def _connect(self) -> None:
        self._reconnect_timer = None
        if not self._stopping:
            self._connection = PublishingConnection(
                self._nodes[self._node],
                on_open_callback=self._on_connection_open,
                on_open_error_callback=self._on_open_failed,
                on_close_callback=self._on_disconnected,
                custom_ioloop=self._ioloop,
            )
            self._connection.on_ack = functools.partial(self._on_ack_frame, self._connection)

    def _schedule_reconnect(self) -> None:
        assert self._ioloop is not None
        if self._stopping:
            self._ioloop.stop()
            return
        # Another node that has not failed since the last success is tried at once; the
        # backoff starts when every node in turn has failed.
        self._failed_in_a_row += 1
        if self._failed_in_a_row < len(self._nodes):
            delay = 0.0
        else:
            delay, self._backoff_s = self._backoff_s, min(self._backoff_s * 2, _MAX_BACKOFF_S)
        self._node = (self._node + 1) % len(self._nodes)
        self._log.retrying(self._node_name(), delay)
        self._reconnect_timer = self._ioloop.call_later(delay, self._connect)

    def _abandon_connection(self) -> None:
        connection, self._connection = self._connection, None
        self._on_lost()
        self._log.abandoned()
        if connection is not None and not (connection.is_closing or connection.is_closed):
            with contextlib.suppress(Exception):
                connection.close()
        self._schedule_reconnect()

    def _on_open_failed(self, connection: Any, reason: BaseException | str) -> None:
        self._on_disconnected(connection, reason, opening=True)

    def _on_disconnected(
        self, connection: Any, reason: BaseException | str, opening: bool = False
    ) -> None:
        """Connection refused while opening, or lost once open: either way, try again later."""
        if connection is self._connection:
            self._on_lost()
            refusal = certificate_refusal(self._nodes[self._node], reason, opening)
            lost_reason, self._lost_reason = self._lost_reason, None
            if refusal is not None:  # at every attempt: a setting to fix, not an outage
                self._log.abandoned()
                log.error("%s", refusal, extra=self.fields("broker_certificate_untrusted"))
            elif not self._stopping:
                self._log.failed(self._node_name(), lost_reason or reason)
            self._schedule_reconnect()

    def _on_connection_open(self, connection: PublishingConnection) -> None:
        connection.add_on_connection_blocked_callback(self._on_blocked)
        connection.add_on_connection_unblocked_callback(self._on_unblocked)
        connection.channel(on_open_callback=self._on_channel_open)

    def _on_blocked(self, connection: Any, frame: Any) -> None:
        """The broker stopped reading this connection (a memory or disk alarm): nothing more is
        sent on it until it says unblocked, so what would be sent fails at once, unsettled,
        and waits for the broker instead of for a publish timeout."""
        if connection is self._connection:
            self._blocked = True
            log.warning("%s: RabbitMQ blocked the connection: %s", self._name,
                        frame.method.reason, extra=self.fields("broker_blocked"))  # fmt: skip

    def _on_unblocked(self, connection: Any, _frame: Any) -> None:
        if connection is self._connection and self._blocked:
            self._blocked = False
            log.info("%s: RabbitMQ unblocked the connection", self._name,
                     extra=self.fields("broker_unblocked"))  # fmt: skip

    def _on_channel_open(self, channel: Channel) -> None:
        self._channel = channel
        channel.add_on_close_callback(self._on_channel_closed)
        channel.add_on_return_callback(self._on_return)
        channel.confirm_delivery(
            functools.partial(self._on_confirm, channel), callback=self._on_confirm_mode
        )

    def _on_confirm_mode(self, _frame: Any) -> None:
        assert self._channel is not None
        self._channel.exchange_declare(
            self._exchange, ExchangeType.direct, durable=True, callback=self._on_exchange_declared
        )

    def _on_exchange_declared(self, _frame: Any) -> None:
        self._confirms.reset()
        self._backoff_s = _MIN_BACKOFF_S
        self._failed_in_a_row = 0
        self._ready.set()
        self._log.connected(self._node_name())

    def _on_channel_closed(self, channel: Channel, reason: BaseException) -> None:
        connection = self._connection
        if channel is not self._channel or connection is None:
            return
        self._on_lost()
        if not (self._stopping or connection.is_closing or connection.is_closed):
            # Reconnecting the whole connection gives the backoff a channel reopen would lack;
            # its loss is logged once, with the channel's reason.
            self._lost_reason = reason
            connection.close()

    def _on_lost(self) -> None:
        with self._lock:
            self._ready.clear()
            self._blocked = False
            batches, self._inflight = self._inflight, set()
        self._channel = None
        self._confirms.reset()
        self._declared.clear()
        for batch in batches:
            batch.finish()

    def _shutdown(self, timeout_s: float) -> None:
        assert self._ioloop is not None
        if self._reconnect_timer is not None:
            self._ioloop.remove_timeout(self._reconnect_timer)
        self._on_lost()  # no confirm is awaited any more: their batches fail now
        connection = self._connection
        if connection is None or connection.is_closed:
            self._ioloop.stop()
            return
        self._ioloop.call_later(max(timeout_s - 0.2, 0.0), self._ioloop.stop)
        if not connection.is_closing:
            connection.close()

    def _send_all_when_due(self, timed: list[tuple[TimedGroup, Batch]], clock: Clock) -> None:
        queue = self._moments.get(id(clock))
        if queue is None:
            queue = self._moments[id(clock)] = MomentQueue(clock)
        for group, batch in timed:
            queue.add(group, batch)
        self._on_moment()

    def _on_moment(self) -> None:
        """Send every group whose moment has come, then wait for the next moment: one timer
        for all the groups waiting, never before their moment."""
        assert self._ioloop is not None
        if self._moment_timer is not None:
            self._ioloop.remove_timeout(self._moment_timer)
            self._moment_timer = None
        for key, queue in list(self._moments.items()):
            for group, batch, now_ms in queue.take_due():
                self._send_group(group, batch, now_ms)
            if not queue:
                del self._moments[key]
        waits = (queue.ms_to_next() for queue in self._moments.values())
        wait_ms = min((wait for wait in waits if wait is not None), default=None)
        if wait_ms is not None:
            self._moment_timer = self._ioloop.call_later(
                min(wait_ms, _RECHECK_MS) / 1000, self._on_moment_timer
            )
        if (connection := self._connection) is not None:
            connection.read_waiting()  # the acks that came since the last moment
            connection.watch_reads(wait_ms is None or wait_ms > _READ_AT_NEXT_MOMENT_MS)

    def _on_moment_timer(self) -> None:
        self._moment_timer = None  # fired: pika would count removing it as a cancellation
        self._on_moment()

    def _send_group(self, group: TimedGroup, batch: Batch, now_ms: int) -> None:
        if batch.done.is_set():  # failed meanwhile: the connection was lost
            return
        batch.sent_at_ms = now_ms
        try:
            batch.messages = list(group.make(now_ms))
        except Exception:  # the IO loop goes on for the other groups
            log.exception("%s: making a timed group of %d messages failed", self._name,
                          group.size, extra=self.fields("publish_error"))  # fmt: skip
            batch.finish()
            return
        if late := group.too_late(now_ms):
            batch.withhold(late)
        self._start_batch(batch)

    def _start_batch(self, batch: Batch) -> None:
        try:
            self._declare_then_publish(batch)
        except Exception:
            log.exception("%s: publishing a batch of %d messages failed", self._name,
                          len(batch.messages), extra=self.fields("publish_error"))  # fmt: skip
            batch.finish()

    def _declare_then_publish(self, batch: Batch) -> None:
        if batch.done.is_set():
            return
        if self._channel is None or not self.is_healthy():
            batch.finish()
            return
        missing = {m.application for m in batch.messages} - self._declared
        if not (self._declare_queues and missing):
            self._publish(batch)
            return
        countdown = [len(missing)]

        def bound(application: str, _frame: Any) -> None:
            self._declared.add(application)
            countdown[0] -= 1
            if countdown[0] == 0:
                self._publish(batch)

        # Concurrent batches may declare the same queue twice; declare and bind are idempotent.
        for application in missing:
            self._declare_queue(self._channel, application, functools.partial(bound, application))

    def _declare_queue(self, channel: Channel, application: str, on_bound: Callable) -> None:
        queue = self._queue_prefix + application

        def bind(_frame: Any) -> None:
            # A channel closing meanwhile (a shutdown, a channel error) fails its batches
            # itself (_on_lost); pika would raise here, taken for a failed IO loop.
            if channel.is_open:
                channel.queue_bind(
                    queue, self._exchange, routing_key=application, callback=on_bound
                )

        channel.queue_declare(queue, durable=True, arguments=self._queue_arguments, callback=bind)

    def _publish(self, batch: Batch) -> None:
        channel, connection = self._channel, self._connection
        if batch.done.is_set() or channel is None or not channel.is_open or connection is None:
            batch.finish()
            return
        number = channel.channel_number
        timestamp = int(time.time())
        body_max = connection.params.frame_max - spec.FRAME_HEADER_SIZE - spec.FRAME_END_SIZE
        buffers: list[bytes] = []
        frames: list[bytes] = []
        size = 0
        for message in batch.outgoing:
            method = publish_method_frame(number, self._exchange, message.application)
            frames += message_frames(
                number, method, message.message_id, message.body, timestamp, body_max
            )
            size += len(message.body)
            if size >= _WRITE_BUFFER_BYTES:  # bounded: a partial send copies what is left
                buffers.append(b"".join(frames))
                frames, size = [], 0
        if frames:
            buffers.append(b"".join(frames))
        # A few buffers per batch instead of three per message halved the engine's time in a
        # burst (see amqp_frames); sent at once, not at the IO loop's next turn.
        connection.send_frames(buffers)
        self._confirms.sent(batch)

    def _on_return(self, channel: Channel, method: Any, properties: Any, _body: bytes) -> None:
        if channel is self._channel:
            log.warning("%s: broker returned %s: %s", self._name, properties.message_id,
                        method.reply_text, extra=self.fields("publish_returned"))  # fmt: skip
            self._confirms.returned(properties.message_id)

    def _on_ack_frame(
        self, connection: PublishingConnection, channel_number: int, tag: int, multiple: bool
    ) -> bool:
        """An ack `connection` read itself; False if it is not of this publisher's channel
        (pika then reads it, and _on_confirm passes over a channel it no longer uses)."""
        channel = self._channel
        if channel is None or channel.connection is not connection:
            return False
        if channel.channel_number != channel_number:
            return False
        self._settle(tag, multiple, acked=True)
        return True

    def _on_confirm(self, channel: Channel, frame: Any) -> None:
        method = frame.method
        if channel is not self._channel:
            return
        acked = isinstance(method, pika.spec.Basic.Ack)
        tag = method.delivery_tag
        if not acked:
            scope = "up to" if method.multiple else "at"
            log.warning("%s: broker nacked the messages %s delivery tag %d", self._name, scope,
                        tag, extra=self.fields("publish_nacked"))  # fmt: skip
        self._settle(tag, method.multiple, acked)

    def _settle(self, tag: int, multiple: bool, acked: bool) -> None:
        self._confirms.confirm(tag, multiple, acked)
