"""The pull channel over HTTP: a pull application's consumers lease its due messages
(`POST /v1/applications/{application}/pull`, a long poll) and ack them by id
(`POST /v1/applications/{application}/ack`). A token that covers the application may do
both; its bodies are validated by api/pull_validation.py."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import cast

from flask import Blueprint, Response, jsonify

from clock_server.api.access import authorize
from clock_server.api.answers.messages import Acked, Message, Pulled, PulledMessage
from clock_server.api.pull_validation import AckBody, PullBody, validated
from clock_server.api.routes import json_body, optional_json_body, services
from clock_server.api.services import Services
from clock_server.api.validation import check_application
from clock_server.errors import Conflict
from clock_server.metrics import Metrics
from clock_server.model import PULL, ApplicationPolicy
from clock_server.store.pulls import Leased, RetryLimits, SqlPullQueue

PULL_BODY_MAX_BYTES = 1_024
# 1,000 ids of up to 19 digits, quoted and separated, with room to spare.
ACK_BODY_MAX_BYTES = 64 * 1_024

pulls = Blueprint("pulls", __name__)


@pulls.post("/v1/applications/<application>/pull")
def pull(application: str) -> Response:
    """Lease up to `max` of the application's ready messages; when none is ready, look again
    every CLOCK_PULL_POLL_MS until `wait_s` has passed, and answer as soon as any is leased.
    No database connection is held while waiting; a bounded number of pulls wait at once
    (api.long_polls), the next gets 429 with Retry-After."""
    svc = services()
    check_application(application)
    authorize(application)
    body = validated(PullBody, optional_json_body(PULL_BODY_MAX_BYTES, "1 KiB"))
    policy = _pull_policy(svc, application)
    queue = SqlPullQueue(svc.store, dead_letters=bool(svc.settings.dead_letter_exchange))
    visibility_s = policy.pull_visibility_s
    if visibility_s is None:
        visibility_s = svc.settings.pull_visibility_s
    retry_max = policy.retry_max if policy.retry_max is not None else svc.settings.retry_max
    lease = functools.partial(
        queue.lease, application, body.max, visibility_ms=int(visibility_s * 1000),
        retry=RetryLimits(retry_max), max_bytes=svc.settings.page_max_bytes,
    )  # fmt: skip
    now_ms = svc.clock.now_ms()
    leased = lease(now_ms=now_ms)
    _count(svc.metrics, application, leased, now_ms)
    if not leased.messages and body.wait_s > 0:
        with svc.long_polls.waiting(application):
            leased = _wait_for_messages(svc, application, lease, body.wait_s)
    answer = Pulled(
        messages=[
            PulledMessage(
                id=str(message.alarm_id),
                attempt=message.attempt,
                leased_until=message.leased_until,
                message=cast(Message, message.body),
            )
            for message in leased.messages
        ]
    )
    return jsonify(answer)


@pulls.post("/v1/applications/<application>/ack")
def ack(application: str) -> Response:
    """Mark rung the application's pull messages among `ids`, whether or not their lease has
    ended; any other id is answered in `not_acked` and changes nothing. On any channel, so
    that messages leased before a change of channel can still be acked."""
    svc = services()
    check_application(application)
    authorize(application)
    body = validated(AckBody, json_body(ACK_BODY_MAX_BYTES, "64 KiB"))
    queue = SqlPullQueue(svc.store, dead_letters=bool(svc.settings.dead_letter_exchange))
    acked, not_acked = queue.ack(application, [int(i) for i in body.ids], svc.clock.now_ms())
    Metrics.count(svc.metrics.rung, {application: len(acked)})
    return jsonify(Acked(acked=[str(i) for i in acked], not_acked=[str(i) for i in not_acked]))


def _wait_for_messages(
    svc: Services, application: str, lease: Callable[..., Leased], wait_s: float
) -> Leased:
    """Lease again every CLOCK_PULL_POLL_MS until something is leased or `wait_s` passed."""
    give_up_at = time.monotonic() + wait_s
    while True:
        left_s = give_up_at - time.monotonic()
        if left_s <= 0:
            return Leased()
        time.sleep(min(svc.settings.pull_poll_ms / 1000, left_s))
        now_ms = svc.clock.now_ms()
        leased = lease(now_ms=now_ms)
        _count(svc.metrics, application, leased, now_ms)
        if leased.messages:
            return leased


def _pull_policy(svc: Services, application: str) -> ApplicationPolicy:
    """The application's policy; 409 unless it takes the pull channel (`status` says which
    channel it takes)."""
    policy = svc.policies.policy(application)
    if policy.channel != PULL:
        raise Conflict(
            f"application {application!r} takes the {policy.channel} channel, not pull: an "
            f"admin token sets its channel (PATCH /v1/applications/{application})",
            status=policy.channel,
        )
    return policy


def _count(metrics: Metrics, application: str, leased: Leased, now_ms: int) -> None:
    """Count what a lease did: messages leased, and what it found expired, dead or retried."""
    Metrics.count(metrics.pulled, {application: len(leased.messages)})
    metrics.count_pull_lapses(now_ms, leased.expired, leased.dead, leased.retried)
