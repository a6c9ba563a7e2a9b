"""The request a log line was made while serving: its id.

The API sets it while it serves a request (`api/request_log.py`); the log handler
(`runtime/logs.py`) puts it on every record made meanwhile in that thread, whatever the logger,
so that `request_id` finds every line of one request. Kept here, below both, because the
entry point configures logging before it may import the API.
"""

from __future__ import annotations

from contextvars import ContextVar

REQUEST_ID: ContextVar[str | None] = ContextVar("clock_request_id", default=None)
