"""Which channel each application's alarms take when they ring: published to RabbitMQ by the
ring batch, or handed off to a webhook or to pullers."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

from clock_server.engine.webhook_recorder import WebhookCall
from clock_server.engine.webhooks import WebhookDispatcher
from clock_server.model import PULL, WEBHOOK, ApplicationPolicy, Claim, RingRow
from clock_server.store.ports import ApplicationPolicies, RingTransaction


class Route(NamedTuple):
    """Where one application's alarms go, as of the start of a ring batch."""

    channel: str
    lease_ms: int  # a webhook call's: how long its alarm is marked as delivering
    policy: ApplicationPolicy  # its URL, secret, timeout and bound, for its webhook calls


class Channels:
    """Routes a ring batch's rows by their application's channel.

    An application on the webhook or pull channel has its alarms handed off by the ring batch
    that finds them due (`hand_offs`): in its transaction they become `delivering`
    (`hand_off`), each webhook call starting at its moment (`call`). A pull application's
    alarms then wait for its pullers (store.pulls).

    A ring batch reads its applications' routes (`routes`) before its transaction begins:
    reading the registry inside it would, on SQLite, wait for the very lock it holds.
    """

    def __init__(
        self, policies: ApplicationPolicies, webhooks: WebhookDispatcher, busy_wait_ms: int
    ) -> None:
        self.policies = policies
        self.webhooks = webhooks
        self.busy_wait_ms = busy_wait_ms  # `RingTuning.busy_webhook_wait_ms`
        # Set once a ring batch has met an application on the webhook channel: until then
        # the ring loop skips the per-pass work that only webhook applications need.
        self.webhooks_seen = False

    def caps(self, applications: Iterable[str]) -> dict[str, int]:
        """How many claims each webhook application among `applications` may have taken off
        the heap now: the room for more calls it has. The others are not capped."""
        if not self.webhooks_seen:
            return {}
        return {
            application: self.webhooks.room(application)
            for application in applications
            if self._channel(application) == WEBHOOK
        }

    def admit(self, due: list[Claim], now_ms: int) -> tuple[list[Claim], list[Claim]]:
        """Split claims about to ring into those that go now and those of webhook
        applications with no room for more calls, each due again a little later."""
        if not self.webhooks_seen:
            return due, []
        room: dict[str, int] = {}
        go: list[Claim] = []
        later: list[Claim] = []
        for claim in due:
            application = claim.application
            if application not in room:
                if self._channel(application) != WEBHOOK:
                    room[application] = len(due)
                else:
                    room[application] = self.webhooks.room(application)
            if room[application] > 0:
                room[application] -= 1
                go.append(claim)
            else:
                later.append(claim._replace(due_ms=max(claim.due_ms, now_ms) + self.busy_wait_ms))
        return go, later

    def routes(self, applications: Iterable[str]) -> dict[str, Route]:
        """Each application's route, from the registry as the cache has it."""
        routes = {}
        for application in set(applications):
            policy = self.policies.policy(application)
            lease_ms = 0
            if policy.channel == WEBHOOK:
                lease_ms, self.webhooks_seen = self.webhooks.lease_ms(policy), True
            routes[application] = Route(policy.channel, lease_ms, policy)
        return routes

    def call(
        self,
        handed: Sequence[tuple[RingRow, int]],
        claims: Mapping[int, Claim],
        routes: Mapping[str, Route],
        late_from: Mapping[int, int],
    ) -> None:
        """Start the webhook calls of `handed`, each (row, moment) called at its moment,
        never before, in its application's pool, its lateness counted from `late_from`. The
        ring batch holds their rows meanwhile: the answers are recorded once it has
        committed the hand-off (their record waits on the rows' locks)."""
        calls = [
            (
                WebhookCall(
                    row,
                    claims[row.id].version + 1,
                    at_ms,
                    late_from[row.id],
                    claims[row.id].slot,
                ),
                routes[row.application].policy,
            )
            for row, at_ms in handed
            if routes[row.application].channel == WEBHOOK
        ]
        if calls:
            self.webhooks.dispatch(calls)

    @staticmethod
    def hand_off(
        tx: RingTransaction,
        handed: Sequence[tuple[RingRow, int]],
        now_ms: int,
        routes: Mapping[str, Route],
    ) -> None:
        """Mark each (row, moment) delivering in the ring batch's transaction. A pull message
        is ready from its moment; a webhook call's alarm is marked until its moment, its
        timeout and a margin."""
        called: list[tuple[int, int]] = []
        ready: list[tuple[int, int]] = []
        for row, at_ms in handed:
            route = routes[row.application]
            if route.channel == PULL:
                ready.append((row.id, at_ms))
            else:
                called.append((row.id, at_ms + route.lease_ms))
        if called:
            tx.hand_off(called, now_ms, keep_claim=True)
        if ready:
            tx.hand_off(ready, now_ms, keep_claim=False)

    def _channel(self, application: str) -> str:
        return self.policies.policy(application).channel
