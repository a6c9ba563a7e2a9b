"""The AMQP 0-9-1 frames of a ring message, written out in bulk.

pika encodes every publish through generic property and frame objects and hands the
transport three buffers per message, each sent with its own system call; that was nearly
half of the engine's time in a burst. Ring messages all have the same shape (persistent,
JSON, a message id and a timestamp), so their frames are built here with struct and a
whole batch goes out as one buffer. The bytes are exactly what pika's own encoder makes
for the same publish (tests/test_amqp_frames.py compares them).
"""

from __future__ import annotations

import functools
import struct

from pika import frame, spec

_FRAME = struct.Struct(">BHI")  # type, channel, payload size
_HEADER_START = struct.Struct(">HxxQH")  # class id, weight (0), body size, property flags
_TIMESTAMP = struct.Struct(">Q")
_END = bytes([spec.FRAME_END])
_CONTENT_TYPE = b"application/json"
_FLAGS = (
    spec.BasicProperties.FLAG_CONTENT_TYPE
    | spec.BasicProperties.FLAG_DELIVERY_MODE
    | spec.BasicProperties.FLAG_MESSAGE_ID
    | spec.BasicProperties.FLAG_TIMESTAMP
)
# content_type then delivery_mode, in the order AMQP lists the properties
_FIXED_PROPERTIES = (
    bytes([len(_CONTENT_TYPE)]) + _CONTENT_TYPE + bytes([spec.PERSISTENT_DELIVERY_MODE])
)


@functools.lru_cache(maxsize=4096)
def publish_method_frame(channel_number: int, exchange: str, routing_key: str) -> bytes:
    """Basic.Publish with mandatory set: the same bytes for every message of one application."""
    method = spec.Basic.Publish(exchange=exchange, routing_key=routing_key, mandatory=True)
    return frame.Method(channel_number, method).marshal()


def message_frames(
    channel_number: int,
    method_frame: bytes,
    message_id: str,
    body: bytes,
    timestamp: int,
    body_max_length: int,
) -> list[bytes]:
    """The method, content header and body frames of one persistent JSON message."""
    encoded_id = message_id.encode()
    if len(encoded_id) > 255:
        raise ValueError(f"message id longer than 255 bytes: {message_id[:40]!r}...")
    properties = (
        _HEADER_START.pack(spec.BasicProperties.INDEX, len(body), _FLAGS)
        + _FIXED_PROPERTIES
        + bytes([len(encoded_id)])
        + encoded_id
        + _TIMESTAMP.pack(timestamp)
    )
    frames = [
        method_frame,
        _FRAME.pack(spec.FRAME_HEADER, channel_number, len(properties)) + properties + _END,
    ]
    for start in range(0, len(body), body_max_length):
        fragment = body[start : start + body_max_length]
        frames.append(_FRAME.pack(spec.FRAME_BODY, channel_number, len(fragment)) + fragment + _END)
    return frames
