"""The HTTP API (Flask): all HTTP lives in this package."""

from clock_server.api.app import Services, create_app

__all__ = ["Services", "create_app"]
