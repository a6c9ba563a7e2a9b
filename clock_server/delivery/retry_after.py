"""Reading a Retry-After header: how long a 429 or 503 asks the caller to wait."""

from __future__ import annotations

import email.utils
import math
from datetime import UTC

MAX_RETRY_AFTER_MS = 3_600_000


def retry_after_ms(value: str | None, date: str | None, now_s: float) -> int | None:
    """A Retry-After header in milliseconds, between 0 and one hour; None when absent or
    unreadable. An HTTP date counts from the answer's Date header when it has one (so the
    two clocks need not agree), else from `now_s`."""
    if value is None:
        return None
    text = value.strip()
    if text.isascii() and text.isdigit():
        delay_s = float(text) if len(text) <= 10 else math.inf
    else:
        until = _http_date(text)
        if until is None:
            return None
        answered = _http_date(date) if date else None
        delay_s = until - (answered if answered is not None else now_s)
    if delay_s * 1000 >= MAX_RETRY_AFTER_MS:
        return MAX_RETRY_AFTER_MS
    return max(0, math.ceil(delay_s * 1000))


def _http_date(text: str) -> float | None:
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()
