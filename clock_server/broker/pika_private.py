"""The private parts of pika that clock uses, in one place.

The publisher's connection (`amqp_connection.py`) sends a batch to the socket at once and
reads the Basic.Ack frames itself; to do so it leans on these names, none of them pika's
public interface:

- ``io_services_utils._AsyncPlaintextTransport``: pika's plain TCP transport; the
  connection takes the socket over only when the transport is of this class (over TLS,
  pika's own transport does all the reads and writes);
- ``_AsyncPlaintextTransport._sock``: its socket, sent to and read from directly;
- ``_AsyncPlaintextTransport._state`` and ``_AsyncPlaintextTransport._STATE_ACTIVE``:
  whether the transport still runs;
- ``_AsyncPlaintextTransport._on_socket_readable()``: handed the end of the stream or a
  socket error, which pika then handles as it would;
- ``_AsyncPlaintextTransport._on_socket_writable()``: sends what pika's transport holds
  when a batch did not fit the socket;
- ``SelectConnection._output_marshaled_frames(marshaled_frames)``: what ``basic_publish``
  ends in, given frames already encoded;
- ``SelectConnection._proto_connection_made(transport)``: overridden, to take the socket's
  reads over once the transport exists;
- ``SelectConnection._on_data_available(data_in)``: overridden, to settle the acks at the
  start of what was read before pika decodes the rest;
- ``SelectConnection._transport``, ``SelectConnection._nbio`` (the IO loop's reader
  registrations) and ``SelectConnection._frame_buffer`` (empty at a frame boundary).

Any pika release may change them: setup.cfg pins pika to the one version they were
checked against (`PIKA_VERSION`), and tests/test_pika_private_names.py checks each name
below against the pika installed, and that clock_server/broker uses no other private
name of pika.
"""

from __future__ import annotations

from typing import NamedTuple

PIKA_VERSION = "1.4.4"

CLASS = "class"
METHOD = "method"  # called
OVERRIDE = "override"  # a method clock's subclass replaces, calling pika's through super()
CLASS_ATTRIBUTE = "class attribute"
ATTRIBUTE = "attribute"  # set on each instance


class PikaName(NamedTuple):
    """One private name of pika: `owner` is the module (``pika.x.y``) or the class
    (``pika.x.y:Class``) where clock finds it; `signature` is a method's parameters as
    ``inspect.signature`` shows them, without annotations."""

    owner: str
    name: str
    kind: str
    signature: str | None = None

    @property
    def label(self) -> str:
        """How the docs name it: ``Class.name``, or ``module.Class`` for a class."""
        module, _, qualname = self.owner.partition(":")
        return f"{qualname or module.rsplit('.', 1)[-1]}.{self.name}"


_TRANSPORT = "pika.adapters.utils.io_services_utils:_AsyncPlaintextTransport"
_CONNECTION = "pika.adapters.select_connection:SelectConnection"

PRIVATE_NAMES = (
    PikaName("pika.adapters.utils.io_services_utils", "_AsyncPlaintextTransport", CLASS),
    PikaName(_TRANSPORT, "_sock", ATTRIBUTE),
    PikaName(_TRANSPORT, "_state", ATTRIBUTE),
    PikaName(_TRANSPORT, "_STATE_ACTIVE", CLASS_ATTRIBUTE),
    PikaName(_TRANSPORT, "_on_socket_readable", METHOD, "(self)"),
    PikaName(_TRANSPORT, "_on_socket_writable", METHOD, "(self)"),
    PikaName(_CONNECTION, "_output_marshaled_frames", METHOD, "(self, marshaled_frames)"),
    PikaName(_CONNECTION, "_proto_connection_made", OVERRIDE, "(self, transport)"),
    PikaName(_CONNECTION, "_on_data_available", OVERRIDE, "(self, data_in)"),
    PikaName(_CONNECTION, "_transport", ATTRIBUTE),
    PikaName(_CONNECTION, "_nbio", ATTRIBUTE),
    PikaName(_CONNECTION, "_frame_buffer", ATTRIBUTE),
)
