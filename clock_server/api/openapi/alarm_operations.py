"""The alarm operations, as data (api/routes.py and api/action_routes.py serve them)."""

from __future__ import annotations

from clock_server.api.answers.alarms import (
    Alarm,
    AlarmEvents,
    AlarmPage,
    BatchResults,
    BulkOutcome,
    Counted,
    Whoami,
)
from clock_server.api.openapi import parameters, rules
from clock_server.api.openapi.operation import Answer, Operation
from clock_server.api.validation import (
    BatchCreate,
    BulkCancel,
    BulkRedrive,
    CreateAlarm,
    Increment,
    Redrive,
    UpdateAlarm,
)

ALARMS = "/v1/alarms"
ONE = "/v1/alarms/{application}/{business_id}"

OPERATIONS = [
    Operation(
        "post", ALARMS, "createAlarm", "alarms",
        "Create an alarm (idempotent by application and business_id)",
        body=CreateAlarm,
        answers={
            201: Answer("created", Alarm),
            200: Answer("already existed; the stored alarm, unchanged", Alarm),
        },
        errors=(400, 401, 403, 413, 429, 503),
        rules=rules.CREATE,
    ),
    Operation(
        "get", ALARMS, "listAlarms", "alarms",
        "Search alarms, keyset-paginated: in business_id order with business_id_prefix, in "
        "next_try_time order with due_from or due_to, else in id order",
        parameters=tuple(parameters.SEARCH),
        answers={200: Answer("a page", AlarmPage)},
        errors=(400, 401, 403, 503),
        rules=rules.SEARCH,
    ),
    Operation(
        "post", f"{ALARMS}/batch", "createAlarms", "alarms",
        "Create many alarms; one result per item, in order",
        body=BatchCreate,
        answers={200: Answer("per-item results", BatchResults)},
        errors=(400, 401, 403, 413, 503),
        rules=rules.BATCH,
    ),
    Operation(
        "get", ONE, "getAlarm", "alarms", "Read an alarm",
        answers={200: Answer("the alarm", Alarm)},
        errors=(400, 401, 403, 404, 503),
    ),
    Operation(
        "patch", ONE, "updateAlarm", "alarms",
        "Move, re-cut or change the payload of a pending alarm",
        body=UpdateAlarm,
        answers={200: Answer("changed", Alarm)},
        errors=(400, 401, 403, 404, 409, 413, 429, 503),
        rules=rules.UPDATE,
    ),
    Operation(
        "delete", ONE, "cancelAlarm", "alarms", "Cancel an alarm; never rung after a 200",
        description="A cancel keeps the alarm's record, with status cancelled: GET of the "
        "alarm answers 200 (not 404) until the retention purge deletes it "
        "(CLOCK_RETENTION_DAYS after the cancel), and a create with its key answers 200 with "
        "it, cancelled. A DELETE repeated answers 200 too.",
        answers={200: Answer("cancelled; the alarm stays readable, cancelled", Alarm)},
        errors=(400, 401, 403, 404, 409, 503),
    ),
    Operation(
        "get", f"{ONE}/events", "listAlarmEvents", "alarms",
        "An alarm's history, oldest first (its latest 1,000 recorded events)",
        description="A business_id that ends in '/events' is read with GET of the alarm with "
        "that '/' sent as %2F.",
        answers={200: Answer("the events", AlarmEvents)},
        errors=(400, 401, 403, 404, 503),
    ),
    Operation(
        "post", f"{ONE}/count", "countAlarm", "alarms",
        "Count on a count-triggered alarm; a repeated increment_id counts nothing",
        body=Increment,
        body_required=False,
        answers={200: Answer("the alarm after the count", Counted)},
        errors=(400, 401, 403, 404, 409, 413, 429, 503),
    ),
    Operation(
        "post", f"{ONE}/redrive", "redriveAlarm", "interventions",
        "Make a dead or expired alarm pending again, with a fresh retry budget, due now or at "
        "the time given",
        body=Redrive,
        body_required=False,
        answers={200: Answer("the alarm, pending again", Alarm)},
        errors=(400, 401, 403, 404, 409, 503),
        rules=rules.REDRIVE,
    ),
    Operation(
        "post", f"{ALARMS}/redrive", "redriveAlarms", "interventions",
        "Re-drive every dead or expired alarm matching a filter (admin)",
        body=BulkRedrive,
        body_required=False,
        answers={200: Answer("how many", BulkOutcome)},
        errors=(400, 401, 403, 503),
        rules=rules.BULK_REDRIVE,
    ),
    Operation(
        "post", f"{ALARMS}/cancel", "cancelAlarms", "interventions",
        "Cancel every pending alarm matching a filter (admin)",
        body=BulkCancel,
        body_required=False,
        answers={200: Answer("how many", BulkOutcome)},
        errors=(400, 401, 403, 503),
        rules=rules.BULK_CANCEL,
    ),
    Operation(
        "get", "/v1/whoami", "whoami", "access",
        "What the caller's token may do (never the token)",
        answers={200: Answer("applications: '*' or a list; read_only: only reads", Whoami)},
        errors=(401,),
    ),
]  # fmt: skip
