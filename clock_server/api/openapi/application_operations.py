"""The operations on applications, as data: the registry (api/application_routes.py, admin
tokens) and the pull channel (api/pull_routes.py, a token of the application)."""

from __future__ import annotations

from clock_server.api.answers.applications import Application, ApplicationList, WebhookSecret
from clock_server.api.answers.errors import ChannelConflict, Error
from clock_server.api.answers.messages import Acked, Pulled
from clock_server.api.application_validation import (
    ApplicationChanges,
    ApplicationSettings,
    SecretRotation,
)
from clock_server.api.openapi import parameters, rules
from clock_server.api.openapi.operation import HEADERS, Answer, Operation
from clock_server.api.pull_validation import AckBody, PullBody

ONE = "/v1/applications/{application}"
SECRET = f"{ONE}/webhook-secret"

OPERATIONS = [
    Operation(
        "get", "/v1/applications", "listApplications", "applications",
        "Every application: the registered ones and any other with alarms, by name, with "
        "live counts (admin token)",
        parameters=(parameters.COUNTS,),
        answers={200: Answer("the applications", ApplicationList)},
        errors=(400, 401, 403, 503),
        admin=True,
    ),
    Operation(
        "get", ONE, "getApplication", "applications",
        "Read a registered application's settings and counts (admin token)",
        answers={200: Answer("the application", Application)},
        errors=(400, 401, 403, 404, 503),
        admin=True,
    ),
    Operation(
        "put", ONE, "replaceApplication", "applications",
        "Set every setting of an application, registering it if needed; a setting left out "
        "is null (admin token)",
        body=ApplicationSettings,
        answers={
            201: Answer("registered now", Application),
            200: Answer("was registered; every setting replaced", Application),
        },
        errors=(400, 401, 403, 413, 503),
        admin=True,
        rules=rules.REPLACE_APPLICATION,
    ),
    Operation(
        "patch", ONE, "updateApplication", "applications",
        "Change some settings of a registered application; null clears one (admin token)",
        body=ApplicationChanges,
        answers={200: Answer("changed", Application)},
        errors=(400, 401, 403, 404, 413, 503),
        admin=True,
        rules=rules.UPDATE_APPLICATION,
    ),
    Operation(
        "get", SECRET, "getWebhookSecret", "applications",
        "The secret that signs the application's webhooks (admin token)",
        answers={200: Answer("the secret", WebhookSecret)},
        errors=(400, 401, 403, 404, 503),
        admin=True,
    ),
    Operation(
        "post", SECRET, "rotateWebhookSecret", "applications",
        "Replace the secret that signs the application's webhooks; every server signs with "
        "the new one within CLOCK_APPLICATION_REFRESH_S, and with the old one too for "
        "overlap_s (admin token)",
        body=SecretRotation,
        body_required=False,
        answers={200: Answer("the new secret", WebhookSecret)},
        errors=(400, 401, 403, 404, 503),
        admin=True,
    ),
    Operation(
        "post", f"{ONE}/pull", "pullMessages", "pull",
        "Lease up to max of a pull application's due messages for its visibility timeout "
        "(pull_visibility_s); waits up to wait_s for one when none is ready. A message not "
        "acked in time is leased again with the next attempt, and dead once retry_max more "
        "leases have ended unacked",
        body=PullBody,
        body_required=False,
        answers={
            200: Answer("the messages leased, maybe none", Pulled),
            409: Answer("the application does not take the pull channel", ChannelConflict),
            429: Answer(
                "as many pulls wait in this web process as it lets wait at once (a quarter "
                "of CLOCK_HTTP_THREADS, half of that for one application); pull again after "
                "Retry-After",
                Error,
                headers=HEADERS[429],
            ),
        },
        errors=(400, 401, 403, 413, 503),
    ),
    Operation(
        "post", f"{ONE}/ack", "ackMessages", "pull",
        "Mark rung the pull messages handled, by id, whether or not their lease has ended",
        body=AckBody,
        answers={200: Answer("which ids were acked", Acked)},
        errors=(400, 401, 403, 413, 503),
    ),
]  # fmt: skip
