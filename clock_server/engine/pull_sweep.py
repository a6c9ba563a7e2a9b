"""Finding the pull messages whose lease ended unacked or whose cutoff passed, when no puller
pulls again, by the server holding the job's lease: those past their cutoff expire, those
whose leases are spent die, the others' failed lease is recorded, as a pull finds them."""

from __future__ import annotations

import logging

from clock_server.metrics import Metrics
from clock_server.store.ports import JobLease, PullSweeper, PullSwept
from clock_server.timesource import Clock

log = logging.getLogger(__name__)

PULL_SWEEP_JOB = "sweep_pull_messages"


class PullSweep:
    """One run takes the job's lease, then sweeps every pull application's ready messages
    and counts what it found: expired, dead, and each a failed delivery attempt in the
    per-minute statistics."""

    def __init__(
        self,
        sweeper: PullSweeper,
        lease: JobLease,
        clock: Clock,
        metrics: Metrics,
        *,
        owner: str,
        interval_s: float,
    ) -> None:
        self.sweeper = sweeper
        self.lease = lease
        self.clock = clock
        self.metrics = metrics
        self.owner = owner
        self.interval_s = interval_s
        self.lease_ms = int(interval_s * 2 * 1000)

    def run(self) -> PullSwept | None:
        """What the sweep found; None when another server holds the lease."""
        now_ms = self.clock.now_ms()
        if not self.lease.take(PULL_SWEEP_JOB, self.owner, now_ms, now_ms + self.lease_ms):
            return None
        swept = self.sweeper.sweep(now_ms)
        self.metrics.count_pull_lapses(now_ms, swept.expired, swept.dead, swept.retried)
        if swept.expired or swept.dead or swept.retried:
            log.warning(
                "pull messages whose lease ended unacked or cutoff passed, with no pull to find"
                " them: expired %s, dead %s, ready again %s",
                dict(swept.expired),
                dict(swept.dead),
                dict(swept.retried),
                extra={"action": "pull_messages_swept"},
            )
        return swept
