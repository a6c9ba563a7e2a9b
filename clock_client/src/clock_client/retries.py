"""Which calls the clients send again, on what, and after how long."""

from __future__ import annotations

RETRY_STATUSES = frozenset({502, 503, 504})
# POST is safe to repeat because creation is idempotent by (application, business_id).
# PATCH is not: a repeat of an update that did land can meet a 409 (the alarm rang in
# between) or, with a delay, move the alarm a second time. PUT sets an application's every
# setting: a repeat sets the same.
RETRY_METHODS = frozenset({"GET", "HEAD", "DELETE", "POST", "PUT"})
_BACKOFF_MAX_S = 120.0


def backoff_s(backoff_factor: float, failures: int) -> float:
    """The wait before the next try after `failures` failed tries in a row, as urllib3's
    Retry waits for ClockClient: none after the first, then `backoff_factor` doubled each
    time (2x, 4x, ...), at most two minutes."""
    if failures <= 1:
        return 0.0
    return float(min(_BACKOFF_MAX_S, backoff_factor * 2 ** (failures - 1)))
