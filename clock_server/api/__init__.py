"""The HTTP API: Flask routes, validation, the OpenAPI document, bearer tokens.

Only this package imports Flask and pydantic."""

from clock_server.api.app import create_app
from clock_server.api.services import Services

__all__ = ["Services", "create_app"]
