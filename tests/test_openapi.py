"""The OpenAPI document as generated: every operation named and tagged, every body's schema
the one pydantic generates from its type, and those types true to what the routes write."""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import TypeAdapter

from clock_server.api.answers.alarms import Alarm, AlarmEvent, EventDetail
from clock_server.api.answers.applications import Application, ApplicationCounts
from clock_server.api.answers.health import ChannelStates
from clock_server.api.answers.messages import Message
from clock_server.api.answers.overview import ByStatus
from clock_server.api.openapi import openapi_document
from clock_server.api.openapi.document import OPERATIONS
from clock_server.api.openapi.operation import PROBES as DOCUMENTED_PROBES
from clock_server.api.openapi.webhooks import WEBHOOKS
from clock_server.api.request_guard import PROBES
from clock_server.api.schema_rules import REF
from clock_server.api.validation import CreateAlarm
from clock_server.model import (
    CHANNELS,
    EVENT_KINDS,
    POLICY_FIELDS,
    STATUSES,
    ApplicationPolicy,
    RingRow,
    ring_message,
)
from clock_server.model import Alarm as StoredAlarm
from clock_server.model import ApplicationCounts as Counts
from tests.api_support import NOW, OpenApiChecker

METHODS = {"get", "put", "post", "patch", "delete"}


def _operations(document: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(where, method, operation) of every path and every webhook."""
    found = []
    for section in ("paths", "webhooks"):
        for where, item in document[section].items():
            found += [(where, method, op) for method, op in item.items() if method in METHODS]
    return found


def test_every_operation_has_a_unique_camel_case_id_and_a_declared_tag() -> None:
    document = openapi_document()
    operations = _operations(document)
    assert len(operations) == len(OPERATIONS) + len(WEBHOOKS)
    ids = [op["operationId"] for _, _, op in operations]
    assert len(set(ids)) == len(ids), sorted(ids)
    assert all(re.fullmatch(r"[a-z]+(?:[A-Z][a-z]+)*", i) for i in ids), ids
    declared = {tag["name"]: tag["description"] for tag in document["tags"]}
    assert all(declared.values())
    used = {tag for _, _, op in operations for tag in op["tags"]}
    assert used == set(declared)  # no tag undeclared, none declared for nothing
    assert all(len(op["tags"]) == 1 for _, _, op in operations)


def test_every_json_body_is_a_reference_to_a_generated_schema() -> None:
    document = openapi_document()
    schemas = document["components"]["schemas"]
    bodies = []
    for where, method, op in _operations(document):
        if "requestBody" in op:
            bodies.append((where, method, op["requestBody"]["content"]["application/json"]))
        for status, answer in op["responses"].items():
            bodies += [(where, status, content) for content in answer.get("content", {}).values()]
    for where, what, content in bodies:
        if "$ref" not in content["schema"]:
            assert where in ("/metrics", "/openapi.json"), (where, what)  # not described further
            continue
        name = content["schema"]["$ref"].removeprefix(REF.format(model=""))
        assert name in schemas, (where, what)
    for name in schemas:
        assert re.fullmatch(r"[A-Z][A-Za-z]+", name), name  # no name pydantic had to mangle


def test_the_schemas_are_pydantics_for_each_type() -> None:
    """Each request model's schema, and those it refers to, as pydantic generates them from
    the model alone (with CreateAlarm, which a batch's items refer to)."""
    schemas = openapi_document()["components"]["schemas"]
    for body in [operation.body for operation in OPERATIONS if operation.body is not None]:
        adapters = [(kind, "validation", TypeAdapter(kind)) for kind in {body, CreateAlarm}]
        found, top = TypeAdapter.json_schemas(adapters, ref_template=REF)
        assert found[body, "validation"] == {"$ref": REF.format(model=body.__name__)}
        for name, schema in top["$defs"].items():
            assert schemas[name] == schema, name


def test_the_document_is_json_and_the_same_each_time() -> None:
    document = openapi_document()
    assert json.loads(json.dumps(document)) == openapi_document()


def _keys(kind: Any) -> set[str]:
    return set(TypeAdapter(kind).json_schema(ref_template=REF)["properties"])


def test_the_answers_types_have_the_keys_the_vocabulary_writes() -> None:
    stored = StoredAlarm(1, "a", "b", "p", NOW, None, NOW, 0, "pending", None, NOW, NOW)
    assert _keys(Alarm) == set(stored.to_json())
    policy = ApplicationPolicy(name="a").to_json()
    assert _keys(Application) == set(policy) | {"registered", "counts"}
    assert set(POLICY_FIELDS) < _keys(Application)
    assert _keys(ApplicationCounts) == set(Counts().to_json())
    assert _keys(ChannelStates) == set(CHANNELS)
    assert _keys(ByStatus) == set(STATUSES)
    counted = RingRow(1, "a", "b", "p", NOW, None, 0, ring_after_count=3, counted=3)
    assert _keys(Message) == set(ring_message(counted, NOW))
    assert set(TypeAdapter(Message).json_schema()["required"]) == set(
        ring_message(counted._replace(ring_after_count=None), NOW)
    )
    kinds = TypeAdapter(AlarmEvent).json_schema()["properties"]["kind"]["enum"]
    assert kinds == list(EVENT_KINDS)
    assert "from" in _keys(EventDetail)


def test_a_message_validates_against_the_webhook_and_pull_schemas() -> None:
    check = OpenApiChecker(openapi_document())
    row = RingRow(7, "shop", "order-1", "p", NOW, None, 2, ring_after_count=5, counted=5)
    for message in (
        ring_message(row, NOW + 1),
        ring_message(row._replace(ring_after_count=None), NOW),
    ):
        check.validate(message, "webhooks", "alarm", "post", "requestBody", "content",
                       "application/json", "schema")  # fmt: skip
        pulled = {"messages": [{"id": "7", "attempt": 3, "leased_until": NOW, "message": message}]}
        check.validate(pulled, "components", "schemas", "Pulled")


def test_the_probes_answer_any_host_as_the_request_guard_says() -> None:
    assert set(DOCUMENTED_PROBES) == PROBES
    paths = openapi_document()["paths"]
    for probe in PROBES:
        assert "421" not in paths[probe]["get"]["responses"]
    assert "421" in paths["/v1/alarms"]["get"]["responses"]
