"""The composition root: every part of one service instance built from its settings, the
engine's by `build_engine` and the API's by `build_api`; nothing starts here."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from clock_server.api import create_app
from clock_server.api.services import DueNotifier, HealthSource, LoopSource
from clock_server.api.tokens import LiveTokens, TokenTable, load_tokens
from clock_server.broker.amqp_nodes import heartbeat_within
from clock_server.broker.amqp_publisher import AmqpPublisher
from clock_server.broker.publisher import DeadLetterPublisher, Publisher
from clock_server.deadline import Deadline
from clock_server.delivery.sender_port import WebhookSender
from clock_server.engine.alarm_engine import AlarmEngine
from clock_server.engine.maintenance import MAINTENANCE_INTERVAL_S, Maintenance, RetentionPurge
from clock_server.engine.pull_sweep import PullSweep
from clock_server.engine.schedule_planner import SchedulePlanner
from clock_server.engine.stats_purge import StatsPurge
from clock_server.engine.stats_writer import StatsWriter
from clock_server.errors import ConfigError
from clock_server.metrics import Metrics
from clock_server.runtime.build_api import build_services
from clock_server.runtime.build_engine import build_engine
from clock_server.settings import Settings
from clock_server.store import migrate
from clock_server.store.alarms import AlarmStore
from clock_server.store.db import open_database
from clock_server.store.db_tls import check_connection
from clock_server.store.minute_stats import SqlMinuteStats
from clock_server.store.ports import ApplicationPolicies
from clock_server.store.pull_requeue import SqlPullRequeue
from clock_server.store.pull_sweep import SqlPullSweep
from clock_server.store.purge import SqlFinishedAlarmPurger, SqlJobLease
from clock_server.store.schedules import SqlSchedules
from clock_server.store.secret_box import SecretBox
from clock_server.store.stored_secrets import StoredSecrets
from clock_server.timesource import Clock, SystemClock

log = logging.getLogger(__name__)

WsgiApp = Callable[..., Iterable[bytes]]

# Of the time left at shutdown, the part the ring batches in flight may take before the
# publisher is closed under them (which fails their unconfirmed messages, so that they record
# retries instead of holding their claims until the lease ends).
RING_BATCH_SHARE = 0.7


class StartingPublisher(Publisher, Protocol):
    """A publisher that connects when started (AmqpPublisher, or the in-memory twin)."""

    def start(self) -> None: ...


@dataclass
class Runtime:
    """One service instance: the HTTP app and, unless disabled, the engine and its publisher."""

    settings: Settings
    store: AlarmStore
    app: WsgiApp | None  # None in the engine process of a multi-process server
    engine: AlarmEngine | None
    publisher: StartingPublisher | None
    maintenance: Maintenance
    express_publisher: StartingPublisher | None = None
    stats: StatsWriter | None = None  # writes the per-minute statistics

    def start(self) -> None:
        for publisher in (self.publisher, self.express_publisher):
            if publisher is not None:
                publisher.start()
        if self.engine is not None:
            self.engine.start()
        self.maintenance.start()
        if self.stats is not None:
            self.stats.start()

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
        if self.stats is not None:
            self.stats.stop(min(deadline.remaining_s(), 1.0))
        self.store.close()
        log.info("stopped", extra={"action": "server_stopped"})


@dataclass(frozen=True)
class Given:
    """Parts handed to the root instead of the real ones (the in-memory twins, in tests):
    the publisher (and the express lanes' one, by default `publisher` too), the webhook
    sender, the dead-letter publisher, and the applications' policies as the engine reads
    them. Any left None is the real one."""

    publisher: StartingPublisher | None = None
    express_publisher: StartingPublisher | None = None
    webhook_sender: WebhookSender | None = None
    dead_letter_publisher: DeadLetterPublisher | None = None
    policies: ApplicationPolicies | None = None


REAL = Given()


def build(
    settings: Settings,
    clock: Clock | None = None,
    serve_http: bool = True,
    tokens: TokenTable | LiveTokens | None = None,
    given: Given = REAL,
) -> Runtime:
    """Create every part from `settings`; nothing starts until Runtime.start(). The tokens
    are read from the settings' CLOCK_TOKENS or CLOCK_TOKENS_FILE unless given. The
    database is the settings' (migrated first with CLOCK_MIGRATE_ON_START); `given` parts
    replace the real ones (`compose`)."""
    if tokens is None and serve_http:  # a bad tokens file is refused before the database
        tokens = load_tokens(settings.tokens, settings.tokens_file)
    store = open_store(settings)
    return compose(settings, store, clock or SystemClock(), serve_http, tokens, given)


def open_store(settings: Settings) -> AlarmStore:
    """The store on the settings' database, migrated with CLOCK_MIGRATE_ON_START; refuses a
    database whose TLS certificate is not trusted, and one whose webhook secrets
    CLOCK_SECRET_KEYS cannot open."""
    store = AlarmStore(open_database(settings.database_url, settings.db_pool_size))
    try:
        check_connection(store.db)
    except ConfigError:
        store.close()
        raise
    if settings.migrate_on_start:
        migrate.upgrade_at_start(store.db)
    check_secrets_open(StoredSecrets(store, SecretBox.from_setting(settings.secret_keys)))
    return store


def compose(
    settings: Settings,
    store: AlarmStore,
    clock: Clock,
    serve_http: bool = True,
    tokens: TokenTable | LiveTokens | None = None,
    given: Given = REAL,
) -> Runtime:
    """Every part on an open `store`, as the server wires them: the engine (unless
    CLOCK_RUN_ENGINE is off), the HTTP app (with `serve_http`), maintenance.

    By default the engine publishes by AMQP to the settings' broker, on two connections
    (the express lanes' apart), calls webhooks by HTTP, publishes dead letters by AMQP and
    reads the applications' policies from the store (see `build_engine`); `given` parts
    replace those."""
    if tokens is None and serve_http:
        tokens = load_tokens(settings.tokens, settings.tokens_file)
    metrics = Metrics()
    engine = app = None
    publisher, express_publisher = given.publisher, given.express_publisher
    if not settings.run_engine:
        publisher = express_publisher = None
    else:
        if publisher is None:
            publisher, express_publisher = amqp_publishers(settings, metrics)
        engine = build_engine(
            settings,
            store,
            publisher,
            clock,
            metrics,
            express_publisher=express_publisher,
            webhook_sender=given.webhook_sender,
            dead_letter_publisher=given.dead_letter_publisher,
            policies=given.policies,
        )
    if serve_http:
        services = build_services(
            settings, store, clock, metrics, engine, publisher, tokens, loops=engine
        )
        app = create_app(services)
    notify = engine.notify_due if engine is not None else None
    maintenance = build_maintenance(settings, store, clock, metrics, notify)
    stats = StatsWriter(metrics.minutes, SqlMinuteStats(store), clock)
    return Runtime(settings, store, app, engine, publisher, maintenance, express_publisher, stats)


def amqp_publishers(settings: Settings, metrics: Metrics) -> tuple[AmqpPublisher, AmqpPublisher]:
    """The ring lanes' publisher and the express lanes', each on its own connection to the
    settings' broker."""
    first, express = (
        AmqpPublisher(
            settings.amqp_url,
            exchange=settings.exchange,
            declare_queues=settings.declare_queues,
            queue_prefix=settings.queue_prefix,
            queue_type=settings.queue_type,
            name=name,
            observe_confirm=metrics.confirm_latency.observe,
            ca_file=settings.amqp_ca_file,
            # A live broker then says something within each publish timeout (waits_on_s).
            heartbeat_s=heartbeat_within(settings.publish_timeout_s),
        )
        for name in ("clock-publisher", "clock-publisher-express")
    )
    return first, express


def build_maintenance(
    settings: Settings,
    store: AlarmStore,
    clock: Clock,
    metrics: Metrics,
    notify: Callable[[int], None] | None = None,
) -> Maintenance:
    """The periodic jobs: the backlog gauge, the requeue and the sweep of pull messages,
    the schedules' planner with one process (waking this server's engine with `notify`; web
    workers plan instead when there are any), the retention purge, the statistics' purge."""
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
    stats_purge = StatsPurge(
        SqlMinuteStats(store),
        SqlJobLease(store),
        clock,
        owner=settings.instance_id,
        retention_days=settings.stats_retention_days,
        interval_s=settings.purge_interval_s,
    )
    sweeper = SqlPullSweep(
        store, settings.retry_max, dead_letters=bool(settings.dead_letter_exchange)
    )
    pull_sweep = PullSweep(
        sweeper,
        SqlJobLease(store),
        clock,
        metrics,
        owner=settings.instance_id,
        interval_s=MAINTENANCE_INTERVAL_S,
    )
    # With web workers, they plan the schedules (runtime/planner_thread.py).
    planner = None
    if settings.web_processes <= 1:
        planner = build_planner(settings, store, clock, metrics, notify, settings.instance_id)
    return Maintenance(
        store,
        clock,
        metrics,
        planner=planner,
        purge=purge,
        requeue=SqlPullRequeue(store),
        stats_purge=stats_purge,
        pull_sweep=pull_sweep,
    )


def build_planner(
    settings: Settings,
    store: AlarmStore,
    clock: Clock,
    metrics: Metrics,
    notify: Callable[[int], None] | None,
    owner: str,
) -> SchedulePlanner:
    """The schedules' planner, waking the engine with `notify` for occurrences made inside
    its preloaded window and counting them as alarms created (`clock_alarms_created`, the
    per-minute statistics) in `metrics`; `owner` names it in the job's lease."""

    def made(now_ms: int, by_application: Mapping[str, int]) -> None:
        metrics.count(metrics.created, by_application)
        metrics.minutes.created(now_ms, by_application)

    return SchedulePlanner(
        SqlSchedules(store),
        SqlJobLease(store),
        clock,
        owner=owner,
        ahead_ms=plan_ahead_ms(settings),
        notify=notify,
        on_made=made,
    )


def plan_ahead_ms(settings: Settings) -> int:
    """How long before its time an occurrence is made an alarm: before the preloader's window
    reaches it, with twenty planner runs to spare."""
    return settings.preload_window_ms + 20_000


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


def build_web(
    settings: Settings,
    notifier: DueNotifier,
    broker: HealthSource,
    loops: LoopSource | None = None,
    tokens: TokenTable | LiveTokens | None = None,
) -> tuple[WsgiApp, AlarmStore, StatsWriter, Metrics]:
    """The HTTP side alone, for a web worker process: its own pool, the engine elsewhere
    (`broker` and `loops` say how it is; no `loops`: /livez answers for this process alone),
    the writer of its per-minute statistics, to start, and its metrics. The tokens are read
    from the settings unless given."""
    if tokens is None:
        tokens = load_tokens(settings.tokens, settings.tokens_file)
    store = AlarmStore(open_database(settings.database_url, settings.db_pool_size))
    clock, metrics = SystemClock(), Metrics()
    services = build_services(
        settings, store, clock, metrics, notifier, broker, tokens, loops, "web"
    )
    stats = StatsWriter(metrics.minutes, SqlMinuteStats(store), clock)
    return create_app(services), store, stats, metrics
