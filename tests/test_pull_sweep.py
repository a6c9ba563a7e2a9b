"""The sweep of the pull channel: messages no puller comes back for are finished by the
maintenance job, as a pull would finish them, and never while a lease holds them. On the
fake clock, on SQLite and MariaDB."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from sqlalchemy import delete, func, select, text, update

from clock_server.engine.maintenance import Maintenance
from clock_server.engine.pull_sweep import PULL_SWEEP_JOB, PullSweep
from clock_server.metrics import Metrics
from clock_server.minute_stats import minute_of
from clock_server.model import ApplicationPolicy, NewAlarm
from clock_server.store.alarms import AlarmStore
from clock_server.store.applications import SqlApplicationRegistry
from clock_server.store.dead_letters import SqlDeadLetterOutbox
from clock_server.store.pull_sweep import SqlPullSweep, Swept
from clock_server.store.pulls import NOT_ACKED, RetryLimits, SqlPullQueue
from clock_server.store.purge import SqlJobLease
from clock_server.store.schema import (
    alarm_table,
    dead_letter_table,
    event_table,
    job_lease_table,
)
from clock_server.testing import SettableClock
from tests.api_support import NOW
from tests.pull_harness import APP, VISIBILITY_MS, Harness
from tests.support import metric_value, unique


def _harness(store: AlarmStore, clock: SettableClock, retry_max: int = 2) -> Harness:
    """The pull harness, with the sweep's job lease free for its own instance id."""
    with store.db.begin() as conn:
        conn.execute(delete(job_lease_table).where(job_lease_table.c.name == PULL_SWEEP_JOB))
    return Harness(store, clock, retry_max=retry_max)


@pytest.fixture
def harness(store: AlarmStore, fake_clock: SettableClock) -> Harness:
    return _harness(store, fake_clock)


def _sweep(h: Harness) -> Any:
    swept = h.runtime.maintenance.sweep_pulls()
    assert swept is not None
    return swept


def _leased(h: Harness, business_id: str) -> dict[str, Any]:
    """An alarm due at NOW + 1 s, rung and pulled once: its message, leased."""
    h.create(business_id, NOW + 1_000)
    h.clock.set(NOW + 1_000)
    h.step()
    [message] = h.pulled()
    return message


def _find(h: Harness, how: str) -> None:
    """Let the sweep or a pull find what is due of the pull channel now."""
    if how == "sweep":
        _sweep(h)
    else:
        assert h.pulled() == []


def _letters(h: Harness, key: str) -> list[Any]:
    return [
        (letter.attempts, letter.error, letter.died_at)
        for letter in SqlDeadLetterOutbox(h.store).next_letters(10_000)
        if (letter.application, letter.business_id) == (APP, key)
    ]


def _forget_letters(h: Harness, key: str) -> None:
    with h.store.db.begin() as conn:
        conn.execute(delete(dead_letter_table).where(dead_letter_table.c.business_id == key))


@pytest.mark.parametrize("how", ["sweep", "pull"])
def test_a_lease_ended_unacked_with_no_retry_left_is_dead_whoever_finds_it(
    store: AlarmStore, fake_clock: SettableClock, how: str
):
    h = _harness(store, fake_clock, retry_max=0)
    key = unique("gone-")
    h.create(key, NOW + 2_000)
    h.clock.set(NOW + 2_000)
    h.step()
    [message] = h.pulled()
    end = message["leased_until"]
    h.clock.set(end - 1)
    assert _sweep(h).dead == {}
    assert h.alarm(key)["status"] == "delivering"  # its lease still runs

    h.clock.set(end)
    _find(h, how)
    alarm = h.alarm(key)
    assert (alarm["status"], alarm["next_try_time"], alarm["retry_times"]) == ("dead", end, 1)
    assert [(e["at"], e["kind"], e["detail"]) for e in h.events(key)[1:]] == [
        (end, "attempt_failed", {"attempt": 1, "error": NOT_ACKED}),
        (end, "dead", {"attempts": 1, "error": NOT_ACKED}),
    ]
    assert _letters(h, key) == [(1, NOT_ACKED, end)]
    assert h.metric("clock_alarms_dead_total") == 1
    counted = h.metrics.minutes.take()
    assert (counted[minute_of(NOW + 2_000), APP].rung, counted[minute_of(end), APP].failed) == (
        1, 1,
    )  # fmt: skip
    assert sum(counts.failed for counts in counted.values()) == 1
    assert _sweep(h).dead == {}  # finished once
    assert h.ack([message["id"]]).get_json()["acked"] == []
    _forget_letters(h, key)


@pytest.mark.parametrize("how", ["sweep", "pull"])
@pytest.mark.parametrize("leased", [True, False])
def test_a_message_past_its_cutoff_expires_whoever_finds_it(
    harness: Harness, how: str, leased: bool
):
    h = harness
    cutoff = NOW + 1_000 + VISIBILITY_MS // 2
    h.create("late", NOW + 1_000, latest_ring_at=cutoff)
    h.clock.set(NOW + 1_000)
    h.step()
    if leased:
        [message] = h.pulled()
        h.clock.set(cutoff + 1)
        assert _sweep(h).expired == {}  # passed while its lease runs: its puller may ack
        found_at = message["leased_until"]
    else:
        found_at = cutoff + 1
    h.clock.set(found_at)
    _find(h, how)
    alarm = h.alarm("late")
    assert (alarm["status"], alarm["next_try_time"]) == ("expired", found_at)
    assert [(e["at"], e["kind"], e["detail"]) for e in h.events("late")[1:]] == [
        (found_at, "expired", {"latest_ring_at": cutoff, "attempts": int(leased)})
    ]
    assert h.metric("clock_alarms_expired_total") == 1
    counted = h.metrics.minutes.take()
    assert counted[minute_of(found_at), APP].failed == 1
    assert sum(counts.failed for counts in counted.values()) == 1


@pytest.mark.parametrize("how", ["sweep", "pull"])
def test_a_failed_lease_with_leases_left_is_recorded_once_whoever_finds_it(
    harness: Harness, how: str
):
    h = harness  # retry_max 2
    alarm_id = h.create("again", NOW + 1_000)
    h.clock.set(NOW + 1_000)
    h.step()
    [first] = h.pulled()
    found_at = first["leased_until"] + 1_000
    h.clock.set(found_at)
    h.metrics.minutes.take()
    if how == "sweep":
        swept = _sweep(h)
        assert (swept.expired, swept.dead, swept.retried) == ({}, {}, {APP: 1})
        assert _sweep(h).retried == {}  # recorded once
        alarm = h.alarm("again")
        assert (alarm["status"], alarm["retry_times"]) == ("delivering", 1)  # ready
        h.clock.set(found_at + 500)
    [again] = h.pulled()
    assert (again["id"], again["attempt"]) == (str(alarm_id), 2)
    failed_once = [
        (found_at, "attempt_failed", {"attempt": 1, "error": NOT_ACKED, "retry_at": found_at})
    ]
    assert [(e["at"], e["kind"], e["detail"]) for e in h.events("again")[1:]] == failed_once
    counted = h.metrics.minutes.take()
    assert counted[minute_of(found_at), APP].failed == 1
    assert sum(counts.failed for counts in counted.values()) == 1

    h.clock.set(again["leased_until"])  # the next lease ends unacked too
    assert _sweep(h).retried == {APP: 1}
    assert [(e["at"], e["kind"], e["detail"]) for e in h.events("again")[1:]] == [
        *failed_once,
        (again["leased_until"], "attempt_failed",
         {"attempt": 2, "error": NOT_ACKED, "retry_at": again["leased_until"]}),
    ]  # fmt: skip
    assert sum(counts.failed for counts in h.metrics.minutes.take().values()) == 1


def test_a_message_leased_again_before_the_sweep_is_left_to_its_puller(
    store: AlarmStore, fake_clock: SettableClock
):
    h = _harness(store, fake_clock, retry_max=1)
    first = _leased(h, "busy")
    h.clock.set(first["leased_until"])
    [second] = h.pulled()  # the last lease it may have
    assert second["attempt"] == 2
    assert _sweep(h).dead == {}
    assert h.alarm("busy")["status"] == "delivering"
    h.clock.set(second["leased_until"] - 1)
    assert _sweep(h).dead == {}
    assert h.ack([second["id"]]).get_json()["acked"] == [second["id"]]
    assert h.alarm("busy")["status"] == "rung"


def test_an_ack_between_the_sweeps_read_and_its_lock_wins(
    store: AlarmStore, fake_clock: SettableClock
):
    h = _harness(store, fake_clock, retry_max=0)
    message = _leased(h, "late-ack")
    h.clock.set(message["leased_until"])
    sweeper = SqlPullSweep(store, retry_max=0, dead_letters=True)
    read = sweeper._candidates  # the window between the read and the lock

    def then_acked(*args: Any) -> Any:
        found = read(*args)
        if found[1]:  # a lapsed candidate
            assert h.ack([message["id"]]).get_json()["acked"] == [message["id"]]
        return found

    sweeper._candidates = then_acked  # type: ignore[method-assign,assignment]
    assert sweeper.sweep(h.clock.now_ms()) == Swept()
    assert h.alarm("late-ack")["status"] == "rung"
    assert [e["kind"] for e in h.events("late-ack")[1:]] == ["rung"]


def _dying(store: AlarmStore, clock: SettableClock, count: int, retry_max: int = 0) -> list[int]:
    """`count` messages of a pull application with `retry_max`, each leased once and left
    unacked, their leases ended at the clock's time."""
    now = clock.now_ms()
    policy = ApplicationPolicy(name=APP, channel="pull", retry_max=retry_max)
    SqlApplicationRegistry(store).put(policy, now)
    ids = [store.create(NewAlarm(APP, unique("race-"), "p", now, None), now)[0].id
           for _ in range(count)]  # fmt: skip
    with store.db.begin() as conn:
        conn.execute(
            update(alarm_table)
            .where(alarm_table.c.id.in_(ids))
            .values(status="delivering", claimed_by=0, retry_times=1, next_try_time=now,
                    update_time=now - VISIBILITY_MS)
        )  # fmt: skip
    return ids


def test_a_run_reads_a_bounded_part_of_a_backlog_and_the_next_goes_on_from_there(
    store: AlarmStore, fake_clock: SettableClock
):
    [lapsed] = _dying(store, fake_clock, 1)
    now = fake_clock.now_ms()
    waiting = [store.create(NewAlarm(APP, unique("ready-"), "p", now, None), now)[0].id
               for _ in range(25)]  # fmt: skip
    with store.db.begin() as conn:  # ready for pullers, never leased, due before the lapsed
        conn.execute(
            update(alarm_table)
            .where(alarm_table.c.id.in_(waiting))
            .values(status="delivering", claimed_by=0, retry_times=0, next_try_time=now - 1)
        )
    sweeper = SqlPullSweep(store, retry_max=0, dead_letters=True, batch=4, max_examined=12)
    examined: list[int] = []
    read = sweeper._candidates

    def counted(*args: Any) -> Any:
        found = read(*args)
        examined.append(len(found[0]))
        return found

    sweeper._candidates = counted  # type: ignore[method-assign]
    assert sweeper.sweep(now) == Swept()  # 12 of the 25 ahead of it
    assert sweeper.sweep(now) == Swept()  # the next 12
    assert sweeper.sweep(now) == Swept(dead={APP: 1})  # the last one ahead, then it
    assert examined == [4, 4, 4, 4, 4, 4, 2]
    assert sweeper.sweep(now) == Swept()  # from the start again
    assert examined[7:] == [4, 4, 4]
    assert _deaths(store, [lapsed]) == [2]
    _forget_deaths(store, [lapsed])


def _deaths(store: AlarmStore, ids: list[int]) -> list[int]:
    """Each alarm's count of dead events and dead letters, in the order of `ids`."""
    with store.db.connect() as conn:
        events = conn.execute(
            select(event_table.c.alarm_id, func.count())
            .where(event_table.c.alarm_id.in_(ids), event_table.c.kind == "dead")
            .group_by(event_table.c.alarm_id)
        ).all()
        letters = conn.execute(
            select(dead_letter_table.c.alarm_id, func.count())
            .where(dead_letter_table.c.alarm_id.in_(ids))
            .group_by(dead_letter_table.c.alarm_id)
        ).all()
    counted: dict[int, int] = {alarm_id: count for alarm_id, count in events}
    for alarm_id, count in letters:
        counted[alarm_id] = counted.get(alarm_id, 0) + count
    return [counted.get(alarm_id, 0) for alarm_id in ids]


def _forget_deaths(store: AlarmStore, ids: list[int]) -> None:
    with store.db.begin() as conn:
        conn.execute(delete(dead_letter_table).where(dead_letter_table.c.alarm_id.in_(ids)))


@pytest.mark.mariadb
def test_a_message_a_pull_holds_locked_is_skipped_by_the_sweep(
    mariadb_store: AlarmStore, fake_clock: SettableClock
):
    store = mariadb_store
    [alarm_id] = _dying(store, fake_clock, 1)
    sweeper = SqlPullSweep(store, retry_max=0, dead_letters=True)
    with store.db.connect() as held:
        held.execute(text(f"SELECT id FROM clock WHERE id = {alarm_id} FOR UPDATE"))
        assert sweeper.sweep(fake_clock.now_ms()) == Swept()
        held.rollback()
    assert _deaths(store, [alarm_id]) == [0]
    assert sweeper.sweep(fake_clock.now_ms()) == Swept(dead={APP: 1})
    assert _deaths(store, [alarm_id]) == [2]  # its dead event and its dead letter
    _forget_deaths(store, [alarm_id])


@pytest.mark.mariadb
@pytest.mark.parametrize("retry_max", [0, 5])
def test_the_sweep_and_a_pull_at_the_same_time_never_both_find_a_message(
    mariadb_store: AlarmStore, fake_clock: SettableClock, retry_max: int
):
    store = mariadb_store
    ids = _dying(store, fake_clock, 60, retry_max)
    now = fake_clock.now_ms()
    sweeper = SqlPullSweep(store, retry_max=0, dead_letters=True, batch=7)
    queue = SqlPullQueue(store, dead_letters=True)
    start = threading.Barrier(2)
    found: dict[str, int] = {}

    def sweep() -> None:
        start.wait()
        swept = sweeper.sweep(now)
        found["sweep"] = swept.dead.get(APP, 0) + swept.retried.get(APP, 0)

    def pull() -> None:
        start.wait()
        count = 0
        for _ in range(12):
            leased = queue.lease(APP, 5, now, VISIBILITY_MS, RetryLimits(retry_max))
            count += leased.dead.get(APP, 0) + leased.retried.get(APP, 0)
        found["pull"] = count

    threads = [threading.Thread(target=sweep), threading.Thread(target=pull)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert found["sweep"] + found["pull"] == 60, found
    if retry_max == 0:
        assert _deaths(store, ids) == [2] * 60  # one dead event and one dead letter each
        _forget_deaths(store, ids)
    with store.db.connect() as conn:
        failed = conn.execute(
            select(event_table.c.alarm_id, func.count())
            .where(event_table.c.alarm_id.in_(ids), event_table.c.kind == "attempt_failed")
            .group_by(event_table.c.alarm_id)
        ).all()
    assert sorted(failed) == [(alarm_id, 1) for alarm_id in sorted(ids)]


class _FailingSweeper:
    def sweep(self, now_ms: int) -> Swept:
        raise RuntimeError("the database went away")


def test_a_failed_sweep_is_counted_and_tried_again_at_the_next_run(
    store: AlarmStore, fake_clock: SettableClock
):
    metrics = Metrics()
    lease = SqlJobLease(store)
    sweep = PullSweep(_FailingSweeper(), lease, fake_clock, metrics, owner="x", interval_s=15)
    maintenance = Maintenance(store, fake_clock, metrics, pull_sweep=sweep)
    with store.db.begin() as conn:
        conn.execute(delete(job_lease_table).where(job_lease_table.c.name == PULL_SWEEP_JOB))
    assert maintenance.sweep_pulls() is None
    assert maintenance.sweep_pulls() is None
    assert metric_value(metrics, "clock_loop_errors_total", {"loop": "pull_sweep"}) == 2
