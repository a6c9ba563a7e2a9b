"""Helpers for the tests of the HTTP API: the fake clock's start, a valid create request, the
stored alarms, the shape of an error answer, and a check of real answers against the schemas
of the served OpenAPI document."""

from __future__ import annotations

from typing import Any

NOW = 1_700_000_000_000  # SettableClock's start; asserted in test_api's test_fake_clock_start
MINUTE = 60_000
DROP = object()  # a value of body()'s overrides that removes the key
_ANY = object()


def body(**overrides: Any) -> dict[str, Any]:
    """A valid create request, changed by `overrides` (a value of DROP removes the key)."""
    data: dict[str, Any] = {
        "application": "app",
        "business_id": "order-1",
        "payload": '{"hello": "world"}',
        "target_ring_at": NOW + MINUTE,
    }
    data.update(overrides)
    return {key: value for key, value in data.items() if value is not DROP}


def rows(api) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    """Every stored alarm of the `api` harness, as the API writes it."""
    return [alarm.to_json() for alarm in api.store.list(None, None, 10_000, None)]


def assert_error(response, status: int, code: str | None = None, field: Any = _ANY) -> dict:  # type: ignore[no-untyped-def]
    """The response is `status` with exactly {"error": {"code", "message", "field"[, "status"]}}."""
    assert response.status_code == status, response.get_data(as_text=True)
    assert response.mimetype == "application/json"
    data = response.get_json()
    assert set(data) == {"error"}
    error = data["error"]
    expected = {"code", "message", "field"} | ({"status"} if status == 409 else set())
    assert set(error) == expected
    assert isinstance(error["code"], str)
    assert isinstance(error["message"], str) and error["message"]
    assert error["field"] is None or isinstance(error["field"], str)
    if code is not None:
        assert error["code"] == code
    if field is not _ANY:
        assert error["field"] == field
    return error  # type: ignore[no-any-return]


def _pointer(*parts: str) -> str:
    return "".join("/" + part.replace("~", "~0").replace("/", "~1") for part in parts)


class OpenApiChecker:
    """Validates real responses and requests against the schemas of the served document."""

    BASE = "urn:clock-openapi"

    def __init__(self, document: dict[str, Any]) -> None:
        from jsonschema import Draft202012Validator
        from referencing import Registry, Resource
        from referencing.jsonschema import DRAFT202012

        self.document = document
        self._validator = Draft202012Validator
        resource = Resource.from_contents(document, default_specification=DRAFT202012)
        self._registry = Registry().with_resource(self.BASE, resource)

    def validate(self, instance: Any, *parts: str) -> None:
        schema = {"$ref": f"{self.BASE}#{_pointer(*parts)}"}
        errors = [
            f"{list(e.absolute_path)}: {e.message}"
            for e in self._validator(schema, registry=self._registry).iter_errors(instance)
        ]
        assert not errors, (parts, instance, errors)

    def response(self, template: str, method: str, response: Any) -> None:
        operation = self.document["paths"][template][method.lower()]
        status = str(response.status_code)
        assert status in operation["responses"], f"{method} {template} {status} not documented"
        content = operation["responses"][status].get("content")
        assert content is not None, f"{method} {template} {status} has no documented body"
        assert response.mimetype in content
        parts = ("paths", template, method.lower(), "responses", status, "content")
        self.validate(response.get_json(), *parts, response.mimetype, "schema")

    def request(self, template: str, method: str, data: Any) -> None:
        parts = ("paths", template, method.lower(), "requestBody", "content", "application/json")
        self.validate(data, *parts, "schema")
