"""An operator's interventions over HTTP: re-drive one dead or expired alarm, and re-drive or
cancel every alarm matching a filter (admin tokens only). Each lands in the alarms' history
with who did it."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify

from clock_server.api import validation
from clock_server.api.access import actor, admin_actor, authorize_admin
from clock_server.api.routes import check_key, notify, optional_json_body, services

actions = Blueprint("actions", __name__)

BODY_MAX_BYTES = 16_384  # a filter or a due time fits in far less
# How long one bulk call works before it answers "done": false; calling it again goes on.
BULK_BUDGET_S = 10.0


@actions.post("/v1/alarms/<application>/<path:business_id>/redrive")
def redrive(application: str, business_id: str) -> Response:
    svc = services()
    check_key(application, business_id)
    now_ms = svc.clock.now_ms()
    due_ms = validation.redrive_due(_body(), now_ms)
    alarm = svc.interventions.redrive(
        application, business_id, due_ms, now_ms, actor=actor(application)
    )
    svc.metrics.count_redriven(application, 1)
    notify(svc, alarm.next_try_time)
    return jsonify(alarm.to_json())


@actions.post("/v1/alarms/redrive")
def bulk_redrive() -> Response:
    authorize_admin("re-drive alarms in bulk")
    svc = services()
    now_ms = svc.clock.now_ms()
    where, due_ms = validation.bulk_redrive(_body(), now_ms)
    outcome = svc.interventions.bulk_redrive(where, due_ms, now_ms, admin_actor(), BULK_BUDGET_S)
    for application, count in outcome.per_application.items():
        svc.metrics.count_redriven(application, count)
    if outcome.changed:
        notify(svc, due_ms)
    return jsonify(outcome.to_json())


@actions.post("/v1/alarms/cancel")
def bulk_cancel() -> Response:
    authorize_admin("cancel alarms in bulk")
    svc = services()
    where = validation.bulk_cancel(_body())
    outcome = svc.interventions.bulk_cancel(where, svc.clock.now_ms(), admin_actor(), BULK_BUDGET_S)
    for application, count in outcome.per_application.items():
        svc.metrics.count_cancelled(application, count)
    return jsonify(outcome.to_json())


def _body() -> dict[str, Any]:
    """The JSON body; none at all is an empty object (a re-drive due now)."""
    return optional_json_body(BODY_MAX_BYTES, "16 KiB")
