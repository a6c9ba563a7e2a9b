"""The publisher's own frames are byte for byte what pika would send for the same publish, and
the acks it reads itself are read as pika reads them."""

from __future__ import annotations

import math

import pika
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pika import frame, spec

from clock_server.broker.amqp_connection import leading_acks
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


def _ack(channel: int, tag: int, multiple: bool) -> bytes:
    return frame.Method(channel, spec.Basic.Ack(delivery_tag=tag, multiple=multiple)).marshal()


@given(
    acks=st.lists(
        st.tuples(st.integers(1, 65_535), st.integers(0, 2**64 - 1), st.booleans()), max_size=5
    ),
    cut=st.integers(0, 20),
)
def test_leading_acks_reads_pikas_ack_frames_up_to_a_partial_one(acks, cut):
    data = b"".join(_ack(*ack) for ack in acks)
    partial = _ack(1, 99, False)[:cut]  # a frame the socket has not given whole yet

    assert leading_acks(data + partial) == acks


def test_leading_acks_stops_at_the_first_frame_that_is_not_an_ack():
    nack = frame.Method(1, spec.Basic.Nack(delivery_tag=3)).marshal()
    returned = frame.Method(1, spec.Basic.Return(312, "NO_ROUTE", "clock", "orders")).marshal()
    heartbeat = frame.Heartbeat().marshal()

    assert leading_acks(_ack(1, 1, False) + nack + _ack(1, 4, False)) == [(1, 1, False)]
    assert leading_acks(returned + _ack(1, 2, False)) == []
    assert leading_acks(_ack(2, 7, True) + heartbeat) == [(2, 7, True)]
