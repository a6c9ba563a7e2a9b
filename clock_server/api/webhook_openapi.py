"""The OpenAPI entry of /v1/applications/{application}/webhook-secret (in
api/application_routes.py); api/openapi.py adds it to the document."""

from __future__ import annotations

from typing import Any

from clock_server.model import APPLICATION_PATTERN

_SECRET = {
    "type": "object",
    "required": ["application", "webhook_secret"],
    "properties": {
        "application": {"type": "string", "pattern": APPLICATION_PATTERN},
        "webhook_secret": {
            "type": ["string", "null"],
            "pattern": "^whsec_",
            "description": "signs the application's webhooks per the Standard Webhooks "
            "specification (base64 after whsec_); null before the application first took "
            "the webhook channel",
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
            "signs with the new one within CLOCK_APPLICATION_REFRESH_S (admin token)",
            "responses": {"200": {"description": "the new secret", **ok}, **errors},
        },
    }
