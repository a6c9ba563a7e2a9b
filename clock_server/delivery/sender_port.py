"""What the engine needs to deliver a ring by webhook, independent of any HTTP library."""

from __future__ import annotations

from typing import NamedTuple, Protocol


class WebhookRequest(NamedTuple):
    """One attempt at delivering one message to one application's URL."""

    url: str
    secrets: tuple[str, ...]  # "whsec_" + base64 each; the body is signed with every one
    message_id: str  # sent as webhook-id, the same on every attempt
    body: bytes  # JSON, UTF-8
    attempt: int  # 1 for the first try; sent as the clock-attempt header
    timeout_s: float  # the call's deadline, from the start of send to the answer's last byte
    max_connections: int  # this application's bound on calls in flight: its pool's size
    sent_at_s: float  # the webhook-timestamp to sign with, epoch seconds from the caller's Clock


class WebhookOutcome(NamedTuple):
    """How one attempt ended."""

    ok: bool  # a 2xx answer arrived in full, body and all, within the timeout
    status: int | None  # the HTTP status, None when no answer came
    error: str | None  # None when ok; else short and readable: "HTTP 500", "connection refused"
    retry_after_ms: int | None  # a 429's or 503's Retry-After, capped at one hour; else None


# The start of a failed call's `error` when its deadline passed, and those of a connection
# or an address refused: webhook_sender writes them, `call_outcome` reads them.
TIMED_OUT = "timed out"
REFUSED = ("connection refused", "refused:")


def call_outcome(outcome: WebhookOutcome) -> str:
    """How a call ended, in a few values: 2xx, 3xx, 4xx, 5xx for an answer; with no answer,
    timeout (the call's deadline passed), refused (the connection, or an address not
    allowed) or error (any other failure)."""
    if outcome.status is not None:
        return f"{outcome.status // 100}xx"
    error = outcome.error or ""
    if error.startswith(TIMED_OUT):
        return "timeout"
    if error.startswith(REFUSED):
        return "refused"
    return "error"


class WebhookSender(Protocol):
    """Makes one signed POST per call; safe to call from many threads at once."""

    def send(self, request: WebhookRequest) -> WebhookOutcome:
        """POST the body once, without retrying or following redirects, and block until the
        answer has arrived in full or the timeout passes, whichever comes first. Never raises
        for network or HTTP trouble: that is an outcome with ok False."""
        ...

    def close(self) -> None:
        """Close every pooled connection and end the calls in flight; later sends fail."""
        ...
