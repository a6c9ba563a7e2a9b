"""A pull alarm becomes visible to pullers at its moment, not when the ring batch that gathered
it with later ones has rung them all; never before its moment either."""

from __future__ import annotations

import pytest

from clock_server.delivery.webhook_sender import HttpWebhookSender
from clock_server.model import ApplicationPolicy, NewAlarm
from clock_server.runtime.build_engine import build_engine
from clock_server.settings import Settings
from clock_server.store.alarms import AlarmStore
from clock_server.store.applications import CachedPolicies, SqlApplicationRegistry
from clock_server.store.pulls import RetryLimits, SqlPullQueue
from clock_server.testing import InMemoryPublisher, SettableClock

from .support import settle

pytestmark = pytest.mark.mariadb  # gathering needs row locks: SQLite gathers nothing


def test_a_gathered_pull_alarm_is_ready_at_its_moment(
    mariadb_store: AlarmStore, fake_clock: SettableClock
):
    store, clock = mariadb_store, fake_clock
    registry = SqlApplicationRegistry(store)
    registry.put(ApplicationPolicy(name="jobs", channel="pull"), clock.now_ms())
    registry.put(ApplicationPolicy(name="orders"), clock.now_ms())
    settings = Settings(instance_id="pull", ring_lead_ms=5, ring_gather_ms=50)
    publisher = InMemoryPublisher()
    engine = build_engine(
        settings,
        store,
        publisher,
        clock,
        policies=CachedPolicies(registry.all, clock.now_ms, 10**12),
        webhook_sender=HttpWebhookSender(allow_private=True),
    )
    now = clock.now_ms()
    first, second = now + 1_000, now + 1_040
    store.create_many(
        [
            NewAlarm("jobs", "a", "p", first, None),
            NewAlarm("jobs", "b", "p", second, None),
            NewAlarm("orders", "c", "p", second, None),  # in the same batch, on RabbitMQ
        ],
        now,
    )
    engine.preloader.run_once()
    clock.set(first - 5)  # one lead before the first
    settle(engine, clock)
    assert len(engine.heap) == 0  # one batch took all three, gathered
    queue = SqlPullQueue(store, dead_letters=False)

    def lease(at_ms: int) -> list[str]:
        leased = queue.lease("jobs", 10, at_ms, 5_000, RetryLimits(3))
        return [message.body["business_id"] for message in leased.messages]

    # The pull rows were handed off and committed at once, ready from their moments.
    assert {store.get("jobs", key).status for key in "ab"} == {"delivering"}
    assert lease(first - 1) == []
    assert lease(first) == ["a"]
    assert lease(second - 1) == []
    assert store.get("orders", "c").status == "pending"  # its lane waits for its moment
    clock.set(second)
    assert lease(second) == ["b"]
    settle(engine, clock)
    assert publisher.published[0].application == "orders"
