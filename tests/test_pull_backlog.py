"""The pull messages waiting for their pullers, and the age of the oldest, as /metrics shows
them: ready and not leased, each since its moment or the end of its last lease; capped. On
SQLite and MariaDB, with the engine on the fake clock."""

from __future__ import annotations

import pytest

from clock_server.store.alarms import AlarmStore
from clock_server.store.pull_backlog import SqlPullBacklog
from clock_server.testing import SettableClock
from tests.api_support import NOW
from tests.pull_harness import APP, VISIBILITY_MS, Harness


@pytest.fixture
def harness(store: AlarmStore, fake_clock: SettableClock) -> Harness:
    return Harness(store, fake_clock)


def scraped(h: Harness) -> tuple[float, float]:
    assert h.call("GET", "/metrics").status_code == 200
    return (
        h.metric("clock_pull_messages_waiting"),
        h.metric("clock_pull_oldest_waiting_seconds"),
    )


def test_waiting_counts_ready_messages_not_leased_and_ages_the_oldest(harness: Harness):
    h = harness
    for i, due in enumerate((NOW + 1_000, NOW + 2_000, NOW + 60_000)):
        h.create(f"m{i}", due)
    backlog = SqlPullBacklog(h.store)
    assert backlog.waiting(NOW) == {APP: (0, 0.0)}  # registered, nothing ready
    for moment in (NOW + 1_000, NOW + 2_000):  # each handed off at its moment
        h.clock.set(moment)
        h.step()
    h.clock.set(NOW + 4_500)
    assert backlog.waiting(NOW + 4_500) == {APP: (2, 3.5)}  # ready since NOW + 1 s
    assert SqlPullBacklog(h.store, cap=1).waiting(NOW + 4_500) == {APP: (1, 3.5)}
    assert scraped(h) == (2, 3.5)

    [leased] = h.pulled(max=1)
    assert leased["message"]["business_id"] == "m0"
    assert backlog.waiting(NOW + 4_500) == {APP: (1, 2.5)}  # m1, ready since NOW + 2 s
    h.clock.set(NOW + 4_500 + VISIBILITY_MS + 1_000)  # m0's lease ended 1 s ago, unacked
    assert backlog.waiting(h.clock.now_ms()) == {APP: (2, 2.5 + VISIBILITY_MS / 1000 + 1)}


def test_the_gauges_go_back_to_zero_once_the_messages_are_pulled(harness: Harness):
    h = harness
    h.create("m0", NOW + 1_000)
    h.clock.set(NOW + 1_000)
    h.step()
    h.clock.set(NOW + 1_250)
    assert scraped(h) == (1, 0.25)
    [leased] = h.pulled(max=1)
    assert h.ack([leased["id"]]).status_code == 200
    h.clock.set(NOW + 60_000)  # past the 5 s the last reading is kept
    assert scraped(h) == (0, 0)
