"""A frequent job's lease: the holder writes once per half lease, another server asks once per
half lease, and a holder that stops leaves the job to another within one and a half leases.
On SQLite and MariaDB, through the store's own lease."""

from __future__ import annotations

import pytest

from clock_server.engine.job_leases import RUN, TAKE, WAIT, LeaseKeeper, lease_step
from clock_server.engine.schedule_planner import PLAN_LEASE_S, SchedulePlanner
from clock_server.store.alarms import AlarmStore
from clock_server.store.ports import Planned
from clock_server.store.purge import SqlJobLease
from clock_server.testing import SettableClock

LEASE_MS = 2_000


@pytest.mark.parametrize(
    ("now_ms", "held_until_ms", "ask_again_at_ms", "step"),
    [
        (0, 0, 0, TAKE),  # never asked
        (10_000, 12_000, 0, RUN),  # just taken: the whole lease left
        (10_999, 12_000, 0, RUN),  # more than half left
        (11_000, 12_000, 0, TAKE),  # half gone: renew
        (12_500, 12_000, 0, TAKE),  # lapsed (a long pause): take again if nobody has
        (10_000, 0, 11_000, WAIT),  # another held it: wait half a lease
        (10_999, 0, 11_000, WAIT),
        (11_000, 0, 11_000, TAKE),  # ask again
    ],
)
def test_the_step_of_a_lease(now_ms: int, held_until_ms: int, ask_again_at_ms: int, step: str):
    assert lease_step(now_ms, held_until_ms, ask_again_at_ms, LEASE_MS) == step


class _CountedLease:
    """The store's lease, counting the takes asked of it."""

    def __init__(self, store: AlarmStore) -> None:
        self.lease = SqlJobLease(store)
        self.takes = 0

    def take(self, name: str, owner: str, now_ms: int, until_ms: int) -> bool:
        self.takes += 1
        return self.lease.take(name, owner, now_ms, until_ms)


def test_two_servers_write_the_lease_once_per_half_lease_and_one_holds_it(
    store: AlarmStore, fake_clock: SettableClock
):
    leases = [_CountedLease(store), _CountedLease(store)]
    keepers = [LeaseKeeper(lease, "job", f"server-{i}", LEASE_MS) for i, lease in enumerate(leases)]
    runs = [0, 0]
    for _ in range(50):  # 10 s of runs every 200 ms
        for index, keeper in enumerate(keepers):
            runs[index] += keeper.holds(fake_clock.now_ms())
        fake_clock.advance(200)
    assert runs == [50, 0]
    assert [lease.takes for lease in leases] == [10, 10]


def test_a_holder_that_stops_leaves_the_job_to_another_within_one_and_a_half_leases(
    store: AlarmStore, fake_clock: SettableClock
):
    lease = SqlJobLease(store)
    holder = LeaseKeeper(lease, "job", "server-1", LEASE_MS)
    other = LeaseKeeper(lease, "job", "server-2", LEASE_MS)
    for _ in range(5):  # the holder renewed at 0 and 1,000 ms
        assert holder.holds(fake_clock.now_ms()) and not other.holds(fake_clock.now_ms())
        fake_clock.advance(200)
    stopped_ms = fake_clock.now_ms() - 200  # the holder's last run
    while not other.holds(fake_clock.now_ms()):
        fake_clock.advance(100)
        assert fake_clock.now_ms() - stopped_ms <= LEASE_MS * 3 // 2
    assert fake_clock.now_ms() - stopped_ms >= LEASE_MS // 2  # not before its lease ended
    assert not holder.holds(fake_clock.now_ms() + LEASE_MS // 2)  # it came back: it waits


class _Plans:
    def __init__(self) -> None:
        self.calls = 0

    def plan(self, now_ms: int, ahead_ms: int, limit: int = 200) -> Planned:
        self.calls += 1
        return Planned(0, None, 0, {})


def test_of_two_planners_one_plans_every_run_and_the_other_asks_once_a_second(
    store: AlarmStore, fake_clock: SettableClock
):
    leases = [_CountedLease(store), _CountedLease(store)]
    plans = [_Plans(), _Plans()]
    planners = [
        SchedulePlanner(plans[i], leases[i], fake_clock, owner=f"web-{i}", ahead_ms=30_000)
        for i in range(2)
    ]
    seconds = 10
    for _ in range(seconds * 5):
        for planner in planners:
            planner.run()
        fake_clock.advance(200)
    assert [p.calls for p in plans] == [seconds * 5, 0]
    per_second = 1 / (PLAN_LEASE_S / 2)
    assert [lease.takes for lease in leases] == [seconds * per_second] * 2
