"""The rules the server checks that the document's JSON Schema cannot state: two fields
compared, a time counted from now, a server setting, a name looked up in DNS. Each operation
declares its own (Operation.rules) by the field an error names: a request the schema finds
valid that breaks one is answered 400 `validation_error` (413 `payload_too_large` for a size)
with that `field`. The document carries them under RULES_KEY."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from clock_server.model import MAX_EPOCH_MS

RULES_KEY = "x-rules-beyond-schema"

_DELAY = f"now + delay_ms must not pass the end of the year 9999 ({MAX_EPOCH_MS})"
_PREFIX = "needs application: keys are searched within one application"
_DUE_TO = "must not be before due_from"
_PAYLOAD = "at most CLOCK_PAYLOAD_MAX_BYTES (64 KiB) in UTF-8 (413)"
_BURST = "a burst needs its rate: create_burst needs create_rate_per_s, ring_burst ring_rate_per_s"
_RETRY = "retry_cap_s must be at least retry_base_s"
_URL = (
    "an http or https URL with a host, without user:password, whose host resolves, and "
    "(unless CLOCK_WEBHOOK_ALLOW_PRIVATE=true) to public addresses only"
)
_WEBHOOK = "channel webhook needs a webhook_url"
_STORED = "; a PATCH is checked together with the settings stored"

SEARCH = {
    "business_id_prefix": _PREFIX,
    "due_to": _DUE_TO,
    "limit": "at most CLOCK_LIST_MAX_LIMIT (1,000 unless configured)",
    "cursor": "a next_cursor this server handed out, with the same filters",
}
CREATE = {
    "latest_ring_at": "must not be before the target (target_ring_at, or now + delay_ms)",
    "delay_ms": _DELAY,
    "payload": _PAYLOAD,
    "business_id": "must not start with ~schedule/: those are the keys of schedules' occurrences",
}
BATCH = {
    "alarms": "at most CLOCK_BATCH_MAX_ITEMS items (1,000 unless configured; 413); the "
    "rules of POST /v1/alarms are each item's own, answered in its result",
}
UPDATE = {
    "latest_ring_at": "must not be before the target (the one given, or the stored one)",
    "delay_ms": _DELAY,
    "payload": _PAYLOAD,
}
REDRIVE = {"delay_ms": _DELAY}
BULK_REDRIVE = {"business_id_prefix": _PREFIX, "due_to": _DUE_TO, "delay_ms": _DELAY}
BULK_CANCEL = {"business_id_prefix": _PREFIX, "due_to": _DUE_TO}
REPLACE_APPLICATION = {"webhook_url": _URL, "retry_base_s": _RETRY, "retry_cap_s": _RETRY}
UPDATE_APPLICATION = {
    "webhook_url": f"{_URL}; {_WEBHOOK}{_STORED}",
    "channel": f"{_WEBHOOK}{_STORED}",
    "create_burst": f"{_BURST}{_STORED}",
    "create_rate_per_s": f"{_BURST}{_STORED}",
    "ring_burst": f"{_BURST}{_STORED}",
    "ring_rate_per_s": f"{_BURST}{_STORED}",
    "retry_base_s": f"{_RETRY}{_STORED}",
    "retry_cap_s": f"{_RETRY}{_STORED}",
}


def declare(operation: dict[str, Any], rules: Mapping[str, str]) -> None:
    """The operation object with its rules, as data under RULES_KEY and as prose in its
    description and its 400's."""
    operation[RULES_KEY] = dict(rules)
    prose = "; ".join(f"{field}: {rule}" for field, rule in rules.items())
    described = operation.get("description", "")
    operation["description"] = (
        f"{described}\n\n" if described else ""
    ) + f"Rules beyond the schema, each a 400 (or 413) naming its field: {prose}."
    answer = operation["responses"]["400"]
    answer["description"] = (
        f"{answer['description']}, or a rule beyond the schema broken ({RULES_KEY})"
    )


_CALENDAR = (
    "exactly one of cron and every_s; cron as cronsim reads it (5 fields, or 6 with seconds), "
    "and a calendar with an occurrence between start_at and end_at"
)
_NOT_NULL = "null only for cron, every_s, end_at and cutoff_ms"
REPLACE_SCHEDULE = {
    "cron": _CALENDAR,
    "every_s": _CALENDAR,
    "timezone": "an IANA time zone this server knows",
    "end_at": "not before start_at, and after at least one occurrence",
    "payload": _PAYLOAD,
}
UPDATE_SCHEDULE = {
    **REPLACE_SCHEDULE,
    **{name: _NOT_NULL for name in ("timezone", "payload", "start_at", "catch_up",
                                     "catch_up_max", "paused")},
    "timezone": "an IANA time zone this server knows; " + _NOT_NULL,
    "payload": _PAYLOAD + "; " + _NOT_NULL,
}  # fmt: skip
LIST_SCHEDULES = {"cursor": "a next_cursor this server handed out"}
