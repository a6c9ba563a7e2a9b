"""Rate limits that hold for the whole service: token buckets in `clock_rate_bucket`, one per
application and kind ("create", "ring"), shared by every process through the database.

A process does not write the bucket's row per request. It takes tokens in chunks (by default
50 ms of the rate) and spends them locally, and remembers an empty bucket until its next
token is due, so a row is written at most about 20 times a second per process, however many
requests arrive. The bounds this gives, over any span T with P processes:

- admitted <= burst + rate * T: every token comes out of the one bucket;
- admitted >= rate * T - P * chunk while demand lasts: a process holds at most one chunk it
  has not spent yet (tokens left when the policy changes are dropped).
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

from sqlalchemy import and_, select, update
from sqlalchemy.dialects.mysql import insert as mysql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from clock_server.errors import Unavailable
from clock_server.store.alarms import AlarmStore
from clock_server.store.ports import Grant
from clock_server.store.schema import rate_bucket_table
from clock_server.store.sql import translate_errors

CHUNK_S = 0.05


class SqlTokenBuckets:
    """Takes tokens from the shared buckets, each in one short transaction on its row."""

    def __init__(self, store: AlarmStore) -> None:
        self.store = store

    def take(
        self, application: str, kind: str, rate_per_s: float, burst: int, wanted: int, now_ms: int
    ) -> Grant:
        """Up to `wanted` tokens from a bucket of `burst` refilled at `rate_per_s`; when fewer
        are granted, how long until the next token is due."""
        c = rate_bucket_table.c
        key = and_(c.application == application, c.kind == kind)
        locked = select(c.tokens, c.refilled_at).where(key)
        if self.store.caps.row_locks:
            locked = locked.with_for_update()
        for _attempt in range(3):
            with translate_errors(), self.store.db.begin() as conn:
                row = conn.execute(locked).first()
                if row is not None:
                    elapsed_ms = max(now_ms - row.refilled_at, 0)
                    tokens = min(float(burst), row.tokens + elapsed_ms * rate_per_s / 1000)
                    granted = max(min(wanted, math.floor(tokens)), 0)
                    tokens -= granted
                    conn.execute(
                        update(rate_bucket_table)
                        .where(key)
                        .values(tokens=tokens, refilled_at=max(now_ms, row.refilled_at))
                    )
                    break
            # No bucket yet: created full in a transaction of its own, then taken from. Two
            # transactions that each inserted it after their locking read had found the gap
            # deadlocked on each other's gap lock.
            with translate_errors(), self.store.db.begin() as conn:
                conn.execute(self._insert_full(application, kind, burst, now_ms))
        else:
            raise Unavailable(f"the {kind} rate bucket of {application!r} could not be created")
        if granted == wanted:
            return Grant(granted, 0)
        return Grant(granted, max(1, math.ceil((1 - tokens) * 1000 / rate_per_s)))

    def _insert_full(self, application: str, kind: str, burst: int, now_ms: int):  # type: ignore[no-untyped-def]
        dialect = self.store.db.dialect.name
        maker = sqlite_insert if dialect == "sqlite" else mysql_insert
        values = {"application": application, "kind": kind, "tokens": burst, "refilled_at": now_ms}
        return (
            maker(rate_bucket_table)
            .values(**values)
            .prefix_with("OR IGNORE" if dialect == "sqlite" else "IGNORE")
        )


@dataclass
class _Local:
    rate_per_s: float
    burst: int
    tokens: int = 0
    empty_until_ms: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


class SharedRateLimiter:
    """A process's side of the shared buckets: tokens taken in chunks and spent locally."""

    def __init__(self, buckets: SqlTokenBuckets, chunk_s: float = CHUNK_S) -> None:
        self.buckets = buckets
        self.chunk_s = chunk_s
        self._local: dict[tuple[str, str], _Local] = {}
        self._lock = threading.Lock()

    def acquire(
        self, application: str, kind: str, rate_per_s: float, burst: int, wanted: int, now_ms: int
    ) -> Grant:
        """Up to `wanted` tokens; when fewer are granted, how long until the next is due."""
        local = self._local_for(application, kind, rate_per_s, burst)
        with local.lock:
            taken = min(wanted, local.tokens)
            local.tokens -= taken
            need = wanted - taken
            if need == 0:
                return Grant(taken, 0)
            if now_ms < local.empty_until_ms:
                return Grant(taken, local.empty_until_ms - now_ms)
            chunk = max(need, min(burst, math.ceil(rate_per_s * self.chunk_s)))
            grant = self.buckets.take(application, kind, rate_per_s, burst, chunk, now_ms)
            used = min(need, grant.granted)
            local.tokens += grant.granted - used
            if used < need:
                local.empty_until_ms = now_ms + grant.retry_after_ms
                return Grant(taken + used, grant.retry_after_ms)
            return Grant(taken + used, 0)

    def _local_for(self, application: str, kind: str, rate_per_s: float, burst: int) -> _Local:
        key = (application, kind)
        with self._lock:
            local = self._local.get(key)
            if local is None or local.rate_per_s != rate_per_s or local.burst != burst:
                local = _Local(rate_per_s, burst)
                self._local[key] = local
            return local
