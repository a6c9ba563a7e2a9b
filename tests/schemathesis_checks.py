"""What tests/test_fuzz_cli.py adds to the schemathesis CLI (SCHEMATHESIS_HOOKS names this
module): two checks that take the place of built-in ones whose rule the API departs from, as
its document declares, and the spelling of integers.

* `positive_data_acceptance` wants every request valid by the schema accepted. The server
  also checks rules the schema cannot state; each operation declares them under
  `x-rules-beyond-schema`, by the field its error names. `declared_rules_only` is the built-in
  check, except that a 400 or 413 naming a declared field is the documented answer.
* `use_after_free` wants a 404 for an alarm read after its DELETE answered 2xx. A cancel
  keeps the alarm's record, cancelled (the DELETE's description says so).
  `cancelled_stays_cancelled` checks that instead: once a DELETE answered 2xx, every answer
  that shows that alarm shows it cancelled.
* JSON Schema counts 735.0 as an integer; the API takes integers written as such, as the
  document's description says: integral floats are sent as integers.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import schemathesis
from schemathesis.checks import positive_data_acceptance
from schemathesis.openapi.checks import RejectedPositiveData

RULES_KEY = "x-rules-beyond-schema"
ALARM = "/v1/alarms/{application}/{business_id}"


def before_call(context: Any, case: Any, **kwargs: Any) -> None:
    # only when it changes: setting the body makes schemathesis judge the case again
    if _has_integral_float(case.body):
        case.body = integral(case.body)


def _has_integral_float(value: Any) -> bool:
    if isinstance(value, float):
        return value.is_integer()
    if isinstance(value, dict):
        return any(_has_integral_float(item) for item in value.values())
    if isinstance(value, list):
        return any(_has_integral_float(item) for item in value)
    return False


def integral(value: Any) -> Any:
    """`value` with 735.0 made 735."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {key: integral(item) for key, item in value.items()}
    if isinstance(value, list):
        return [integral(item) for item in value]
    return value


def declared_rules_only(ctx: Any, response: Any, case: Any) -> bool | None:
    """A request valid by the schema is accepted, or refused by a rule its operation declares."""
    try:
        return positive_data_acceptance(ctx, response, case)  # type: ignore[no-any-return]
    except RejectedPositiveData:
        if response.status_code in (400, 413) and _error_field(response) in _rules(case):
            return None
        raise


def _rules(case: Any) -> dict[str, str]:
    operation = case.operation
    item = operation.schema.raw_schema["paths"][operation.path]
    return item[operation.method.lower()].get(RULES_KEY, {})  # type: ignore[no-any-return]


def _error_field(response: Any) -> str | None:
    try:
        return response.json()["error"]["field"]  # type: ignore[no-any-return]
    except (ValueError, KeyError, TypeError):
        return None


class cancelled_stays_cancelled:  # its name is the check's, as schemathesis reports it
    """Once DELETE of an alarm answered 2xx, every answer that shows the alarm shows it
    cancelled: no 404 (its record stays), and never pending, rung or any other status."""

    def __init__(self) -> None:
        self.cancelled: set[int] = set()
        self.lock = threading.Lock()

    def after_response(self, ctx: Any, response: Any, case: Any) -> bool | None:
        if not 200 <= response.status_code < 300 or not _is_json(response):
            return None
        shown = list(_alarms(response.json()))
        with self.lock:
            if case.operation.path == ALARM and case.method.upper() == "DELETE":
                self.cancelled.update(alarm["id"] for alarm in shown)
            for alarm in shown:
                if alarm["id"] in self.cancelled:
                    assert alarm["status"] == "cancelled", (
                        f"alarm {alarm['id']} was cancelled (DELETE answered 2xx), "
                        f"and now shows status {alarm['status']!r}"
                    )
        return None


def _is_json(response: Any) -> bool:
    types = response.headers.get("content-type") or [""]
    return str(types[0]).startswith("application/json")


def _alarms(data: Any) -> Any:
    """Every alarm in a JSON answer."""
    if isinstance(data, dict):
        if {"id", "business_id", "status"} <= data.keys():
            yield data
        for value in data.values():
            yield from _alarms(value)
    elif isinstance(data, list):
        for item in data:
            yield from _alarms(item)


# Registered where schemathesis loads this module as its hooks, never in another process that
# imports it (the tests of the checks), whose own schemathesis runs they would change.
if os.environ.get("SCHEMATHESIS_HOOKS") == __name__:
    schemathesis.hook(before_call)
    schemathesis.check(declared_rules_only)
    schemathesis.check(cancelled_stays_cancelled)
