"""The registry of applications over HTTP: /v1/applications, for admin tokens only.

Every route answers an application as its settings (`ApplicationPolicy.to_json`), whether
it is `registered`, and its live `counts`. An application that has alarms but no row in the
registry is listed too, with null settings and `"registered": false`.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from flask import Blueprint, Response, jsonify, request

from clock_server.api import application_validation, validation
from clock_server.api.access import authorize_admin, authorize_secrets, reads_only
from clock_server.api.answers.applications import WebhookSecret
from clock_server.api.routes import optional_json_body, services
from clock_server.api.services import Services
from clock_server.delivery.secrets import new_secret
from clock_server.errors import PayloadTooLarge
from clock_server.model import WEBHOOK, ApplicationCounts, ApplicationPolicy

applications = Blueprint("applications", __name__)

# Ten settings fit in a few hundred bytes; this is room enough for any way of writing them.
BODY_MAX_BYTES = 16_384


@applications.get("/v1/applications")
def list_applications() -> Response:
    svc = _admin()
    with_counts = _counts_asked()
    registered = {policy.name: policy for policy in svc.applications.all()}
    if not with_counts:  # counting takes seconds over millions of alarms; naming does not
        names = sorted(registered.keys() | set(svc.applications.names_with_alarms()))
        return jsonify(
            {"applications": [_application_json(registered.get(n), n, None) for n in names]}
        )
    counts = svc.applications.counts(svc.clock.now_ms())
    names = sorted(registered.keys() | counts.keys())
    found = [
        _application_json(registered.get(name), name, counts.get(name, ApplicationCounts()))
        for name in names
    ]
    return jsonify({"applications": found})


@applications.get("/v1/applications/<application>")
def get_application(application: str) -> Response:
    svc = _admin()
    validation.check_application(application)
    policy = svc.applications.get(application)
    return jsonify(_with_counts(policy))


@applications.put("/v1/applications/<application>")
def replace_application(application: str) -> tuple[Response, int]:
    svc = _admin()
    validation.check_application(application)
    allow_private = svc.settings.webhook_allow_private
    policy = application_validation.replacement(application, _json_body(), allow_private)
    stored, added = svc.applications.put(policy, svc.clock.now_ms())
    stored = _with_secret_if_webhook(stored)
    svc.policies.remember(stored)
    return jsonify(_with_counts(stored)), 201 if added else 200


@applications.patch("/v1/applications/<application>")
def change_application(application: str) -> Response:
    svc = _admin()
    validation.check_application(application)
    allow_private = svc.settings.webhook_allow_private
    changes = application_validation.changes(_json_body(), allow_private)

    def check(policy: ApplicationPolicy) -> None:
        application_validation.check_policy(policy, set(changes))

    stored = svc.applications.update(application, changes, svc.clock.now_ms(), check)
    stored = _with_secret_if_webhook(stored)
    svc.policies.remember(stored)
    return jsonify(_with_counts(stored))


@applications.get("/v1/applications/<application>/webhook-secret")
def get_webhook_secret(application: str) -> Response:
    """The secret that signs the application's webhooks (null before it has one), for an
    admin token that may write."""
    authorize_secrets("read a webhook signing secret")
    svc = services()
    validation.check_application(application)
    return jsonify(_secret_json(svc.applications.get(application), svc.clock.now_ms()))


@applications.post("/v1/applications/<application>/webhook-secret")
def rotate_webhook_secret(application: str) -> Response:
    """A new secret for the application's webhooks. The one it replaces goes on signing beside
    it for `overlap_s` (a day unless given), so that receivers can move over without
    rejecting a call; every server signs with the new one within CLOCK_APPLICATION_REFRESH_S."""
    svc = _admin()
    validation.check_application(application)
    overlap_ms = application_validation.rotation_overlap_ms(
        optional_json_body(BODY_MAX_BYTES, "16 KiB")
    )
    now_ms = svc.clock.now_ms()
    until_ms = now_ms + overlap_ms if overlap_ms > 0 else None
    stored = svc.applications.set_secret(
        application, new_secret(), now_ms, previous_until_ms=until_ms
    )
    svc.policies.remember(stored)
    return jsonify(_secret_json(stored, now_ms))


def _secret_json(policy: ApplicationPolicy, now_ms: int) -> WebhookSecret:
    """The secret, and until when the one it replaced still signs (null: it does not)."""
    until = policy.webhook_previous_secret_until
    overlapping = len(policy.signing_secrets(now_ms)) > 1
    return WebhookSecret(
        application=policy.name,
        webhook_secret=policy.webhook_secret,
        previous_secret_signs_until=until if overlapping else None,
    )


def _with_secret_if_webhook(policy: ApplicationPolicy) -> ApplicationPolicy:
    """A webhook application gets its first secret when it first takes the channel."""
    if policy.channel != WEBHOOK or policy.webhook_secret is not None:
        return policy
    svc = services()
    return svc.applications.set_secret(
        policy.name, new_secret(), svc.clock.now_ms(), only_if_unset=True
    )


def _admin() -> Services:
    """The services, once the caller is known to hold an admin token (any caller when
    authentication is off). Checked before anything else: a token of some applications
    learns nothing of the registry, not even whether a name is well-formed."""
    authorize_admin("read or change the applications")
    return services()


def _with_counts(policy: ApplicationPolicy) -> dict[str, Any]:
    """The application with its live counts, unless the request says counts=false."""
    if not _counts_asked():
        return _application_json(policy, policy.name, None)
    svc = services()
    counts = svc.applications.counts(svc.clock.now_ms(), policy.name)
    return _application_json(policy, policy.name, counts.get(policy.name, ApplicationCounts()))


def _counts_asked() -> bool:
    """`counts=false` leaves the live counts out: they take seconds over millions of alarms."""
    return validation.flag(request.args.get("counts", "true"), "counts")


def _application_json(
    policy: ApplicationPolicy | None, name: str, counts: ApplicationCounts | None
) -> dict[str, Any]:
    if policy is None:  # alarms, but no row in the registry
        data = ApplicationPolicy(name=name).to_json()
        data.update(created_at=None, updated_at=None)
    else:
        data = policy.to_json()
    if reads_only() and data.get("webhook_url"):
        data["webhook_url"] = masked_url(data["webhook_url"])
    counted = None if counts is None else counts.to_json()
    return {**data, "registered": policy is not None, "counts": counted}


def masked_url(url: str) -> str:
    """What a read-only token sees of a webhook URL: its scheme, host and port. Its path and
    query, where a receiver's URL often carries a credential, read "***"."""
    parts = urlsplit(url)
    rest = parts.path not in ("", "/") or parts.query or parts.fragment
    return f"{parts.scheme}://{parts.netloc}/***" if rest else url


def _json_body() -> dict[str, Any]:
    """The body as a JSON object, read only when it is within BODY_MAX_BYTES."""
    length = request.content_length
    if length is not None and length > BODY_MAX_BYTES:
        raise PayloadTooLarge(
            f"the request body is {length} bytes, over the limit of {BODY_MAX_BYTES} for the "
            "settings of an application"
        )
    request.max_content_length = BODY_MAX_BYTES  # a body without a length is cut off there
    return validation.parse_json(request.get_data(cache=False))
