"""Verify the webhooks clock sends: the Standard Webhooks signature, then the JSON body.
Needs the ``webhooks`` extra (standardwebhooks)."""

from __future__ import annotations

import json
from collections.abc import Mapping

from standardwebhooks import Webhook
from standardwebhooks import WebhookVerificationError as _StandardVerificationError
from standardwebhooks.webhooks import EmptyWebhookSecretError

from .errors import WebhookVerificationError
from .models import AlarmMessage


def verify(secret: str, headers: Mapping[str, str], body: bytes | str) -> AlarmMessage:
    """The message of a webhook whose ``webhook-id``, ``webhook-timestamp`` and
    ``webhook-signature`` headers match ``secret`` (the application's ``whsec_...`` secret).

    ``body`` is the request body exactly as received, before any JSON parsing. The header
    names may be in any case. A timestamp more than five minutes from now is refused, so a
    captured request cannot be replayed later; ``webhook-id`` is the same on every attempt
    at one message, for spotting a delivery repeated within those minutes: it is the
    message's ``message_id``. ``redelivered`` is True from the second attempt on.

    Raises WebhookVerificationError when the webhook does not verify or its body is not a
    ring message, and ValueError when ``secret`` is not a base64 secret.
    """
    try:
        webhook = Webhook(secret)
    except (ValueError, EmptyWebhookSecretError):
        raise ValueError("the secret is not a whsec_ base64 secret") from None
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    try:
        webhook.verify(body, lowered, json_parse=False)
    except _StandardVerificationError as error:
        raise WebhookVerificationError(str(error), code="invalid_webhook") from None
    except ValueError as error:
        # A malformed signature header or a body that is not UTF-8.
        raise WebhookVerificationError(
            f"malformed webhook: {error}", code="invalid_webhook"
        ) from None
    try:
        message = json.loads(body)
    except ValueError:
        raise WebhookVerificationError("the body is not JSON", code="invalid_webhook") from None
    if not isinstance(message, dict):
        raise WebhookVerificationError("the body is not a JSON object", code="invalid_webhook")
    try:
        attempt = message.get("attempt")
        redelivered = isinstance(attempt, int) and attempt > 1
        return AlarmMessage.from_body(
            message, message_id=lowered.get("webhook-id"), redelivered=redelivered
        )
    except ValueError as error:
        raise WebhookVerificationError(
            f"not a ring message: {error}", code="invalid_webhook"
        ) from None
