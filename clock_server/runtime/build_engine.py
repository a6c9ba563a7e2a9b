"""Building the engine: its ports on the store and the broker, then the parts its loops step.
Nothing starts here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from clock_server.broker.dead_letter_publisher import AmqpDeadLetterPublisher
from clock_server.broker.publisher import DeadLetterPublisher, Publisher
from clock_server.delivery.sender_port import WebhookSender
from clock_server.delivery.webhook_sender import HttpWebhookSender
from clock_server.engine.alarm_engine import AlarmEngine, EngineParts, Wakers
from clock_server.engine.backoff import RetryPolicy
from clock_server.engine.channels import Channels
from clock_server.engine.dead_letter_relay import DeadLetterRelay
from clock_server.engine.delivery_gate import DeliveryGate
from clock_server.engine.hand_offs import AmqpHandOff, DeliveringHandOff, HandOffs
from clock_server.engine.heap import ClaimHeap
from clock_server.engine.lead import LockLead
from clock_server.engine.liveness import Liveness
from clock_server.engine.loop import StepLoop, Waker
from clock_server.engine.outcomes import Outcomes
from clock_server.engine.preloader import Preloader
from clock_server.engine.ring_batch import BatchRinger
from clock_server.engine.ringer import Ringer
from clock_server.engine.slot_shares import SlotShare
from clock_server.engine.tuning import RingTuning
from clock_server.engine.webhook_recorder import WebhookRecorder
from clock_server.engine.webhooks import WebhookDispatcher
from clock_server.metrics import Metrics
from clock_server.model import Claim
from clock_server.settings import Settings
from clock_server.store.alarms import AlarmStore
from clock_server.store.applications import CachedPolicies, SqlApplicationRegistry
from clock_server.store.claims import SqlClaimStore
from clock_server.store.dead_letters import SqlDeadLetterOutbox
from clock_server.store.engine_registry import SqlEngineRegistry
from clock_server.store.ports import ApplicationPolicies, ClaimStore, EngineRegistry
from clock_server.store.purge import SqlJobLease
from clock_server.store.rate_buckets import SharedRateLimiter, SqlTokenBuckets
from clock_server.store.secret_box import SecretBox
from clock_server.timesource import Clock


@dataclass(frozen=True)
class EnginePorts:
    """What the engine reaches outside itself: the store's interfaces, the publishers and
    the webhook sender. Without `webhook_sender` no application may take the webhook and
    pull channels; without `dead_letters` dead alarms are not published."""

    claims: ClaimStore
    registry: EngineRegistry
    publisher: Publisher
    express_publisher: Publisher | None
    policies: ApplicationPolicies
    limiter: SharedRateLimiter
    webhook_sender: WebhookSender | None
    dead_letters: DeadLetterRelay | None


def build_engine(
    settings: Settings,
    store: AlarmStore,
    publisher: Publisher,
    clock: Clock,
    metrics: Metrics | None = None,
    *,
    express_publisher: Publisher | None = None,
    webhook_sender: WebhookSender | None = None,
    dead_letter_publisher: DeadLetterPublisher | None = None,
    registry: EngineRegistry | None = None,
    policies: ApplicationPolicies | None = None,
) -> AlarmEngine:
    """The engine on `store`, ringing on `publisher` (and its express lanes on
    `express_publisher`, by default `publisher` too), wired as the server wires it.

    By default the webhook calls go out by HTTP (`HttpWebhookSender`), the dead letters to
    the settings' dead-letter exchange by AMQP (none when CLOCK_DEAD_LETTER_EXCHANGE is
    empty), the registry of live engines and the applications' policies (read again every
    CLOCK_APPLICATION_REFRESH_S) are those of `store`; each may be given instead."""
    metrics = metrics or Metrics()
    if policies is None:
        box = SecretBox.from_setting(settings.secret_keys)
        refresh_ms = int(settings.application_refresh_s * 1000)
        policies = CachedPolicies(SqlApplicationRegistry(store, box).all, clock.now_ms, refresh_ms)
    if metrics.registered is None:
        metrics.use_registry(policies.listed)
    ports = EnginePorts(
        claims=SqlClaimStore(store, dead_letters=bool(settings.dead_letter_exchange)),
        registry=registry or SqlEngineRegistry(store),
        publisher=publisher,
        express_publisher=express_publisher,
        policies=policies,
        limiter=SharedRateLimiter(SqlTokenBuckets(store)),
        webhook_sender=webhook_sender
        or HttpWebhookSender(allow_private=settings.webhook_allow_private),
        dead_letters=dead_letter_relay(settings, store, clock, metrics, dead_letter_publisher),
    )
    return engine_of(settings, ports, clock, metrics)


def dead_letter_relay(
    settings: Settings,
    store: AlarmStore,
    clock: Clock,
    metrics: Metrics,
    publisher: DeadLetterPublisher | None = None,
) -> DeadLetterRelay | None:
    """The relay of dead letters to CLOCK_DEAD_LETTER_EXCHANGE, publishing on `publisher`
    (by default by AMQP to the settings' broker); None when that exchange is empty."""
    if not settings.dead_letter_exchange:
        return None
    return DeadLetterRelay(
        SqlDeadLetterOutbox(store),
        SqlJobLease(store),
        publisher
        or AmqpDeadLetterPublisher(
            settings.amqp_url, settings.dead_letter_exchange, ca_file=settings.amqp_ca_file
        ),
        clock,
        metrics,
        owner=settings.instance_id,
        publish_timeout_s=settings.publish_timeout_s,
    )


def engine_of(
    settings: Settings, ports: EnginePorts, clock: Clock, metrics: Metrics
) -> AlarmEngine:
    """The engine's parts around one heap, reaching outside only through `ports`."""
    tuning = RingTuning.from_settings(settings)
    heap = ClaimHeap(settings.heap_size)
    share = SlotShare()
    wakers = Wakers(*(Waker(clock) for _ in range(5)))

    def share_moved() -> None:
        """The engine's share of the slots moved: the preloader reads them from the start,
        now."""
        preloader.restart()
        wakers.preload.wake()

    liveness = Liveness(
        ports.registry,
        heap,
        clock,
        metrics,
        instance_id=settings.instance_id,
        lease_ms=settings.lease_ms,
        heartbeat_s=settings.heartbeat_s,
        dead_after_s=settings.engine_dead_after_s,
        on_claims_returned=wakers.preload.wake,  # the pass reads the marks they left
        share=share,
        on_share_moved=share_moved,
    )
    preloader = Preloader(
        ports.claims,
        ports.registry,
        heap,
        clock,
        wakers.ring,
        metrics,
        liveness.claiming,
        window_ms=settings.preload_window_ms,
        interval_s=settings.preload_interval_s,
        lease_ms=settings.lease_ms,
        batch=settings.claim_batch,
        backlog_ms=tuning.backlog_ms,
        slots=share.current,
        read_groups=settings.preload_read_groups,
    )
    retry = RetryPolicy(
        base_ms=int(settings.retry_base_s * 1000),
        cap_ms=int(settings.retry_cap_s * 1000),
        max_retries=settings.retry_max,
    )
    gate = DeliveryGate(ports.policies, ports.limiter, retry, metrics)
    on_dead = wakers.dead_letters.wake if ports.dead_letters is not None else None

    def hold_retries(claims: list[Claim]) -> None:
        if heap.push_many(claims).head_moved_earlier:
            wakers.ring.wake()

    webhooks = webhook_parts(
        settings, ports, clock, metrics, gate, wakers, on_dead, on_retry=hold_retries
    )
    channels = None
    if webhooks is not None:
        channels = Channels(ports.policies, webhooks[1], tuning.busy_webhook_wait_ms)
    ringer = ring_parts(
        tuning,
        ports,
        heap,
        clock,
        metrics,
        retry,
        publish_timeout_s=settings.publish_timeout_s,
        gate=gate,
        channels=channels,
        ring_waker=wakers.ring,
        on_dead=on_dead,
        engine_id=lambda: liveness.engine_id or 0,
    )
    parts = EngineParts(
        publisher=ports.publisher,
        claims=ports.claims,
        heap=heap,
        wakers=wakers,
        liveness=liveness,
        preloader=preloader,
        ringer=ringer,
        loops=[],
        webhooks=webhooks[1] if webhooks is not None else None,
        webhook_recorder=webhooks[0] if webhooks is not None else None,
        dead_letters=ports.dead_letters,
    )
    loops = engine_loops(settings, parts, metrics)
    return AlarmEngine(settings, clock, metrics, replace(parts, loops=loops))


def webhook_parts(
    settings: Settings,
    ports: EnginePorts,
    clock: Clock,
    metrics: Metrics,
    gate: DeliveryGate,
    wakers: Wakers,
    on_dead: Callable[[], None] | None,
    on_retry: Callable[[list[Claim]], None] | None = None,
) -> tuple[WebhookRecorder, WebhookDispatcher] | None:
    """The webhook calls' dispatcher and the recorder of their answers; None without a
    webhook sender."""
    if ports.webhook_sender is None:
        return None
    recorder = WebhookRecorder(
        ports.claims,
        clock,
        metrics,
        gate.retry_for,
        on_answer=wakers.webhook_answers.wake,
        on_dead=on_dead,
        on_retry=on_retry,
    )
    dispatcher = WebhookDispatcher(
        ports.webhook_sender,
        recorder,
        ports.policies,
        clock,
        timeout_s=settings.webhook_timeout_s,
        max_in_flight=settings.webhook_max_in_flight,
        on_room=wakers.ring.wake,
    )
    return recorder, dispatcher


def ring_parts(
    tuning: RingTuning,
    ports: EnginePorts,
    heap: ClaimHeap,
    clock: Clock,
    metrics: Metrics,
    retry: RetryPolicy,
    *,
    publish_timeout_s: float,
    gate: DeliveryGate | None,
    channels: Channels | None,
    ring_waker: Waker,
    on_dead: Callable[[], None] | None,
    engine_id: Callable[[], int] = lambda: 0,
) -> Ringer:
    """The ring path: the ring loop's `Ringer` (the dispatch policy carried out on its
    lanes), the ring batches it hands to them, which share one lock-ahead (`LockLead`), each
    channel's hand-off and the outcomes."""
    publisher = ports.publisher
    amqp = AmqpHandOff(publisher, ports.express_publisher or publisher, clock)
    hand_offs = HandOffs(amqp)
    if channels is not None:
        webhook = DeliveringHandOff(channels, clock, calls=True, gate=gate)
        hand_offs = HandOffs(amqp, webhook, DeliveringHandOff(channels, clock, calls=False))
    lead = LockLead(
        tuning.lead_floor_ms, tuning.lead_ceiling_ms, tuning.lead_window, tuning.lead_margin_ms
    )
    batches = BatchRinger(
        ports.claims,
        heap,
        clock,
        metrics,
        lead,
        hand_offs,
        Outcomes(clock, metrics, retry, gate),
        tuning,
        publish_timeout_s=publish_timeout_s,
        on_pushed_back=ring_waker.wake,
        channels=channels,
        on_dead=on_dead,
        engine_id=engine_id,
    )
    return Ringer(batches, tuning, gate=gate, on_lane_free=ring_waker.wake)


def engine_loops(settings: Settings, parts: EngineParts, metrics: Metrics) -> list[StepLoop]:
    """A thread-loop for each part that steps: preload, ring, liveness, and the dead-letter
    relay's and the webhook answers' when there are those; each counts its failed steps in
    clock_loop_errors_total."""
    wakers = parts.wakers

    def counted(loop: str) -> Callable[[], None]:
        return lambda: metrics.loop_error(loop)

    loops = [
        StepLoop("clock-preload", parts.preloader.run_once, wakers.preload,
                 on_error=counted("preload")),
        StepLoop("clock-ring", parts.ringer.run_once, wakers.ring, on_error=counted("ring")),
        StepLoop("clock-liveness", parts.liveness.run_once, wakers.liveness,
                 error_pause_s=settings.heartbeat_s, on_error=counted("liveness")),
    ]  # fmt: skip
    if parts.dead_letters is not None:
        loops.append(StepLoop("clock-dead-letters", parts.dead_letters.run_once,
                              wakers.dead_letters, on_error=counted("dead_letters")))  # fmt: skip
    recorder = parts.webhook_recorder
    if recorder is not None:
        answers = counted("webhook_answers")
        loops.append(StepLoop("clock-webhook-answers", recorder.run_once,
                              wakers.webhook_answers, on_error=answers))  # fmt: skip
    return loops
