"""One operation of the API as data, the form of the tables in *_operations.py, and the
OpenAPI operation object it becomes. Bodies are named by their type (a typed dict of
api/answers or a request model), whose schema pydantic generates; what no type can say
(paths, parameters, status codes, headers, security) is said here, once."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from clock_server.api.answers.errors import Error
from clock_server.api.openapi.rules import declare as declare_rules

JSON = "application/json"


@dataclass(frozen=True)
class Answer:
    """One answer: what it means, and its body's type (or a schema as a dict; None: no body
    worth describing)."""

    description: str
    body: Any = None
    media_type: str = JSON
    headers: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Operation:
    """One method of one path. `errors` are status codes answered with the Error body, as
    `_REASONS` says (for `admin` routes, as `_ADMIN_REASONS` says); `answers` holds the
    others, and any error that needs more said. `security` None is the document's: a bearer
    token when the server has tokens. `rules` are those the schema cannot state (rules.py)."""

    method: str
    path: str
    operation_id: str
    tag: str
    summary: str
    answers: Mapping[int | str, Answer]
    errors: tuple[int, ...] = ()
    body: Any = None
    body_required: bool = True
    parameters: tuple[Mapping[str, Any], ...] = ()
    description: str | None = None
    security: list[dict[str, list[str]]] | None = None
    admin: bool = False
    rules: Mapping[str, str] = field(default_factory=dict)  # beyond the schema, by field

    def all_answers(self, guarded: bool = True) -> dict[str, Answer]:
        """Its answers, errors included, and when it is `guarded` (one of this server's,
        not a webhook) those of the request guard."""
        answers = {str(status): answer for status, answer in self.answers.items()}
        for status in self.errors:
            answers.setdefault(str(status), _error(status, self.admin))
        for status, answer in edge_errors(self.path, self.method).items() if guarded else ():
            answers.setdefault(str(status), answer)
        return answers

    def to_openapi(
        self, schema_of: Callable[[Any], dict[str, Any]], guarded: bool = True
    ) -> dict[str, Any]:
        """The operation object; `schema_of(type)` is a body type's schema (a reference)."""
        answers = self.all_answers(guarded)
        operation: dict[str, Any] = {
            "operationId": self.operation_id,
            "tags": [self.tag],
            "summary": self.summary,
        }
        if self.description:
            operation["description"] = self.description
        if self.parameters:
            operation["parameters"] = [dict(parameter) for parameter in self.parameters]
        if self.body is not None:
            operation["requestBody"] = {
                "required": self.body_required,
                "content": {JSON: {"schema": _schema(self.body, schema_of)}},
            }
        operation["responses"] = {
            status: _response(answer, schema_of) for status, answer in answers.items()
        }
        if self.security is not None:
            operation["security"] = self.security
        if self.rules:
            declare_rules(operation, self.rules)
        return operation


def _schema(body: Any, schema_of: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
    return dict(body) if isinstance(body, dict) else schema_of(body)


def _response(answer: Answer, schema_of: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
    response: dict[str, Any] = {"description": answer.description}
    if answer.headers:
        response["headers"] = dict(answer.headers)
    if answer.body is not None:
        response["content"] = {answer.media_type: {"schema": _schema(answer.body, schema_of)}}
    return response


_REASONS = {
    400: "invalid request",
    401: "no valid bearer token (only when the server has tokens configured)",
    403: "the token does not cover this application, or may only read (':read')",
    404: "no such alarm",
    409: "the alarm is not pending",
    413: "body or payload over the limit",
    429: "over the application's creation rate (rate_limited, with Retry-After; PATCH and "
    "count take the same rate, in a bucket of their own) or its pending alarms "
    "(capacity_exceeded); nothing was stored or changed",
    503: "database unavailable",
}
_ADMIN_REASONS = {
    403: "the token is not an admin token (one for '*')",
    404: "the application is not registered",
}
HEADERS: dict[int, dict[str, Any]] = {
    401: {"WWW-Authenticate": {"required": True, "schema": {"type": "string"}}},
    429: {
        "Retry-After": {
            "description": "whole seconds, with rate_limited",
            "schema": {"type": "string"},
        }
    },
}


def _error(status: int, admin: bool) -> Answer:
    reason = (_ADMIN_REASONS if admin else {}).get(status, _REASONS[status])
    return Answer(reason, Error, headers=HEADERS.get(status, {}))


_EDGE_REASONS = {
    403: "a foreign Origin, or a change with Sec-Fetch-Site: cross-site",
    413: "a declared body length over the route's limit; nothing was read",
    415: "a body, or a Content-Type, that is not application/json; nothing was read",
    421: "a Host this server does not serve (CLOCK_ALLOWED_HOSTS)",
}
# request_guard.PROBES, which answer any Host; importing it would make a cycle through the
# routes, which serve this document.
PROBES = ("/livez", "/readyz", "/healthz")


def edge_errors(path: str, method: str) -> dict[int, Answer]:
    """What a request may be answered before it reaches its route (api.request_guard)."""
    codes = [403] + ([] if path in PROBES else [421])
    if method in ("post", "put", "patch", "delete"):
        codes.append(415)
    if method in ("post", "put", "patch"):  # each has its limit (BODY_LIMITS)
        codes.append(413)
    return {code: Answer(_EDGE_REASONS[code], Error) for code in codes}
