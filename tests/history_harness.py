"""The service harness of the history and intervention API tests, with tokens of billing,
another application and an admin."""

from __future__ import annotations

from clock_server.store.alarms import AlarmStore
from clock_server.testing import SettableClock
from tests.harness import ServiceHarness

BILLING = "billing-token-0123456789"  # billing only
OTHER = "other-token-0123456789ab"
ADMIN = "admin-token-0123456789abc="
TOKENS = f"{BILLING}=billing; {OTHER}=other; {ADMIN}=*"


class Harness(ServiceHarness):
    """The service harness with tokens of billing, other and an admin."""

    def __init__(self, store: AlarmStore, clock: SettableClock, tokens: str = TOKENS) -> None:
        super().__init__(store, clock, tokens, retry_base_s=1, retry_cap_s=8, retry_max=3)
