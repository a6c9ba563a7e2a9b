"""The engine: a preload loop and a ring loop around one bounded heap."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from clock_server.broker.publisher import Publisher
from clock_server.deadline import Deadline
from clock_server.engine.dead_letter_relay import DeadLetterRelay
from clock_server.engine.heap import ClaimHeap
from clock_server.engine.liveness import Liveness
from clock_server.engine.loop import StepLoop, Waker
from clock_server.engine.preloader import Preloader
from clock_server.engine.ringer import Ringer
from clock_server.engine.webhook_recorder import WebhookRecorder
from clock_server.engine.webhooks import WebhookDispatcher
from clock_server.metrics import Metrics
from clock_server.model import Claim
from clock_server.settings import Settings
from clock_server.store.ports import ClaimStore
from clock_server.timesource import Clock

log = logging.getLogger(__name__)

WAKE_MARGIN_MS = 500


def wake_horizon_ms(settings: Settings) -> int:
    """How soon an alarm must fall due to be worth waking the preloader for.

    The next regular pass comes within one interval and claims the whole window; only alarms
    due before then (plus time for the pass itself) need a wake-up."""
    return min(settings.preload_window_ms, int(settings.preload_interval_s * 1000) + WAKE_MARGIN_MS)


@dataclass(frozen=True)
class Wakers:
    """The wake-up of each of the engine's loops."""

    preload: Waker
    ring: Waker
    liveness: Waker
    dead_letters: Waker
    webhook_answers: Waker


@dataclass(frozen=True)
class EngineParts:
    """What an engine is made of, built by `clock_server.runtime.build_engine`: the loops
    (preload, ring, liveness, and the dead-letter relay's and webhook answers' when there are
    those) and the parts they step. Without `webhooks` no application takes the webhook or
    pull channel; without `dead_letters` dead alarms are not published."""

    publisher: Publisher
    claims: ClaimStore
    heap: ClaimHeap
    wakers: Wakers
    liveness: Liveness
    preloader: Preloader
    ringer: Ringer
    loops: Sequence[StepLoop]
    webhooks: WebhookDispatcher | None = None
    webhook_recorder: WebhookRecorder | None = None
    dead_letters: DeadLetterRelay | None = None


class AlarmEngine:
    """Claims alarms as they come within the window and rings them when due.

    Constructing it does nothing; start() starts its loops, stop() hands everything back.
    """

    def __init__(
        self, settings: Settings, clock: Clock, metrics: Metrics, parts: EngineParts
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.metrics = metrics
        self.publisher = parts.publisher
        self.claims = parts.claims
        self.heap = parts.heap
        self.preload_waker = parts.wakers.preload
        self.ring_waker = parts.wakers.ring
        self.liveness_waker = parts.wakers.liveness
        self.dead_letter_waker = parts.wakers.dead_letters
        self.webhook_waker = parts.wakers.webhook_answers
        self.dead_letters = parts.dead_letters
        self.liveness = parts.liveness
        self.preloader = parts.preloader
        self.webhooks = parts.webhooks
        self.webhook_recorder = parts.webhook_recorder
        self.ringer = parts.ringer
        self.tuning = parts.ringer.tuning
        self._loops = list(parts.loops)
        self._started = False
        self._gave_back = False
        self._wake_horizon_ms = wake_horizon_ms(settings)

    def start(self) -> None:
        try:
            # Join, and take over the engines that fell silent, before anything else: after
            # a crash and restart, the claims of the former process ring that much sooner.
            self.liveness.run_once()
            # a connection per lane and express lane, the preloader's, each group it reads
            # side by side, maintenance's
            self.claims.connect_ahead(self.tuning.connections + self.preloader.readers + 2)
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
        # The pass finds it by its id (a new alarm) or by the mark its move left (store.moves).
        self.preload_waker.wake_by(due_ms - WAKE_MARGIN_MS)

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
        self.preloader.close()
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
        """Drop what the heap holds: nothing was written to it, and the engines that share
        this one's slots once it has left the registry read them."""
        held = self.heap.drain()
        self._gave_back = True
        log.info(
            "engine stopped; left %d alarms it held to the other engines",
            len(held),
            extra={"action": "engine_stopped"},
        )
