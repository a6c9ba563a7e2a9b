"""The rules the server checks that the document's JSON Schema cannot state: two fields
compared, a time counted from now, a server setting, a name looked up in DNS. Each operation
declares its own under RULES_KEY, by the field an error names: a request the schema finds
valid that breaks one is answered 400 `validation_error` (413 `payload_too_large` for a size)
with that `field`. api/openapi.py adds them to the document."""

from __future__ import annotations

from typing import Any

from clock_server.model import MAX_EPOCH_MS

RULES_KEY = "x-rules-beyond-schema"

_ALARM = "/v1/alarms/{application}/{business_id}"
_APPLICATION = "/v1/applications/{application}"
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

RULES: dict[tuple[str, str], dict[str, str]] = {
    ("/v1/alarms", "get"): {
        "business_id_prefix": _PREFIX,
        "due_to": _DUE_TO,
        "limit": "at most CLOCK_LIST_MAX_LIMIT (1,000 unless configured)",
        "cursor": "a next_cursor this server handed out, with the same filters",
    },
    ("/v1/alarms", "post"): {
        "latest_ring_at": "must not be before the target (target_ring_at, or now + delay_ms)",
        "delay_ms": _DELAY,
        "payload": _PAYLOAD,
    },
    ("/v1/alarms/batch", "post"): {
        "alarms": "at most CLOCK_BATCH_MAX_ITEMS items (1,000 unless configured; 413); the "
        "rules of POST /v1/alarms are each item's own, answered in its result",
    },
    (_ALARM, "patch"): {
        "latest_ring_at": "must not be before the target (the one given, or the stored one)",
        "delay_ms": _DELAY,
        "payload": _PAYLOAD,
    },
    (f"{_ALARM}/redrive", "post"): {"delay_ms": _DELAY},
    ("/v1/alarms/redrive", "post"): {
        "business_id_prefix": _PREFIX,
        "due_to": _DUE_TO,
        "delay_ms": _DELAY,
    },
    ("/v1/alarms/cancel", "post"): {"business_id_prefix": _PREFIX, "due_to": _DUE_TO},
    (_APPLICATION, "put"): {
        "webhook_url": _URL,
        "retry_base_s": _RETRY,
        "retry_cap_s": _RETRY,
    },
    (_APPLICATION, "patch"): {
        "webhook_url": f"{_URL}; {_WEBHOOK}{_STORED}",
        "channel": f"{_WEBHOOK}{_STORED}",
        "create_burst": f"{_BURST}{_STORED}",
        "create_rate_per_s": f"{_BURST}{_STORED}",
        "ring_burst": f"{_BURST}{_STORED}",
        "ring_rate_per_s": f"{_BURST}{_STORED}",
        "retry_base_s": f"{_RETRY}{_STORED}",
        "retry_cap_s": f"{_RETRY}{_STORED}",
    },
}


def declare_rules(paths: dict[str, Any]) -> None:
    """Each operation of RULES with its rules, as data under RULES_KEY and as prose in its
    description and its 400's."""
    for (path, method), rules in RULES.items():
        operation = paths[path][method]
        operation[RULES_KEY] = rules
        prose = "; ".join(f"{field}: {rule}" for field, rule in rules.items())
        described = operation.get("description", "")
        operation["description"] = (
            f"{described}\n\n" if described else ""
        ) + f"Rules beyond the schema, each a 400 (or 413) naming its field: {prose}."
        answer = operation["responses"]["400"]  # may be shared with other operations
        operation["responses"]["400"] = {
            **answer,
            "description": f"{answer['description']}, or a rule beyond the schema broken "
            f"({RULES_KEY})",
        }
