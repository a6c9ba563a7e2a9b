"""The OpenAPI document, generated from the request models and the answers' types."""

from clock_server.api.openapi.document import openapi_document

__all__ = ["openapi_document"]
