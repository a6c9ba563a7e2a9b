"""The call clock makes to a webhook application's URL (delivery/webhook_sender.py), as an
OpenAPI 3.1 webhook: its body, its Standard Webhooks headers, and what each answer means."""

from __future__ import annotations

from typing import Any

from clock_server.api.answers.messages import Message
from clock_server.api.openapi.operation import Answer, Operation


def _header(name: str, pattern: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "header",
        "required": True,
        "description": description,
        "schema": {"type": "string", "pattern": pattern},
    }


_HEADERS = (
    _header(
        "webhook-id",
        r"^[0-9]{1,19}(-r[0-9]+)?$",
        "the alarm's id, the same on every attempt (deduplicate by it); after an operator's "
        "n-th re-drive, <id>-r<n>, a delivery of its own",
    ),
    _header(
        "webhook-timestamp",
        r"^[0-9]+$",
        "when the call was signed, in whole seconds since the epoch; a receiver refuses one "
        "too far from its own clock (the SDK's verify_webhook: five minutes)",
    ),
    _header(
        "webhook-signature",
        r"^v1,[A-Za-z0-9+/]+={0,2}( v1,[A-Za-z0-9+/]+={0,2})*$",
        "v1,<base64 HMAC-SHA256 of '<webhook-id>.<webhook-timestamp>.<body>'> with the "
        "application's secret (the bytes after whsec_), per the Standard Webhooks "
        "specification; during a rotation's overlap a second one, with the secret it "
        "replaced, after a space: either one verifies the call",
    ),
    _header("clock-attempt", r"^[1-9][0-9]*$", "this attempt's number: 1 on the first try"),
)

_RETRY_AFTER = {
    "Retry-After": {
        "description": "whole seconds or an HTTP date; clock waits at least that long (at "
        "most an hour), or its backoff when that is longer",
        "schema": {"type": "string"},
    }
}
_FAILED = (
    "a failed attempt, kept in the alarm's history: it is tried again after its backoff, "
    "and is dead after the last retry (retry_max); past latest_ring_at it is expired"
)

WEBHOOKS = {
    "alarm": Operation(
        "post", "alarm", "ringWebhook", "webhooks",
        "An alarm rings: clock POSTs its message to the application's webhook_url",
        description="At the alarm's moment, never before, the engine POSTs the message, "
        "signed. The whole call (connecting, sending, the status line, the headers and the "
        "whole answer) must fit in webhook_timeout_s, or the connection is closed and the "
        "attempt failed. At most webhook_max_in_flight calls to one application run at once. "
        "The same message may come more than once: deduplicate by webhook-id.",
        parameters=_HEADERS,
        body=Message,
        answers={
            "2XX": Answer(
                "delivered: the alarm is rung, once the answer's body (at most 64 KiB, read "
                "and dropped) has arrived within the timeout"
            ),
            429: Answer(f"not now: {_FAILED}", headers=_RETRY_AFTER),
            503: Answer(f"not now: {_FAILED}", headers=_RETRY_AFTER),
            "default": Answer(
                f"any other status, a redirect (not followed) included, or no whole answer "
                f"within the timeout: {_FAILED}"
            ),
        },
        security=[],
    ),
}  # fmt: skip
