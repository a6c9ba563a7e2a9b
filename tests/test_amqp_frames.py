"""The publisher's own frames are byte for byte what pika would send for the same publish."""

from __future__ import annotations

import math

import pika
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pika import frame, spec

from clock_server.broker.amqp_frames import message_frames, publish_method_frame


def pika_frames(
    channel: int, exchange: str, key: str, message_id: str, body: bytes, timestamp: int, limit: int
) -> list[bytes]:
    """What pika.connection.Connection._send_message marshals for basic_publish."""
    properties = pika.BasicProperties(
        delivery_mode=2, message_id=message_id, content_type="application/json", timestamp=timestamp
    )
    method = spec.Basic.Publish(exchange=exchange, routing_key=key, mandatory=True)
    frames = [
        frame.Method(channel, method).marshal(),
        frame.Header(channel, len(body), properties).marshal(),
    ]
    for chunk in range(math.ceil(len(body) / limit)):
        frames.append(frame.Body(channel, body[chunk * limit : (chunk + 1) * limit]).marshal())
    return frames


names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=60)


@given(
    channel=st.integers(1, 65_535),
    exchange=names,
    key=names,
    message_id=st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60),
    body=st.binary(max_size=3_000),
    timestamp=st.integers(0, 2**63 - 1),
    limit=st.sampled_from([1, 7, 1_000, 131_064]),
)
def test_frames_equal_pikas(channel, exchange, key, message_id, body, timestamp, limit):
    method = publish_method_frame(channel, exchange, key)
    ours = message_frames(channel, method, message_id, body, timestamp, limit)
    assert ours == pika_frames(channel, exchange, key, message_id, body, timestamp, limit)


def test_an_empty_body_has_no_body_frame():
    ours = message_frames(1, publish_method_frame(1, "clock", "orders"), "7", b"", 0, 100)
    assert len(ours) == 2


def test_a_message_id_over_255_bytes_is_refused():
    with pytest.raises(ValueError, match="255 bytes"):
        message_frames(1, publish_method_frame(1, "clock", "orders"), "é" * 128, b"{}", 0, 100)
