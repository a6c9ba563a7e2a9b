"""An alarm's message as the broker and the webhooks send it."""

from __future__ import annotations

import orjson

from clock_server.model import OutgoingMessage, RingRow, ring_message


def message_of(row: RingRow, published_at: int) -> OutgoingMessage:
    """The message of `row`, sent at `published_at`: its body is JSON (`ring_message`), and
    its id the alarm's, stable across attempts, so that consumers deduplicate by it."""
    return OutgoingMessage(
        message_id=row.delivery_id,
        application=row.application,
        # orjson: a tenth of the json module's time per body, which showed in the burst profile.
        body=orjson.dumps(ring_message(row, published_at)),
    )
