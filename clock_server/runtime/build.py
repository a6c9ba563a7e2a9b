"""Building every part of one service instance from its settings; nothing starts here."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from clock_server.api import Services, create_app
from clock_server.api.services import DueNotifier, HealthSource, LoopSource
from clock_server.api.tokens import LiveTokens, TokenTable, load_tokens
from clock_server.broker.amqp_publisher import AmqpPublisher
from clock_server.broker.dead_letter_publisher import AmqpDeadLetterPublisher
from clock_server.deadline import Deadline
from clock_server.delivery.webhook_sender import HttpWebhookSender
from clock_server.engine.alarm_engine import AlarmEngine
from clock_server.engine.dead_letter_relay import DeadLetterRelay
from clock_server.engine.maintenance import Maintenance, RetentionPurge
from clock_server.errors import ConfigError
from clock_server.metrics import Metrics
from clock_server.settings import Settings
from clock_server.store import migrate
from clock_server.store.alarms import AlarmStore
from clock_server.store.applications import CachedPolicies, SqlApplicationRegistry
from clock_server.store.claims import SqlClaimStore
from clock_server.store.db import open_database
from clock_server.store.dead_letters import SqlDeadLetterOutbox
from clock_server.store.engine_registry import SqlEngineRegistry
from clock_server.store.pull_requeue import SqlPullRequeue
from clock_server.store.purge import SqlFinishedAlarmPurger, SqlJobLease
from clock_server.store.rate_buckets import SharedRateLimiter, SqlTokenBuckets
from clock_server.store.secret_box import SecretBox
from clock_server.store.stored_secrets import StoredSecrets
from clock_server.timesource import Clock, SystemClock

log = logging.getLogger(__name__)

WsgiApp = Callable[..., Iterable[bytes]]

# Of the time left at shutdown, the part the ring batches in flight may take before the
# publisher is closed under them (which fails their unconfirmed messages, so that they record
# retries instead of holding their claims until the lease ends).
RING_BATCH_SHARE = 0.7


@dataclass
class Runtime:
    """One service instance: the HTTP app and, unless disabled, the engine and its publisher."""

    settings: Settings
    store: AlarmStore
    app: WsgiApp | None  # None in the engine process of a multi-process server
    engine: AlarmEngine | None
    publisher: AmqpPublisher | None
    maintenance: Maintenance
    express_publisher: AmqpPublisher | None = None

    def start(self) -> None:
        for publisher in (self.publisher, self.express_publisher):
            if publisher is not None:
                publisher.start()
        if self.engine is not None:
            self.engine.start()
        self.maintenance.start()

    def stop(self, deadline: Deadline | None = None) -> None:
        """Stop claiming, hand claims back, let the ring batches finish, close the broker
        connection and the database pool, all before `deadline` (by default the settings'
        shutdown timeout from now)."""
        deadline = deadline or Deadline(self.settings.shutdown_timeout_s)
        self.maintenance.stop()
        if self.engine is not None:
            self.engine.stop(deadline.share(RING_BATCH_SHARE))
        for publisher in (self.publisher, self.express_publisher):
            if publisher is not None:
                publisher.close(deadline.remaining_s())
        if self.engine is not None:
            self.engine.finish(deadline)
        self.store.close()
        log.info("stopped", extra={"action": "server_stopped"})


def build(
    settings: Settings,
    clock: Clock | None = None,
    serve_http: bool = True,
    tokens: TokenTable | LiveTokens | None = None,
) -> Runtime:
    """Create every part from `settings`; nothing starts until Runtime.start(). The tokens
    are read from the settings' CLOCK_TOKENS or CLOCK_TOKENS_FILE unless given."""
    clock = clock or SystemClock()
    if tokens is None and serve_http:
        tokens = load_tokens(settings.tokens, settings.tokens_file)
    db = open_database(settings.database_url, settings.db_pool_size)
    store = AlarmStore(db)
    if settings.migrate_on_start:
        migrate.upgrade(db)
    box = SecretBox.from_setting(settings.secret_keys)
    check_secrets_open(StoredSecrets(store, box))
    metrics = Metrics()
    publisher = express_publisher = engine = app = None
    if settings.run_engine:
        publisher, express_publisher = (
            AmqpPublisher(
                settings.amqp_url,
                exchange=settings.exchange,
                declare_queues=settings.declare_queues,
                queue_prefix=settings.queue_prefix,
                queue_type=settings.queue_type,
                name=name,
                observe_confirm=metrics.confirm_latency.observe,
                ca_file=settings.amqp_ca_file,
            )
            for name in ("clock-publisher", "clock-publisher-express")
        )
        policies = CachedPolicies(
            SqlApplicationRegistry(store, box).all,
            clock.now_ms,
            int(settings.application_refresh_s * 1000),
        )
        engine = AlarmEngine(
            settings,
            SqlClaimStore(store, dead_letters=bool(settings.dead_letter_exchange)),
            SqlEngineRegistry(store),
            publisher,
            clock,
            metrics,
            policies,
            SharedRateLimiter(SqlTokenBuckets(store)),
            express_publisher,
            dead_letter_relay(settings, store, clock, metrics),
            HttpWebhookSender(allow_private=settings.webhook_allow_private),
        )
    if serve_http:
        assert tokens is not None
        services = Services(
            settings, store, clock, metrics, engine, publisher, tokens, loops=engine
        )
        app = create_app(services)
    purge = RetentionPurge(
        SqlFinishedAlarmPurger(store),
        SqlJobLease(store),
        clock,
        metrics,
        owner=settings.instance_id,
        retention_days=settings.retention_days,
        interval_s=settings.purge_interval_s,
        batch=settings.purge_batch,
    )
    maintenance = Maintenance(store, clock, metrics, purge=purge, requeue=SqlPullRequeue(store))
    return Runtime(settings, store, app, engine, publisher, maintenance, express_publisher)


def check_secrets_open(secrets: StoredSecrets) -> None:
    """Refuse to start when a stored webhook secret opens with none of CLOCK_SECRET_KEYS (a
    key dropped too soon, or none set), naming the applications."""
    unreadable = secrets.unreadable()
    if unreadable:
        shown = ", ".join(unreadable[:10]) + (", ..." if len(unreadable) > 10 else "")
        raise ConfigError(
            f"CLOCK_SECRET_KEYS opens none of the webhook secrets of {len(unreadable)} "
            f"applications ({shown}): give back the key that sealed them (any position after "
            "the first), or rotate those secrets",
            field="secret_keys",
        )


def dead_letter_relay(
    settings: Settings, store: AlarmStore, clock: Clock, metrics: Metrics
) -> DeadLetterRelay | None:
    """The relay of dead letters to CLOCK_DEAD_LETTER_EXCHANGE; None when that is empty."""
    if not settings.dead_letter_exchange:
        return None
    return DeadLetterRelay(
        SqlDeadLetterOutbox(store),
        SqlJobLease(store),
        AmqpDeadLetterPublisher(
            settings.amqp_url, settings.dead_letter_exchange, ca_file=settings.amqp_ca_file
        ),
        clock,
        metrics,
        owner=settings.instance_id,
        publish_timeout_s=settings.publish_timeout_s,
    )


def build_web(
    settings: Settings,
    notifier: DueNotifier,
    broker: HealthSource,
    loops: LoopSource | None = None,
    tokens: TokenTable | LiveTokens | None = None,
) -> tuple[WsgiApp, AlarmStore]:
    """The HTTP side alone, for a web worker process: its own pool, the engine elsewhere
    (`broker` and `loops` say how it is; no `loops`: /livez answers for this process alone).
    The tokens are read from the settings unless given."""
    if tokens is None:
        tokens = load_tokens(settings.tokens, settings.tokens_file)
    store = AlarmStore(open_database(settings.database_url, settings.db_pool_size))
    services = Services(
        settings, store, SystemClock(), Metrics(), notifier, broker, tokens, loops=loops
    )
    return create_app(services), store
