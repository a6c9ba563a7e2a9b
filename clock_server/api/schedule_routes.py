"""The /v1/schedules endpoints: recurring schedules, under the same tokens as the alarms of
their application; their occurrences are alarms (business_id `~schedule/<id>/<time>`)."""

from __future__ import annotations

from dataclasses import replace

from flask import Blueprint, Response, jsonify, request

from clock_server.api import schedule_validation as checks
from clock_server.api.access import authorize, authorize_listing
from clock_server.api.routes import json_body, optional_json_body, services
from clock_server.api.validation import check_application, encode_cursor
from clock_server.errors import ValidationError
from clock_server.occurrences import Schedule, preview
from clock_server.store.schedules import SqlSchedules

schedules = Blueprint("schedules", __name__)
ONE = "/v1/schedules/<application>/<schedule_id>"


def _store() -> SqlSchedules:
    return SqlSchedules(services().store)


def _key(application: str, schedule_id: str) -> None:
    """400 for a malformed key, then 403 for an application the token does not cover."""
    check_application(application)
    checks.check_schedule_id(schedule_id)
    authorize(application)


@schedules.put(ONE)
def replace_schedule(application: str, schedule_id: str) -> tuple[Response, int]:
    svc = services()
    _key(application, schedule_id)
    data = json_body(svc.settings.single_body_max_bytes, "six times CLOCK_PAYLOAD_MAX_BYTES")
    now_ms = svc.clock.now_ms()
    limit = svc.settings.payload_max_bytes
    checks.schedule_from(application, schedule_id, data, now_ms, limit)  # 400 before any lock

    def replaced(stored: Schedule | None) -> Schedule:
        start = None if stored is None else stored.start_at
        return checks.schedule_from(application, schedule_id, data, now_ms, limit, start)

    schedule, created = _store().change(application, schedule_id, now_ms, replaced)
    return jsonify(schedule.to_json()), 201 if created else 200


@schedules.patch(ONE)
def change_schedule(application: str, schedule_id: str) -> Response:
    svc = services()
    _key(application, schedule_id)
    data = json_body(svc.settings.single_body_max_bytes, "six times CLOCK_PAYLOAD_MAX_BYTES")
    now_ms = svc.clock.now_ms()
    limit = svc.settings.payload_max_bytes
    schedule = _store().update(
        application,
        schedule_id,
        now_ms,
        lambda stored: checks.changed_schedule(stored, data, now_ms, limit),
    )
    return jsonify(schedule.to_json())


@schedules.get(ONE)
def get_schedule(application: str, schedule_id: str) -> Response:
    _key(application, schedule_id)
    return jsonify(_store().get(application, schedule_id).to_json())


@schedules.delete(ONE)
def delete_schedule(application: str, schedule_id: str) -> Response:
    svc = services()
    _key(application, schedule_id)
    gone = _store().delete(application, schedule_id, svc.clock.now_ms())
    return jsonify(gone.to_json())


@schedules.post(f"{ONE}/pause")
def pause_schedule(application: str, schedule_id: str) -> Response:
    return _set_paused(application, schedule_id, True)


@schedules.post(f"{ONE}/resume")
def resume_schedule(application: str, schedule_id: str) -> Response:
    return _set_paused(application, schedule_id, False)


def _set_paused(application: str, schedule_id: str, paused: bool) -> Response:
    """Pausing deletes the occurrences made ahead; resuming plans from now: what fell due
    while it was paused does not ring."""
    svc = services()
    _key(application, schedule_id)
    data = optional_json_body(1_024, "1 KiB")
    if data:
        field = next(iter(data))
        raise ValidationError(f"{field}: pause and resume take no fields", field=field)
    schedule = _store().update(
        application, schedule_id, svc.clock.now_ms(), lambda stored: replace(stored, paused=paused)
    )
    return jsonify(schedule.to_json())


@schedules.get(f"{ONE}/next")
def next_occurrences(application: str, schedule_id: str) -> Response:
    svc = services()
    _key(application, schedule_id)
    _known_parameters({"count"})
    count = checks.preview_count(request.args.get("count"))
    schedule = _store().get(application, schedule_id)
    now_ms = svc.clock.now_ms()
    if schedule.paused:  # as it would go on if resumed now
        shown = preview(schedule.calendar, now_ms, count)
    elif schedule.next_at is None:  # ended
        shown = []
    else:  # from the first not made yet: those made already are alarms, due soon
        shown = preview(schedule.calendar, max(now_ms, schedule.next_at - 1), count)
    return jsonify({"schedule_id": schedule_id, "timezone": schedule.timezone,
                    "paused": schedule.paused, "occurrences": shown})  # fmt: skip


@schedules.get("/v1/schedules")
def list_schedules() -> Response:
    _known_parameters({"application", "limit", "cursor"})
    application = request.args.get("application") or None
    if application is not None:
        check_application(application)
    authorize_listing(application)
    limit = checks.page_limit(request.args.get("limit"))
    cursor = request.args.get("cursor")
    after = checks.after_cursor(cursor) if cursor else None
    found = _store().list(application, after, limit + 1)
    page, more = found[:limit], len(found) > limit
    next_cursor = None
    if more and page:
        next_cursor = encode_cursor((page[-1].application, page[-1].schedule_id))
    return jsonify({"schedules": [s.to_json() for s in page], "next_cursor": next_cursor})


def _known_parameters(known: set[str]) -> None:
    for name in request.args:
        if name not in known:
            raise ValidationError(f"unknown query parameter {name!r}", field=name)
