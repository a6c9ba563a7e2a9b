"""The schedule operations, as data (api/schedule_routes.py serves them)."""

from __future__ import annotations

from clock_server.api.answers.schedules import Occurrences, Schedule, SchedulePage
from clock_server.api.openapi import parameters, rules
from clock_server.api.openapi.operation import Answer, Operation
from clock_server.api.schedule_validation import ScheduleChanges, ScheduleSettings

ALL = "/v1/schedules"
ONE = "/v1/schedules/{application}/{schedule_id}"

OPERATIONS = [
    Operation(
        "put",
        ONE,
        "replaceSchedule",
        "schedules",
        "Create or replace a schedule; occurrences not yet due are made again from it",
        body=ScheduleSettings,
        answers={201: Answer("created", Schedule), 200: Answer("replaced", Schedule)},
        errors=(400, 401, 403, 413, 503),
        rules=rules.REPLACE_SCHEDULE,
    ),
    Operation(
        "patch",
        ONE,
        "updateSchedule",
        "schedules",
        "Change some fields of a schedule; occurrences not yet due are made again from it",
        body=ScheduleChanges,
        answers={200: Answer("changed", Schedule)},
        errors=(400, 401, 403, 404, 413, 503),
        rules=rules.UPDATE_SCHEDULE,
    ),
    Operation(
        "get",
        ONE,
        "getSchedule",
        "schedules",
        "Read a schedule",
        answers={200: Answer("the schedule", Schedule)},
        errors=(400, 401, 403, 404, 503),
    ),
    Operation(
        "delete",
        ONE,
        "deleteSchedule",
        "schedules",
        "Delete a schedule and its occurrences not yet due",
        answers={200: Answer("the schedule as it was", Schedule)},
        errors=(400, 401, 403, 404, 503),
    ),
    Operation(
        "post",
        f"{ONE}/pause",
        "pauseSchedule",
        "schedules",
        "Pause a schedule: its occurrences not yet due are deleted, none is made until resumed",
        answers={200: Answer("paused", Schedule)},
        errors=(400, 401, 403, 404, 503),
    ),
    Operation(
        "post",
        f"{ONE}/resume",
        "resumeSchedule",
        "schedules",
        "Resume a schedule from now: what fell due while it was paused does not ring",
        answers={200: Answer("resumed", Schedule)},
        errors=(400, 401, 403, 404, 503),
    ),
    Operation(
        "get",
        f"{ONE}/next",
        "previewSchedule",
        "schedules",
        "The next occurrences, in UTC and in the schedule's time zone",
        parameters=(
            {
                "name": "count",
                "in": "query",
                "description": "how many",
                "schema": {"type": "integer", "minimum": 1, "maximum": 100, "default": 5},
            },
        ),
        answers={200: Answer("the next occurrences", Occurrences)},
        errors=(400, 401, 403, 404, 503),
    ),
    Operation(
        "get",
        ALL,
        "listSchedules",
        "schedules",
        "Schedules in (application, schedule_id) order, keyset-paginated; every application's "
        "needs an admin token",
        parameters=tuple(parameters.SCHEDULE_LIST),
        answers={200: Answer("a page", SchedulePage)},
        errors=(400, 401, 403, 503),
        rules=rules.LIST_SCHEDULES,
    ),
]
