"""The publisher's pika connection, with its per-batch steps taken off pika's generic path.

At one alarm per batch (a steady rate, or another application's few alarms beside a
backlog) the publisher's IO thread paid, for each batch, a second turn of its IO loop to
send (pika's transport only turns on a writability watcher when handed data, and sends at
the next poll) and, for each confirm, pika's frame decoder and callback manager (finding 48:
together about half of the IO thread's interpreter time). Here a batch goes straight to the
socket when nothing is queued before it (pika's transport keeps what the socket did not
take), the socket is read with one call per readiness instead of reads until one fails, and
the Basic.Ack frames at the start of what it gave are read with struct and settled
directly. Everything else (a nack, a return, a partial frame, a frame of another channel,
the end of the stream, an error) still goes through pika, in the order it came.

Over TLS (amqps) pika's own transport does the reads and writes, and only the acks are
read here. This leans on private parts of pika on purpose, every one of them listed in
pika_private.py: setup.cfg pins pika to the version they were checked against, and
tests/test_pika_private_names.py fails, naming it, if one of them changes.
"""

from __future__ import annotations

import errno
import struct
import time
from collections.abc import Callable, Sequence
from typing import Any

import pika
from pika import spec
from pika.adapters.utils.io_services_utils import _AsyncPlaintextTransport

# frame type, channel, payload size, class id, method id, delivery tag, bits, frame end
_ACK_FRAME = struct.Struct(">BHIHHQBB")
_ACK_PAYLOAD_SIZE = 13
_ACK_CLASS, _ACK_METHOD = divmod(spec.Basic.Ack.INDEX, 0x10000)
_RECV_BYTES = 65536
_READS_PER_TURN = 4  # then the IO loop's other work has a turn, as pika's reader allows
_TRY_AGAIN = (errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR)

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
    ``heard_at`` is when the last read brought anything (plain TCP and TLS alike).
    """

    on_ack: AckHandler | None = None
    _watching_reads = True
    heard_at: float | None = None  # time.monotonic() when the broker last sent anything

    def send_frames(self, buffers: Sequence[bytes]) -> None:
        """Send the buffers now, on a plain TCP connection with nothing queued before them,
        instead of at the IO loop's next turn; what the socket does not take is queued with
        pika's transport, which sends it when the socket is writable."""
        transport = self._plain_transport()
        if transport is not None and not transport.get_write_buffer_size():
            data = buffers[0] if len(buffers) == 1 else b"".join(buffers)
            try:
                sent = transport._sock.send(data)
            except OSError:  # pika's own write, below, meets the error again and handles it
                sent = 0
            self.bytes_sent += sent
            if sent == len(data):
                self.frames_sent += len(buffers)
                return
            buffers = [data[sent:]]
        # What channel.basic_publish ends in, then what the IO loop calls once the socket is
        # writable (it sends what the socket takes and keeps the watcher for the rest).
        self._output_marshaled_frames(buffers)
        plain: Any = self._transport
        if isinstance(plain, _AsyncPlaintextTransport) and plain.get_write_buffer_size():
            plain._on_socket_writable()

    def _proto_connection_made(self, transport: Any) -> None:
        super()._proto_connection_made(transport)
        if self._plain_transport() is not None:  # take over the reads the transport asked for
            self._nbio.set_reader(transport._sock.fileno(), self._on_socket_readable)

    def _plain_transport(self) -> Any:
        transport: Any = self._transport
        if type(transport) is _AsyncPlaintextTransport and (
            transport._state == transport._STATE_ACTIVE
        ):
            return transport
        return None

    def watch_reads(self, watch: bool) -> None:
        """Whether the IO loop reads the socket as soon as data comes (the default); while
        it does not, `read_waiting` reads it."""
        transport = self._plain_transport()
        if transport is None or watch == self._watching_reads:
            return
        self._watching_reads = watch
        if watch:
            self._nbio.set_reader(transport._sock.fileno(), self._on_socket_readable)
        else:
            self._nbio.remove_reader(transport._sock.fileno())

    def read_waiting(self) -> None:
        """Read what has come while the IO loop was not watching, without waiting."""
        if not self._watching_reads:
            self._on_socket_readable()

    def _on_socket_readable(self) -> None:
        for _ in range(_READS_PER_TURN):
            transport = self._plain_transport()
            if transport is None:
                return
            try:
                data = transport._sock.recv(_RECV_BYTES)
            except OSError as error:
                if error.errno in _TRY_AGAIN:
                    return
                data = b""
            if not data:  # the end of the stream, or an error: pika reads again and handles it
                transport._on_socket_readable()
                return
            self._on_data_available(data)
            if len(data) < _RECV_BYTES:  # nothing more was waiting
                return

    def _on_data_available(self, data_in: bytes) -> None:
        self.heard_at = time.monotonic()
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
