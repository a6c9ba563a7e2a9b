"""Signing secrets for webhooks, in the Standard Webhooks form."""

from __future__ import annotations

import base64
import secrets

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32


def new_secret() -> str:
    """A fresh random secret: "whsec_" and the base64 of 32 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode("ascii")
