"""The policies behind the labels an operator filters by: which applications get a series of
their own, and how a webhook call ended."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from clock_server.delivery.sender_port import WebhookOutcome, call_outcome
from clock_server.metrics import OTHER, application_label

REGISTERED = {"orders", "other"}.__contains__


@pytest.mark.parametrize(
    ("application", "registered", "label"),
    [
        ("orders", REGISTERED, "orders"),  # registered: its own name
        ("billing", REGISTERED, OTHER),  # not registered: shares one series
        ("orders-2", REGISTERED, OTHER),  # a name like a registered one is another
        ("other", REGISTERED, "other"),  # registered as "other": in the shared series too
        ("billing", None, "billing"),  # no registry known: every name its own
    ],
)
def test_the_application_label(
    application: str, registered: Callable[[str], bool] | None, label: str
) -> None:
    assert application_label(application, registered) == label


def _failed(error: str) -> WebhookOutcome:
    return WebhookOutcome(ok=False, status=None, error=error, retry_after_ms=None)


@pytest.mark.parametrize(
    ("outcome", "label"),
    [
        (WebhookOutcome(True, 200, None, None), "2xx"),
        (WebhookOutcome(True, 204, None, None), "2xx"),
        (WebhookOutcome(False, 302, "HTTP 302", None), "3xx"),
        (WebhookOutcome(False, 404, "HTTP 404", None), "4xx"),
        (WebhookOutcome(False, 429, "HTTP 429", 30_000), "4xx"),
        (WebhookOutcome(False, 503, "HTTP 503", None), "5xx"),
        (_failed("timed out after 10 s (connecting)"), "timeout"),
        (_failed("timed out after 0.5 s (reading the body)"), "timeout"),  # a 2xx too late
        (_failed("connection refused"), "refused"),
        (_failed("refused: 10.0.0.1 is a private address"), "refused"),
        (_failed("no such host: example.invalid"), "error"),
        (_failed("connection lost: Remote end closed connection"), "error"),
        (_failed("TLS error: certificate verify failed"), "error"),
        (_failed("answer over 64 KiB"), "error"),
        (_failed("no webhook_url or secret configured"), "error"),
        (WebhookOutcome(False, None, None, None), "error"),
    ],
)
def test_the_outcome_of_a_call(outcome: WebhookOutcome, label: str) -> None:
    assert call_outcome(outcome) == label
