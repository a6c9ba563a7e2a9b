"""Calling applications' webhooks: a bounded pool of calls per application, each answer
recorded as the ring batch records a publish."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from clock_server.deadline import Deadline
from clock_server.delivery.ports import WebhookOutcome, WebhookRequest, WebhookSender
from clock_server.engine.backoff import RetryPolicy
from clock_server.engine.messages import message_of
from clock_server.errors import Unavailable
from clock_server.metrics import Metrics
from clock_server.model import ApplicationPolicy, Claim, RingRow
from clock_server.store.ports import ApplicationPolicies, ClaimStore
from clock_server.timesource import Clock

log = logging.getLogger(__name__)

# Calls waiting for a free slot, per application, as a multiple of its bound on calls in
# flight: enough that a slot freed is filled at once, few enough that a slow endpoint does
# not gather alarms that a cancel would then find delivering.
QUEUED_PER_SLOT = 4
# How much longer than its timeout a call's alarm stays marked as delivering (the row's
# next_try_time); past it the row only says that the call outlived its timeout.
LEASE_MARGIN_MS = 5_000


class WebhookCall(NamedTuple):
    """An alarm handed to its webhook: the row as the ring batch locked it, and the version
    its hand-off gave it, which fences the answer's record."""

    row: RingRow
    version: int


class _Pool(NamedTuple):
    executor: ThreadPoolExecutor
    slots: int


class WebhookDispatcher:
    """POSTs the alarms handed to the webhook channel and records each answer.

    Each application has a pool of at most its `webhook_max_in_flight` calls at once, so a
    slow or dead endpoint ties up only its own threads and connections: `room` tells the
    ringer how many more of an application's alarms to hand off now, and the rest wait in the
    heap. An answer is recorded in a transaction of its own, fenced by the row's version: a
    2xx makes the alarm rung; anything else is a failed attempt, retried after the
    application's backoff (and no sooner than a 429's or 503's Retry-After) or dead after its
    last retry; past its cutoff it is expired, never sent.
    """

    def __init__(
        self,
        sender: WebhookSender,
        claims: ClaimStore,
        policies: ApplicationPolicies,
        clock: Clock,
        metrics: Metrics,
        retry_for: Callable[[str], RetryPolicy],
        *,
        timeout_s: float,
        max_in_flight: int,
        on_dead: Callable[[], None] | None = None,
    ) -> None:
        self.sender = sender
        self.claims = claims
        self.policies = policies
        self.clock = clock
        self.metrics = metrics
        self.retry_for = retry_for
        self.timeout_s = timeout_s
        self.max_in_flight = max_in_flight
        self.on_dead = on_dead
        self._pools: dict[str, _Pool] = {}
        self._queued: dict[str, int] = {}  # calls handed over and not finished, per application
        self._in_flight: dict[futures.Future[None], WebhookCall] = {}
        self._lock = threading.Lock()
        self._closed = False

    def lease_ms(self, application: str) -> int:
        """How long a handed-off alarm of `application` is marked as delivering."""
        return int(self._timeout_s(self.policies.policy(application)) * 1000) + LEASE_MARGIN_MS

    def room(self, application: str) -> int:
        """How many more of `application`'s alarms may be handed over now."""
        slots = self._slots(self.policies.policy(application))
        with self._lock:
            return max(slots * (1 + QUEUED_PER_SLOT) - self._queued.get(application, 0), 0)

    def dispatch(self, calls: Sequence[WebhookCall]) -> None:
        """Start each call in its application's pool."""
        for call in calls:
            application = call.row.application
            policy = self.policies.policy(application)
            with self._lock:
                if self._closed:
                    return
                pool = self._pool(application, self._slots(policy))
                self._queued[application] = self._queued.get(application, 0) + 1
                future = pool.executor.submit(self._call, call, policy)
                self._in_flight[future] = call
            future.add_done_callback(self._finished)

    @property
    def in_flight(self) -> int:
        """Calls handed over and not finished."""
        with self._lock:
            return len(self._in_flight)

    def close(self, deadline: Deadline) -> list[WebhookCall]:
        """Start no more calls and wait for those in flight until `deadline`; returns the
        calls never started, for the caller to give back (`in_flight` then says how many
        were still running)."""
        with self._lock:
            self._closed = True
            pools = list(self._pools.values())
            in_flight = dict(self._in_flight)
        never_started = [call for future, call in in_flight.items() if future.cancel()]
        for pool in pools:
            pool.executor.shutdown(wait=False)
        futures.wait([f for f in in_flight if not f.cancelled()], timeout=deadline.remaining_s())
        self.sender.close()
        return never_started

    def _finished(self, future: futures.Future[None]) -> None:
        with self._lock:
            call = self._in_flight.pop(future, None)
            if call is not None:
                application = call.row.application
                self._queued[application] = self._queued.get(application, 1) - 1

    def _pool(self, application: str, slots: int) -> _Pool:
        """The application's pool, made again when its bound changed (the old one finishes
        its calls)."""
        pool = self._pools.get(application)
        if pool is None or pool.slots != slots:
            if pool is not None:
                pool.executor.shutdown(wait=False)
            name = f"clock-webhook-{application[:20]}"
            pool = self._pools[application] = _Pool(ThreadPoolExecutor(slots, name), slots)
        return pool

    def _call(self, call: WebhookCall, policy: ApplicationPolicy) -> None:
        try:
            self._deliver(call, policy)
        except Exception:
            log.exception(
                "webhook call of alarm %d failed; it is sent again once its engine's claims "
                "are taken over",
                call.row.id,
                extra={"action": "webhook_error"},
            )

    def _deliver(self, call: WebhookCall, policy: ApplicationPolicy) -> None:
        row = call.row
        now_ms = self.clock.now_ms()
        if row.latest_ring_at is not None and row.latest_ring_at < now_ms:
            self._record(call, now_ms, expired=True)
            return
        if policy.webhook_url is None or policy.webhook_secret is None:
            outcome = WebhookOutcome(False, None, "no webhook_url or secret configured", None)
        else:
            request = WebhookRequest(
                url=policy.webhook_url,
                secret=policy.webhook_secret,
                message_id=str(row.id),
                body=message_of(row, now_ms).body,
                attempt=row.retry_times + 1,
                timeout_s=self._timeout_s(policy),
                max_connections=self._slots(policy),
                sent_at_s=now_ms / 1000,
            )
            outcome = self.sender.send(request)
        self._record(call, now_ms, outcome=outcome)

    def _record(
        self,
        call: WebhookCall,
        sent_at: int,
        outcome: WebhookOutcome | None = None,
        expired: bool = False,
    ) -> None:
        row = call.row
        application = row.application
        claim = Claim(sent_at, row.id, call.version, application)
        retry = self.retry_for(application)  # read before the transaction, as a ring batch does
        died = False
        try:
            with self.claims.delivery_transaction() as tx:
                if not tx.lock_live([claim]):
                    return  # taken over, cancelled or re-driven meanwhile
                now_ms = self.clock.now_ms()
                if expired:
                    tx.mark_expired([row.id], now_ms)
                elif outcome is not None and outcome.ok:
                    tx.mark_rung([(row.id, sent_at)], now_ms)
                else:
                    assert outcome is not None
                    error = outcome.error or "failed"
                    if retry.gives_up(row.retry_times + 1):
                        tx.mark_dead([row.id], now_ms, error)
                        died = True
                    else:
                        delay_ms = max(
                            retry.delay_ms(row.retry_times + 1), outcome.retry_after_ms or 0
                        )
                        tx.schedule_retries([(row.id, now_ms + delay_ms)], now_ms, error)
        except Unavailable as error:
            log.warning(
                "could not record the webhook answer of alarm %d: %s; it is sent again once "
                "its engine's claims are taken over",
                row.id,
                error,
                extra={"action": "webhook_record_failed"},
            )
            return
        self._count(application, outcome, expired, died)

    def _count(
        self, application: str, outcome: WebhookOutcome | None, expired: bool, died: bool
    ) -> None:
        metrics = self.metrics
        if expired:
            metrics.expired.labels(application).inc()
            return
        assert outcome is not None
        metrics.webhook_calls.labels(application, _outcome_label(outcome)).inc()
        if outcome.ok:
            metrics.rung.labels(application).inc()
            return
        metrics.publish_failures.inc()
        if died:
            metrics.dead.labels(application).inc()
            log.error(
                "an alarm of %s is dead after its last webhook attempt: %s",
                application,
                outcome.error,
                extra={"action": "alarm_dead", "dead": 1},
            )
            if self.on_dead is not None:
                self.on_dead()

    def _slots(self, policy: ApplicationPolicy) -> int:
        return policy.webhook_max_in_flight or self.max_in_flight

    def _timeout_s(self, policy: ApplicationPolicy) -> float:
        return policy.webhook_timeout_s or self.timeout_s


def _outcome_label(outcome: WebhookOutcome) -> str:
    """A few values for the metric's label: 2xx, 4xx, 5xx, or error (no answer)."""
    if outcome.status is None:
        return "error"
    return f"{outcome.status // 100}xx"
