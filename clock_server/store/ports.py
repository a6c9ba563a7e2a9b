"""What the engine needs of the store, as interfaces: the engine imports this module only.

`clock_server.store.claims` and `clock_server.store.alarms` implement them on SQL; tests may
give the engine anything else with the same methods.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Protocol

from clock_server.model import Claim, RingRow


class RingTransaction(Protocol):
    """One ring batch's transaction: its row locks are held until it ends."""

    def lock_live(self, claims: Sequence[Claim]) -> list[RingRow]:
        """Lock the claimed rows and return those still pending with the claimed version."""
        ...

    def mark_rung(self, rung_at: Sequence[tuple[int, int]], now_ms: int) -> None:
        """Each (id, rung_at_ms): published then and confirmed."""
        ...

    def mark_expired(self, ids: Sequence[int], now_ms: int) -> None:
        """Past their cutoff: never published."""
        ...

    def mark_dead(self, ids: Sequence[int], now_ms: int) -> None:
        """Their last retry failed."""
        ...

    def schedule_retries(self, retries: Sequence[tuple[int, int]], now_ms: int) -> None:
        """Each (id, next_try_time): count the failed try and make the alarm due again then."""
        ...


class ClaimStore(Protocol):
    """Leases on due alarms: taken in batches, valid while the row's version holds."""

    def claim_due(
        self, horizon_ms: int, lease_until_ms: int, limit: int, from_ms: int | None = None
    ) -> list[Claim]:
        """Claim up to `limit` pending alarms due by `horizon_ms` (and from `from_ms`, when
        given), earliest first, each leased until `lease_until_ms`."""
        ...

    def release(self, claims: Sequence[Claim], now_ms: int) -> int:
        """Give claims back, each due again at its own time; returns how many were still live."""
        ...

    def ring_transaction(self) -> contextlib.AbstractContextManager[RingTransaction]:
        """A transaction for one ring batch; committed when the block ends without error."""
        ...

    def connect_ahead(self, connections: int) -> None:
        """Open up to `connections` pooled connections now (threads starting together)."""
        ...


class BacklogCounter(Protocol):
    """What maintenance measures."""

    def count_overdue(self, before_ms: int) -> int:
        """Pending alarms whose next try was due before `before_ms`."""
        ...
