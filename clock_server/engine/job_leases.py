"""Holding a frequent job's lease with few writes: when a server runs the job on the lease it
holds, when it takes or renews it, and when it waits because another holds it."""

from __future__ import annotations

from clock_server.store.ports import JobLease

RUN = "run"  # it holds the lease, with more than half of it left: no write
TAKE = "take"  # take the lease or renew it, and run if that succeeds
WAIT = "wait"  # another held it when it last asked: ask again later


def lease_step(now_ms: int, held_until_ms: int, ask_again_at_ms: int, lease_ms: int) -> str:
    """What a server does about a job's lease at `now_ms`: it holds the lease until
    `held_until_ms` (0: it does not), and may ask again at `ask_again_at_ms` after another
    server held it.

    The holder renews once half of its lease has passed, so it writes once per half lease,
    not every run; a server that did not get it asks again half a lease later. So a holder
    that died leaves the job to another within about one and a half leases."""
    if now_ms < held_until_ms - lease_ms // 2:
        return RUN
    if now_ms < ask_again_at_ms:
        return WAIT
    return TAKE


class LeaseKeeper:
    """Carries out `lease_step` for one job and one owner on `lease` (a JobLease)."""

    def __init__(self, lease: JobLease, job: str, owner: str, lease_ms: int) -> None:
        self.lease = lease
        self.job = job
        self.owner = owner
        self.lease_ms = lease_ms
        self._held_until_ms = 0
        self._ask_again_at_ms = 0

    def holds(self, now_ms: int) -> bool:
        """Whether this owner holds the job's lease now (taken or renewed if due)."""
        step = lease_step(now_ms, self._held_until_ms, self._ask_again_at_ms, self.lease_ms)
        if step == RUN:
            return True
        if step == WAIT:
            return False
        if self.lease.take(self.job, self.owner, now_ms, now_ms + self.lease_ms):
            self._held_until_ms = now_ms + self.lease_ms
            self._ask_again_at_ms = 0
            return True
        self._held_until_ms = 0
        self._ask_again_at_ms = now_ms + self.lease_ms // 2
        return False
