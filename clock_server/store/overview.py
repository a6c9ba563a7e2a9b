"""What the operator's console shows on its overview, read with a bounded cost at any size.

InnoDB counts rows one by one, so an exact COUNT(*) over millions of alarms takes seconds.
Every count here is capped instead: it reads at most `cap` index entries (a LIMITed
subquery) and says when it stopped there, which the console shows as "at least". The pull
consumers' time from due to ack is read from the latest rings only: a rung alarm's
next_try_time is its ring time (a pulled one's, its ack), so the (status, next_try_time)
index lists the rings of the last minutes, newest first. The engine's lateness is in the
per-minute statistics (store/minute_stats.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, and_, func, select

from clock_server.model import DEAD, PENDING, PULL, RUNG, STATUSES
from clock_server.store.alarms import AlarmStore
from clock_server.store.schema import alarm_table, application_table
from clock_server.store.sql import translate_errors

_C = alarm_table.c


@dataclass(frozen=True)
class CappedCount:
    """A count that stopped at its cap: `capped` means "at least `count`"."""

    count: int
    capped: bool

    def to_json(self) -> dict[str, int | bool]:
        return {"count": self.count, "capped": self.capped}


@dataclass(frozen=True)
class Lateness:
    """How late the latest rings of a window were (rung_at - target_ring_at), in ms: for
    alarms of pull applications, from due to the pull consumer's ack."""

    window_ms: int
    sample: int  # rings read: the latest ones in the window, at most the sample cap
    p50_ms: int | None
    p99_ms: int | None
    max_ms: int | None


@dataclass(frozen=True)
class Overview:
    """Counts by status, by application (pending and dead), due soon, and the pull
    consumers' time from due to ack."""

    by_status: dict[str, CappedCount]
    by_application: dict[str, dict[str, CappedCount]]
    overdue: CappedCount
    due_within: dict[int, CappedCount]  # pending alarms due from now to now + the key (ms)
    pull_ack: Lateness


class OverviewReader:
    """Reads the overview; each count reads at most `cap` index entries."""

    def __init__(
        self,
        store: AlarmStore,
        cap: int = 100_000,
        application_cap: int = 10_000,
        max_applications: int = 100,
        lateness_sample: int = 2_000,
    ) -> None:
        self.store = store
        self.cap = cap
        self.application_cap = application_cap
        self.max_applications = max_applications
        self.lateness_sample = lateness_sample

    def read(self, now_ms: int, due_windows_ms: Sequence[int], lateness_window_ms: int) -> Overview:
        with translate_errors(), self.store.db.connect() as conn:
            by_status = {
                status: self._count(conn, _C.status == status, self.cap) for status in STATUSES
            }
            overdue = self._count(
                conn, and_(_C.status == PENDING, _C.next_try_time < now_ms), self.cap
            )
            due_within = {
                window: self._count(
                    conn,
                    and_(
                        _C.status == PENDING,
                        _C.next_try_time >= now_ms,
                        _C.next_try_time < now_ms + window,
                    ),
                    self.cap,
                )
                for window in due_windows_ms
            }
            by_application = {
                name: {
                    status: self._count(
                        conn,
                        and_(_C.application == name, _C.status == status),
                        self.application_cap,
                    )
                    for status in (PENDING, DEAD)
                }
                for name in self.applications(conn)
            }
            pull_ack = self._pull_ack(conn, now_ms, lateness_window_ms)
        return Overview(by_status, by_application, overdue, due_within, pull_ack)

    def applications(self, conn: Connection) -> list[str]:
        """The registered applications and those with alarms, by name, at most
        `max_applications`. The DISTINCT skips through an index that leads with the
        application, one application at a time, not every alarm; MariaDB does that only
        without a LIMIT, so there is none."""
        registered = select(application_table.c.name).limit(self.max_applications)
        with_alarms = select(_C.application).distinct()
        names = {row[0] for row in conn.execute(registered)}
        names.update(row[0] for row in conn.execute(with_alarms))
        return sorted(names)[: self.max_applications]

    def _count(self, conn: Connection, where: object, cap: int) -> CappedCount:
        limited = select(_C.id).where(where).limit(cap + 1).subquery()  # type: ignore[arg-type]
        counted = select(func.count()).select_from(limited)
        found = int(conn.execute(counted).scalar_one())
        return CappedCount(min(found, cap), found > cap)

    def _pull_ack(self, conn: Connection, now_ms: int, window_ms: int) -> Lateness:
        pulled = select(application_table.c.name).where(application_table.c.channel == PULL)
        query = (
            select(_C.rung_at - _C.target_ring_at)
            .where(
                and_(
                    _C.status == RUNG,
                    _C.next_try_time >= now_ms - window_ms,
                    _C.next_try_time <= now_ms,
                    _C.application.in_(pulled),
                )
            )
            .order_by(_C.next_try_time.desc())
            .limit(self.lateness_sample)
        )
        values = sorted(max(0, int(row[0])) for row in conn.execute(query) if row[0] is not None)
        if not values:
            return Lateness(window_ms, 0, None, None, None)
        return Lateness(
            window_ms, len(values), _percentile(values, 50), _percentile(values, 99), values[-1]
        )


def _percentile(ordered: list[int], percent: int) -> int:
    """The nearest-rank percentile of an ordered, non-empty list."""
    rank = -(-percent * len(ordered) // 100)  # ceil
    return ordered[max(rank, 1) - 1]
