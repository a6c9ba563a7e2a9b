"""The publisher's pika connection, with its two per-batch steps taken off pika's generic path.

At one alarm per batch (a steady rate, or another application's few alarms beside a
backlog) the publisher's IO thread paid, for each batch, a second turn of its IO loop to
send (pika's transport only turns on a writability watcher when handed data, and sends at
the next poll) and, for each confirm, pika's frame decoder and callback manager (finding 48:
together about half of the IO thread's interpreter time). Here a batch is sent at once when
nothing is queued before it, and the Basic.Ack frames at the start of what the socket gave
are read with struct and settled directly. Everything else (a nack, a return, a partial
frame, a frame of another channel) still goes through pika, in the order it came.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from typing import Any

import pika
from pika import spec
from pika.adapters.utils.io_services_utils import _AsyncPlaintextTransport

# frame type, channel, payload size, class id, method id, delivery tag, bits, frame end
_ACK_FRAME = struct.Struct(">BHIHHQBB")
_ACK_PAYLOAD_SIZE = 13
_ACK_CLASS, _ACK_METHOD = divmod(spec.Basic.Ack.INDEX, 0x10000)

# (channel number, delivery tag, multiple) -> whether the ack was settled; False hands the
# frame, and every frame after it in that read, to pika.
AckHandler = Callable[[int, int, bool], bool]


def leading_acks(data: bytes) -> list[tuple[int, int, bool]]:
    """The whole Basic.Ack frames at the start of `data`, as (channel, delivery tag,
    multiple), up to the first frame of another kind or one cut short."""
    acks = []
    last_start = len(data) - _ACK_FRAME.size
    offset = 0
    while offset <= last_start:
        kind, channel, size, class_id, method_id, tag, bits, end = _ACK_FRAME.unpack_from(
            data, offset
        )
        if (kind, size, class_id, method_id, end) != (
            spec.FRAME_METHOD,
            _ACK_PAYLOAD_SIZE,
            _ACK_CLASS,
            _ACK_METHOD,
            spec.FRAME_END,
        ):
            break
        acks.append((channel, tag, bool(bits & 1)))
        offset += _ACK_FRAME.size
    return acks


class PublishingConnection(pika.SelectConnection):
    """A SelectConnection that sends marshaled frames at once and settles acks itself.

    ``on_ack`` is given each Basic.Ack read at the start of a read from the socket; while
    it is None, or when it returns False, pika reads the frames as it always does.
    """

    on_ack: AckHandler | None = None

    def send_frames(self, buffers: Sequence[bytes]) -> None:
        """Hand the buffers to the transport and, on a plain TCP connection, send them now
        instead of at the IO loop's next turn (what is not sent stays queued for it)."""
        # Private pika calls, kept on purpose (pika is pinned below 2): the first is what
        # channel.basic_publish ends in, the second what the IO loop calls once the socket
        # is writable; it sends what the socket takes and keeps the watcher for the rest.
        # tests/test_amqp_publisher.py fails if either changes.
        self._output_marshaled_frames(buffers)
        transport: Any = self._transport
        if isinstance(transport, _AsyncPlaintextTransport) and transport.get_write_buffer_size():
            transport._on_socket_writable()

    def _on_data_available(self, data_in: bytes) -> None:
        on_ack = self.on_ack
        if on_ack is not None and not self._frame_buffer:  # at a frame boundary
            used = 0
            for channel, tag, multiple in leading_acks(data_in):
                if not on_ack(channel, tag, multiple):
                    break
                used += _ACK_FRAME.size
            if used:
                # What pika's own frame reader counts (the heartbeat checker reads bytes_received).
                self.bytes_received += used
                self.frames_received += used // _ACK_FRAME.size
                data_in = data_in[used:]
                if not data_in:
                    return
        super()._on_data_available(data_in)
