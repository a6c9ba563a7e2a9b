"""Calling applications' webhooks: a bounded pool of calls per application, whose answers
go to the WebhookRecorder."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

from clock_server.deadline import Deadline
from clock_server.delivery.sender_port import WebhookOutcome, WebhookRequest, WebhookSender
from clock_server.engine.messages import message_of
from clock_server.engine.webhook_recorder import Answer, WebhookCall, WebhookRecorder
from clock_server.model import ApplicationPolicy
from clock_server.store.ports import ApplicationPolicies
from clock_server.timesource import Clock

log = logging.getLogger(__name__)

# Calls waiting for a free slot, per application, as a multiple of its bound on calls in
# flight: enough that a slot freed is filled at once, few enough that a slow endpoint does
# not gather alarms that a cancel would then find delivering.
QUEUED_PER_SLOT = 4
# How much longer than its timeout a call's alarm stays marked as delivering (the row's
# next_try_time): the call ends by its deadline, and its answer is recorded after it, in a
# batch of answers.
LEASE_MARGIN_MS = 5_000


class _Pool(NamedTuple):
    executor: ThreadPoolExecutor
    slots: int


class WebhookDispatcher:
    """POSTs the alarms handed to the webhook channel and hands each answer to `recorder`.

    Each application has a pool of at most its `webhook_max_in_flight` calls at once, so a
    slow or dead endpoint ties up only its own threads and connections: `room` tells the
    ringer how many more of an application's alarms to hand off now, and the rest wait in the
    heap. An alarm past its cutoff when its turn comes is not sent: the recorder expires it.
    """

    def __init__(
        self,
        sender: WebhookSender,
        recorder: WebhookRecorder,
        policies: ApplicationPolicies,
        clock: Clock,
        *,
        timeout_s: float,
        max_in_flight: int,
        on_room: Callable[[], None] | None = None,
    ) -> None:
        self.sender = sender
        self.on_room = on_room  # an application with no room has room again
        self.recorder = recorder
        self.policies = policies
        self.clock = clock
        self.timeout_s = timeout_s
        self.max_in_flight = max_in_flight
        self._pools: dict[str, _Pool] = {}
        self._queued: dict[str, int] = {}  # calls handed over and not finished, per application
        self._in_flight: dict[futures.Future[None], WebhookCall] = {}
        self._lock = threading.Lock()
        self._closed = False

    def lease_ms(self, policy: ApplicationPolicy) -> int:
        """How long a handed-off alarm of the application is marked as delivering."""
        return int(self._timeout_s(policy) * 1000) + LEASE_MARGIN_MS

    def room(self, application: str) -> int:
        """How many more of `application`'s alarms may be handed over now."""
        slots = self._slots(self.policies.policy(application))
        with self._lock:
            return max(slots * (1 + QUEUED_PER_SLOT) - self._queued.get(application, 0), 0)

    def dispatch(self, calls: Sequence[tuple[WebhookCall, ApplicationPolicy]]) -> None:
        """Start each call in its application's pool, with the application's settings as
        given (read before the ring batch's transaction, which this runs inside)."""
        for call, policy in calls:
            application = call.row.application
            with self._lock:
                if self._closed:
                    return
                pool = self._pool(application, self._slots(policy))
                self._queued[application] = self._queued.get(application, 0) + 1
                future = pool.executor.submit(self._call, call, policy, self.clock.now_ms())
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
        refill = False
        with self._lock:
            call = self._in_flight.pop(future, None)
            if call is not None:
                application = call.row.application
                left = self._queued[application] = self._queued.get(application, 1) - 1
                # Woken once the queue has drained to the calls in flight, the ringer hands
                # over a pool's worth at once rather than one alarm per call that ends.
                slots = self._pools[application].slots if application in self._pools else 1
                refill = left == slots
        if refill and self.on_room is not None:
            self.on_room()

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

    def _call(self, call: WebhookCall, policy: ApplicationPolicy, queued_at_ms: int) -> None:
        # A call past its due time that waited in its pool, every call of its application
        # busy: that wait is the receiver's, counted apart from the engine's lateness.
        due_ms = max(queued_at_ms, call.late_from_ms or call.row.target_ring_at)
        slot_wait_ms = max(self.clock.now_ms() - due_ms, 0)
        try:
            self._deliver(call, policy, slot_wait_ms)
        except Exception as error:  # a failed attempt: retried, never left delivering
            log.exception(
                "webhook call of alarm %d failed", call.row.id, extra={"action": "webhook_error"}
            )
            self.recorder.metrics.loop_error("webhook_call")
            failed = WebhookOutcome(False, None, f"internal error: {error!r}"[:200], None)
            self.recorder.add(Answer(call, self.clock.now_ms(), failed))

    def _deliver(self, call: WebhookCall, policy: ApplicationPolicy, slot_wait_ms: int) -> None:
        row = call.row
        if call.at_ms > self.clock.now_ms():
            self.clock.sleep_until(call.at_ms)
        now_ms = self.clock.now_ms()
        if row.latest_ring_at is not None and row.latest_ring_at < now_ms:
            self.recorder.add(Answer(call, now_ms, None))
            return
        secrets = policy.signing_secrets(now_ms)
        took_s = None
        if policy.webhook_url is None or not secrets:
            outcome = WebhookOutcome(False, None, "no webhook_url or secret configured", None)
        else:
            request = WebhookRequest(
                url=policy.webhook_url,
                secrets=secrets,
                message_id=row.delivery_id,
                body=message_of(row, now_ms).body,
                attempt=row.retry_times + 1,
                timeout_s=self._timeout_s(policy),
                max_connections=self._slots(policy),
                sent_at_s=now_ms / 1000,
            )
            started = time.perf_counter()
            outcome = self.sender.send(request)
            took_s = time.perf_counter() - started
        self.recorder.add(Answer(call, now_ms, outcome, took_s, slot_wait_ms))

    def _slots(self, policy: ApplicationPolicy) -> int:
        return policy.webhook_max_in_flight or self.max_in_flight

    def _timeout_s(self, policy: ApplicationPolicy) -> float:
        return policy.webhook_timeout_s or self.timeout_s
