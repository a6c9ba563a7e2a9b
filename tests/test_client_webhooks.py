"""clock_client.webhooks.verify: a webhook signed as the server signs it verifies and gives its
AlarmMessage; anything altered, stale or unsigned does not."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from standardwebhooks import Webhook

import clock_client
from clock_client import AlarmMessage
from clock_client.errors import ClockError, WebhookVerificationError
from clock_client.webhooks import verify

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
OTHER_SECRET = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
RING = {
    "id": 17,
    "application": "billing",
    "business_id": "inv-1",
    "payload": '{"n": 1}',
    "target_ring_at": 1_795_370_000_000,
    "attempt": 1,
    "published_at": 1_795_370_000_001,
}
BODY = json.dumps(RING).encode()
MESSAGE = AlarmMessage(
    id=17,
    application="billing",
    business_id="inv-1",
    payload='{"n": 1}',
    target_ring_at=1_795_370_000_000,
    attempt=1,
    message_id="17",
    redelivered=False,
    published_at=1_795_370_000_001,
)


def signed(
    body: bytes = BODY, secret: str = SECRET, at: datetime | None = None, webhook_id: str = "17"
) -> dict[str, str]:
    when = at or datetime.now(UTC)
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(int(when.timestamp())),
        "webhook-signature": Webhook(secret).sign(webhook_id, when, body.decode()),
    }


def test_a_signed_webhook_gives_its_message():
    assert verify(SECRET, signed(), BODY) == MESSAGE
    assert verify(SECRET, signed(), BODY.decode()) == MESSAGE


def test_the_message_id_is_the_webhook_id_and_a_later_attempt_is_redelivered():
    body = json.dumps(RING | {"attempt": 3}).encode()
    message = verify(SECRET, signed(body, webhook_id="17-r1"), body)
    assert (message.message_id, message.attempt, message.redelivered) == ("17-r1", 3, True)


def test_a_count_triggered_alarm_s_message_says_what_made_it_ring():
    body = json.dumps(RING | {"trigger": "count", "count": 3}).encode()
    message = verify(SECRET, signed(body), body)
    assert (message.trigger, message.count) == ("count", 3)
    assert (MESSAGE.trigger, MESSAGE.count) == (None, None)


def test_a_signed_body_that_is_not_a_ring_message_does_not_verify():
    body = json.dumps({k: v for k, v in RING.items() if k != "business_id"}).encode()
    with pytest.raises(WebhookVerificationError, match="business_id"):
        verify(SECRET, signed(body), body)


def test_header_names_may_be_in_any_case():
    headers = {name.title(): value for name, value in signed().items()}
    assert verify(SECRET, headers, BODY) == MESSAGE


def test_one_of_several_signatures_may_match():
    headers = signed()
    headers["webhook-signature"] = "v1,AAAA " + headers["webhook-signature"]
    assert verify(SECRET, headers, BODY) == MESSAGE


@pytest.mark.parametrize(
    "tamper",
    [
        lambda headers, body: (signed(secret=OTHER_SECRET), body),
        lambda headers, body: (headers, body.replace(b"inv-1", b"inv-2")),
        lambda headers, body: ({**headers, "webhook-id": "18"}, body),
        lambda headers, body: ({**headers, "webhook-signature": "v1"}, body),
        lambda headers, body: ({**headers, "webhook-signature": "v1,not base64!"}, body),
        lambda headers, body: ({**headers, "webhook-timestamp": "soon"}, body),
        lambda headers, body: ({k: v for k, v in headers.items() if k != "webhook-id"}, body),
        lambda headers, body: (signed(at=datetime.now(UTC) - timedelta(minutes=10)), body),
        lambda headers, body: (signed(at=datetime.now(UTC) + timedelta(minutes=10)), body),
        lambda headers, body: ({}, body),
    ],
    ids=[
        "other-secret",
        "body-changed",
        "id-changed",
        "signature-without-value",
        "signature-not-base64",
        "timestamp-not-a-number",
        "id-missing",
        "too-old",
        "too-new",
        "no-headers",
    ],
)
def test_anything_altered_does_not_verify(tamper):
    headers, body = tamper(signed(), BODY)
    with pytest.raises(WebhookVerificationError):
        verify(SECRET, headers, body)


def test_the_body_must_be_a_json_object():
    for body in (b"not json", b"[1, 2]"):
        with pytest.raises(WebhookVerificationError, match="JSON"):
            verify(SECRET, signed(body), body)


def test_a_body_that_is_not_utf8_does_not_verify():
    with pytest.raises(WebhookVerificationError):
        verify(SECRET, signed(), b"\xff\xfe" + BODY)


def test_a_malformed_secret_is_a_value_error():
    with pytest.raises(ValueError, match="whsec_"):
        verify("whsec_", signed(), BODY)


def test_the_error_is_a_clock_error_and_verify_is_exported():
    assert issubclass(WebhookVerificationError, ClockError)
    assert clock_client.verify_webhook is verify
    with pytest.raises(WebhookVerificationError) as failed:
        verify(OTHER_SECRET, signed(), BODY)
    assert failed.value.code == "invalid_webhook"
