"""Deleting the per-minute statistics older than CLOCK_STATS_RETENTION_DAYS, by the server
holding the job's lease, in short transactions."""

from __future__ import annotations

import logging

from clock_server.minute_stats import minute_of
from clock_server.store.ports import JobLease, MinuteStatsSink
from clock_server.timesource import Clock

log = logging.getLogger(__name__)

STATS_PURGE_JOB = "purge_minute_stats"
DAY_MS = 86_400_000
BATCH = 1_000
# At most this many batches a run; what is left goes with the next run.
MAX_BATCHES = 100


class StatsPurge:
    """One run takes the job's lease, then deletes the rows of minutes older than the
    retention, `batch` rows a transaction."""

    def __init__(
        self,
        sink: MinuteStatsSink,
        lease: JobLease,
        clock: Clock,
        *,
        owner: str,
        retention_days: float,
        interval_s: float,
        batch: int = BATCH,
    ) -> None:
        self.sink = sink
        self.lease = lease
        self.clock = clock
        self.owner = owner
        self.retention_ms = int(retention_days * DAY_MS)
        self.interval_s = interval_s
        self.batch = batch
        self.lease_ms = int(interval_s * 2 * 1000)

    def run(self) -> int | None:
        """Rows deleted; None when another server holds the lease."""
        now_ms = self.clock.now_ms()
        if not self.lease.take(STATS_PURGE_JOB, self.owner, now_ms, now_ms + self.lease_ms):
            return None
        before = minute_of(now_ms - self.retention_ms)
        deleted = 0
        for _ in range(MAX_BATCHES):
            gone = self.sink.purge_before(before, self.batch)
            deleted += gone
            if gone == 0:
                break
        if deleted:
            log.info(
                "purged %d rows of per-minute statistics past their retention",
                deleted,
                extra={"action": "stats_purged", "purged": deleted},
            )
        return deleted
