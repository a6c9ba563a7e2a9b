"""The OpenAPI entry of /v1/applications/{application}/webhook-secret (in
api/application_routes.py); api/openapi.py adds it to the document."""

from __future__ import annotations

from typing import Any

from clock_server.api.application_validation import OVERLAP_DEFAULT_S, OVERLAP_MAX_S
from clock_server.model import APPLICATION_PATTERN

_ROTATION = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "overlap_s": {
            "type": "number",
            "minimum": 0,
            "maximum": OVERLAP_MAX_S,
            "default": OVERLAP_DEFAULT_S,
            "description": "how long the secret being replaced goes on signing beside the new "
            "one (each webhook then carries both signatures), so that receivers can move to "
            "the new secret without rejecting a call; 0 stops it at once",
        },
    },
}

_SECRET = {
    "type": "object",
    "required": ["application", "webhook_secret", "previous_secret_signs_until"],
    "properties": {
        "application": {"type": "string", "pattern": APPLICATION_PATTERN},
        "webhook_secret": {
            "type": ["string", "null"],
            "pattern": "^whsec_",
            "description": "signs the application's webhooks per the Standard Webhooks "
            "specification (base64 after whsec_); null before the application first took "
            "the webhook channel",
        },
        "previous_secret_signs_until": {
            "type": ["integer", "null"],
            "description": "epoch ms until which the secret the last rotation replaced still "
            "signs beside this one; null when it no longer does",
        },
    },
}


def webhook_secret_path(parameters: list[Any], errors: dict[str, Any]) -> dict[str, Any]:
    """GET reads the secret, POST replaces it; `errors` are the admin routes' error answers."""
    ok = {"content": {"application/json": {"schema": _SECRET}}}
    return {
        "parameters": parameters,
        "get": {
            "summary": "The secret that signs the application's webhooks (admin token)",
            "responses": {"200": {"description": "the secret", **ok}, **errors},
        },
        "post": {
            "summary": "Replace the secret that signs the application's webhooks; every server "
            "signs with the new one within CLOCK_APPLICATION_REFRESH_S, and with the old one "
            "too for overlap_s (admin token)",
            "requestBody": {
                "required": False,
                "content": {"application/json": {"schema": _ROTATION}},
            },
            "responses": {"200": {"description": "the new secret", **ok}, **errors},
        },
    }
