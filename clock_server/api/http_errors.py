"""The one place errors become HTTP responses."""

from __future__ import annotations

import logging
from typing import Any

from flask import Response, jsonify
from werkzeug.exceptions import HTTPException

from clock_server.errors import (
    CapacityExceeded,
    ClockError,
    Conflict,
    Forbidden,
    MisdirectedRequest,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    Unauthorized,
    Unavailable,
    UnsupportedMediaType,
    ValidationError,
)

log = logging.getLogger(__name__)

_STATUS_BY_ERROR: list[tuple[type[ClockError], int]] = [
    (PayloadTooLarge, 413),
    (ValidationError, 400),
    (Unauthorized, 401),
    (Forbidden, 403),
    (NotFound, 404),
    (UnsupportedMediaType, 415),
    (MisdirectedRequest, 421),
    (Conflict, 409),
    (RateLimited, 429),
    (CapacityExceeded, 429),
    (Unavailable, 503),
]


def error_body(error: ClockError) -> dict[str, Any]:
    body: dict[str, Any] = {"code": error.code, "message": error.message, "field": error.field}
    if isinstance(error, Conflict):
        body["status"] = error.status
    if isinstance(error, RateLimited):
        body["retry_after_s"] = error.retry_after_s
    return {"error": body}


def status_for(error: ClockError) -> int:
    for error_type, status in _STATUS_BY_ERROR:
        if isinstance(error, error_type):
            return status
    return 500


def clock_error(error: ClockError) -> tuple[Response, int, list[tuple[str, str]]]:
    status = status_for(error)
    if status >= 500:
        log.warning("request failed: %s", error.message, extra={"action": "request_unavailable"})
    headers = []
    if isinstance(error, Unauthorized):
        headers.append(("WWW-Authenticate", error.challenge))
    if isinstance(error, RateLimited):
        headers.append(("Retry-After", str(error.retry_after_s)))
    return jsonify(error_body(error)), status, headers


def http_error(error: HTTPException) -> tuple[Response, int, list[tuple[str, str]]]:
    status = error.code or 500
    codes = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}
    message = error.description or error.name
    if status == 413:
        message = "the request body is over the size limit"
    body = {"code": codes.get(status, "http_error"), "message": message, "field": None}
    headers = [(name, value) for name, value in error.get_headers() if name == "Allow"]
    return jsonify({"error": body}), status, headers


def unexpected_error(error: Exception) -> tuple[Response, int]:
    log.exception("unexpected error", extra={"action": "request_error"})
    body = {"code": "internal", "message": "internal server error", "field": None}
    return jsonify({"error": body}), 500
