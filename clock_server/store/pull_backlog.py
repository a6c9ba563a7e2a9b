"""How many pull messages wait for their pullers, and since when, read with a bounded cost.

A message waits when it is ready and not leased: delivering, nobody's (`claimed_by` = 0),
with its `next_try_time` (the moment it became ready, or the end of its last lease) passed.
Each registered pull application costs one statement on the (application, status,
next_try_time) index, reading at most `cap` entries, earliest first: the first is the
oldest, and past the cap the count says "at least".
"""

from __future__ import annotations

from sqlalchemy import and_, func, select

from clock_server.model import DELIVERING, PULL
from clock_server.store.alarms import AlarmStore
from clock_server.store.schema import alarm_table, application_table
from clock_server.store.sql import translate_errors

_C = alarm_table.c
WAITING_CAP = 100_000  # entries read per application at most
MAX_APPLICATIONS = 1_000  # pull applications read at most, by name


class SqlPullBacklog:
    """Each registered pull application's waiting messages."""

    def __init__(
        self, store: AlarmStore, cap: int = WAITING_CAP, max_applications: int = MAX_APPLICATIONS
    ) -> None:
        self.store = store
        self.cap = cap
        self.max_applications = max_applications

    def waiting(self, now_ms: int) -> dict[str, tuple[int, float]]:
        """Each registered pull application -> (messages waiting, at most `cap`; seconds the
        oldest has waited, 0 when none)."""
        a = application_table.c
        pulls = select(a.name).where(a.channel == PULL).order_by(a.name)
        out: dict[str, tuple[int, float]] = {}
        with translate_errors(), self.store.db.connect() as conn:
            names = [row[0] for row in conn.execute(pulls.limit(self.max_applications))]
            for name in names:
                ready = (
                    select(_C.next_try_time.label("ready_at"))
                    .where(
                        and_(
                            _C.application == name,
                            _C.status == DELIVERING,
                            _C.next_try_time <= now_ms,
                            _C.claimed_by == 0,
                        )
                    )
                    .order_by(_C.next_try_time)
                    .limit(self.cap)
                    .subquery()
                )
                count, oldest = conn.execute(select(func.count(), func.min(ready.c.ready_at))).one()
                age_s = (now_ms - int(oldest)) / 1000 if oldest is not None else 0.0
                out[name] = (int(count), age_s)
        return out
