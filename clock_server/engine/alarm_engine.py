"""The engine: a preload loop and a ring loop around one bounded heap."""

from __future__ import annotations

import logging

from clock_server.broker.publisher import Publisher
from clock_server.deadline import Deadline
from clock_server.delivery.sender_port import WebhookSender
from clock_server.engine.backoff import RetryPolicy
from clock_server.engine.channels import Channels
from clock_server.engine.dead_letter_relay import DeadLetterRelay
from clock_server.engine.delivery_gate import DeliveryGate
from clock_server.engine.heap import ClaimHeap
from clock_server.engine.lead import LockLead
from clock_server.engine.liveness import Liveness
from clock_server.engine.loop import StepLoop, Waker
from clock_server.engine.preloader import Preloader
from clock_server.engine.ring_batch import BatchRinger
from clock_server.engine.ringer import EXPRESS_LANES, Ringer
from clock_server.engine.webhook_recorder import WebhookRecorder
from clock_server.engine.webhooks import WebhookDispatcher
from clock_server.metrics import Metrics
from clock_server.model import Claim
from clock_server.settings import Settings
from clock_server.store.ports import (
    ApplicationPolicies,
    ClaimStore,
    EngineRegistry,
    RateLimiter,
)
from clock_server.timesource import Clock

log = logging.getLogger(__name__)

WAKE_MARGIN_MS = 500
# An application with at most this many alarms due rings in an express lane beside a backlog.
FEW_DUE = 50


def wake_horizon_ms(settings: Settings) -> int:
    """How soon an alarm must fall due to be worth waking the preloader for.

    The next regular pass comes within one interval and claims the whole window; only alarms
    due before then (plus time for the pass itself) need a wake-up."""
    return min(settings.preload_window_ms, int(settings.preload_interval_s * 1000) + WAKE_MARGIN_MS)


class AlarmEngine:
    """Claims alarms as they come within the window and rings them when due.

    Constructing it does nothing; start() starts both loops, stop() hands everything back.
    """

    def __init__(
        self,
        settings: Settings,
        claims: ClaimStore,
        registry: EngineRegistry,
        publisher: Publisher,
        clock: Clock,
        metrics: Metrics,
        policies: ApplicationPolicies | None = None,
        limiter: RateLimiter | None = None,
        express_publisher: Publisher | None = None,
        dead_letters: DeadLetterRelay | None = None,
        webhook_sender: WebhookSender | None = None,
    ) -> None:
        """Without `policies` and `limiter` no application has delivery limits or retry
        policies of its own; without `express_publisher` the express ring lane publishes
        on `publisher` too; with `dead_letters`, a loop of its own runs the dead-letter
        relay, woken whenever a ring batch has marked alarms dead. With `policies` and
        `webhook_sender`, applications may take the webhook and pull channels."""
        self.settings = settings
        self.clock = clock
        self.metrics = metrics
        self.publisher = publisher
        self.claims = claims
        self.heap = ClaimHeap(settings.heap_size)
        self.preload_waker = Waker(clock)
        self.ring_waker = Waker(clock)
        self.liveness_waker = Waker(clock)
        self.dead_letter_waker = Waker(clock)
        self.dead_letters = dead_letters
        self.liveness = Liveness(
            registry,
            claims,
            self.heap,
            clock,
            metrics,
            instance_id=settings.instance_id,
            lease_ms=settings.lease_ms,
            heartbeat_s=settings.heartbeat_s,
            dead_after_s=settings.engine_dead_after_s,
            on_claims_returned=self._claims_returned,
        )
        self.preloader = Preloader(
            claims,
            self.heap,
            clock,
            self.ring_waker,
            metrics,
            self.liveness.claiming,
            window_ms=settings.preload_window_ms,
            interval_s=settings.preload_interval_s,
            lease_ms=settings.lease_ms,
            batch=settings.claim_batch,
        )
        retry = RetryPolicy(
            base_ms=int(settings.retry_base_s * 1000),
            cap_ms=int(settings.retry_cap_s * 1000),
            max_retries=settings.retry_max,
        )
        gate = None
        if policies is not None and limiter is not None:
            gate = DeliveryGate(policies, limiter, retry, metrics)
        on_dead = self.dead_letter_waker.wake if dead_letters is not None else None
        self.webhooks: WebhookDispatcher | None = None
        self.webhook_recorder: WebhookRecorder | None = None
        self.webhook_waker = Waker(clock)
        channels = None
        if policies is not None and webhook_sender is not None:
            self.webhook_recorder = WebhookRecorder(
                claims,
                clock,
                metrics,
                gate.retry_for if gate is not None else (lambda _application: retry),
                on_answer=self.webhook_waker.wake,
                on_dead=on_dead,
            )
            self.webhooks = WebhookDispatcher(
                webhook_sender,
                self.webhook_recorder,
                policies,
                clock,
                timeout_s=settings.webhook_timeout_s,
                max_in_flight=settings.webhook_max_in_flight,
                on_room=self.ring_waker.wake,
            )
            channels = Channels(policies, self.webhooks)
        batches = BatchRinger(
            claims,
            self.heap,
            publisher,
            clock,
            metrics,
            retry,
            LockLead(settings.ring_lead_ms, settings.ring_lead_max_ms),
            publish_timeout_s=settings.publish_timeout_s,
            few_due=FEW_DUE,
            on_pushed_back=self.ring_waker.wake,
            # Gathering is locking ahead too: off with it.
            gather_ms=settings.ring_gather_ms if settings.ring_lead_ms > 0 else 0,
            express_publisher=express_publisher,
            gate=gate,
            channels=channels,
            on_dead=on_dead,
        )
        self.ringer = Ringer(
            batches,
            batch=settings.ring_batch,
            lanes=settings.ring_lanes,
            on_lane_free=self.ring_waker.wake,
            hold_in_heap_ms=settings.preload_window_ms,
        )
        self._preload_loop = StepLoop("clock-preload", self.preloader.run_once, self.preload_waker)
        self._ring_loop = StepLoop("clock-ring", self.ringer.run_once, self.ring_waker)
        self._liveness_loop = StepLoop(
            "clock-liveness",
            self.liveness.run_once,
            self.liveness_waker,
            error_pause_s=settings.heartbeat_s,
        )
        self._loops = [self._preload_loop, self._ring_loop, self._liveness_loop]
        if dead_letters is not None:
            self._loops.append(
                StepLoop("clock-dead-letters", dead_letters.run_once, self.dead_letter_waker)
            )
        if self.webhook_recorder is not None:
            self._loops.append(
                StepLoop(
                    "clock-webhook-answers", self.webhook_recorder.run_once, self.webhook_waker
                )
            )
        self._started = False
        self._gave_back = False
        self._wake_horizon_ms = wake_horizon_ms(settings)

    def start(self) -> None:
        try:
            # a connection per lane and express lane, the preloader's, maintenance's
            self.claims.connect_ahead(self.settings.ring_lanes + EXPRESS_LANES + 2)
            self.liveness.join()
        except Exception as error:  # the loops connect and join when the database is back
            log.warning(
                "could not connect ahead or join the registry: %s",
                error,
                extra={"action": "connect_failed"},
            )
        for loop in reversed(self._loops):
            loop.start()
        self._started = True
        log.info("engine %s started", self.settings.instance_id, extra={"action": "engine_started"})

    def loop_beats(self) -> dict[str, int | None]:
        """Until when each loop is known to be well (`StepLoop.beat_ms`), by its thread's
        name, for /livez; empty unless the engine runs (between start() and stop())."""
        if not self._started:
            return {}
        return {loop.name: loop.beat_ms for loop in self._loops}

    def notify_due(self, due_ms: int) -> None:
        """An alarm was written that falls due at `due_ms`: if the next regular preload pass
        might come too late for it, make sure a pass starts by WAKE_MARGIN_MS before it is
        due. Not at once: at a steady rate of alarms created a second or so before they fall
        due, one pass then claims the alarms of many creates, not of one each."""
        if due_ms > self.clock.now_ms() + self._wake_horizon_ms:
            return
        self.preloader.rescan()
        self.preload_waker.wake_by(due_ms - WAKE_MARGIN_MS)

    def _claims_returned(self) -> None:
        """Alarms became due that the preloader's next pass may not see: it scans from the
        start, now."""
        self.preloader.rescan()
        self.preload_waker.wake()

    def stop(self, deadline: Deadline) -> None:
        """Stop claiming, give back what the heap holds, and let the ring batches in flight
        finish, all before `deadline`; finish() waits for stragglers again later."""
        if not self._started:
            return
        self._started = False
        for loop in self._loops:
            loop.stop()
        for loop in self._loops:
            if not loop.join(deadline.remaining_s()):
                log.error(
                    "%s did not stop in time", loop.name, extra={"action": "engine_stop_late"}
                )
        self._give_back()
        unfinished = self.ringer.close(deadline)
        self._leave_when_done(unfinished + self._close_webhooks(deadline))

    def finish(self, deadline: Deadline) -> None:
        """Wait for the ring batches still in flight until `deadline`. One still running then
        is abandoned: the engine stays in the registry, so other engines take its claims over
        once it is silent."""
        unfinished = self.ringer.close(deadline)
        if self.webhooks is not None:
            self._record_answers(deadline)
            unfinished += self._webhooks_unfinished()
        if unfinished:
            log.error(
                "%d ring batches or webhook calls still in flight at the shutdown deadline; "
                "another engine takes their alarms over once this one is silent",
                unfinished,
                extra={"action": "engine_stop_late"},
            )
        self._leave_when_done(unfinished)

    def _leave_when_done(self, unfinished: int) -> None:
        """Leave the registry once no ring batch holds claims; with one still in flight, stay
        listed, so that other engines take its claims over when this one falls silent."""
        if unfinished or not self._gave_back:
            return
        try:
            self.liveness.leave()
        except Exception as error:
            log.warning("could not leave the registry: %s", error, extra={"action": "leave_failed"})

    def _close_webhooks(self, deadline: Deadline) -> int:
        """Wait for the webhook calls in flight until `deadline`, record their answers and
        give back the alarms of calls never started; returns how many are unfinished."""
        if self.webhooks is None or self.webhook_recorder is None:
            return 0
        never_started = self.webhooks.close(deadline)
        self._record_answers(deadline)
        if never_started:
            claims = [
                Claim(0, call.row.id, call.version, call.row.application) for call in never_started
            ]
            try:
                self.claims.give_back_deliveries(claims, self.clock.now_ms())
            except Exception:
                log.exception(
                    "could not give back %d alarms handed to webhooks; another engine takes "
                    "them over once this one is silent",
                    len(claims),
                    extra={"action": "release_failed"},
                )
                return len(claims) + self._webhooks_unfinished()
        return self._webhooks_unfinished()

    def _webhooks_unfinished(self) -> int:
        """Webhook calls still running, and answers not recorded: while any is left, the
        engine stays in the registry, so that another takes their alarms over."""
        assert self.webhooks is not None and self.webhook_recorder is not None
        return self.webhooks.in_flight + self.webhook_recorder.waiting

    def _record_answers(self, deadline: Deadline) -> None:
        """Record the webhook answers still waiting (their loop has stopped), until
        `deadline`; those left then are sent again once another engine takes this one's
        alarms over."""
        assert self.webhook_recorder is not None
        while self.webhook_recorder.run_once() == 0.0 and deadline.remaining_s() > 0:
            pass

    def _give_back(self) -> None:
        held = self.heap.drain()
        try:
            released = self.claims.release(held, self.clock.now_ms())
        except Exception:
            log.exception(
                "could not give back %d claims; another engine takes them over once this one "
                "is silent",
                len(held),
                extra={"action": "release_failed"},
            )
            return
        self._gave_back = True
        log.info(
            "engine stopped; gave back %d of %d claims",
            released,
            len(held),
            extra={"action": "engine_stopped"},
        )
