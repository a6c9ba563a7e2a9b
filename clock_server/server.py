"""Wiring the parts together and running them under one lifecycle."""

from __future__ import annotations

import logging
import os
import signal
import time
from dataclasses import dataclass
from types import FrameType

from flask import Flask

from clock_server import migrate
from clock_server.amqp_publisher import AmqpPublisher
from clock_server.api import Services, create_app
from clock_server.db import make_engine
from clock_server.engine import Engine
from clock_server.maintenance import Maintenance
from clock_server.metrics import Metrics
from clock_server.settings import Settings, mask_url
from clock_server.store import AlarmStore
from clock_server.timesource import Clock, SystemClock

log = logging.getLogger(__name__)


@dataclass
class Runtime:
    """One service instance: the HTTP app and, unless disabled, the engine and its publisher."""

    settings: Settings
    store: AlarmStore
    app: Flask
    engine: Engine | None
    publisher: AmqpPublisher | None
    maintenance: Maintenance

    def start(self) -> None:
        if self.publisher is not None:
            self.publisher.start()
        if self.engine is not None:
            self.engine.start()
        self.maintenance.start()

    def stop(self) -> None:
        """Engine first (stop claiming, finish the batch, hand claims back), then the rest."""
        if self.engine is not None:
            self.engine.stop()
        if self.publisher is not None:
            self.publisher.close()
        self.maintenance.stop()
        self.store.engine.dispose()
        log.info("stopped", extra={"action": "server_stopped"})


def build(settings: Settings, clock: Clock | None = None) -> Runtime:
    """Create every part from `settings`; nothing starts until Runtime.start()."""
    clock = clock or SystemClock()
    db_engine = make_engine(settings.database_url, settings.db_pool_size)
    store = AlarmStore(db_engine)
    if settings.migrate_on_start:
        migrate.upgrade(db_engine)
    metrics = Metrics()
    publisher = engine = None
    if settings.run_engine:
        publisher = AmqpPublisher(
            settings.amqp_url,
            exchange=settings.exchange,
            declare_queues=settings.declare_queues,
            queue_prefix=settings.queue_prefix,
        )
        engine = Engine(settings, store, publisher, clock, metrics)
    services = Services(settings, store, clock, metrics, engine=engine, publisher=publisher)
    maintenance = Maintenance(store, clock, metrics)
    return Runtime(settings, store, create_app(services), engine, publisher, maintenance)


def serve(settings: Settings) -> None:
    """Run the API under waitress and the engine until SIGTERM or SIGINT; a second one exits."""
    import waitress

    log.info(
        "clock-server starting: database %s, broker %s, listening on %s:%d",
        mask_url(settings.database_url),
        mask_url(settings.amqp_url),
        settings.host,
        settings.port,
        extra={"action": "server_starting"},
    )
    log.info("settings: %s", settings.describe())
    runtime = build(settings)
    server = waitress.create_server(
        runtime.app,
        host=settings.host,
        port=settings.port,
        threads=settings.http_threads,
        ident="clock",
        clear_untrusted_proxy_headers=True,
    )
    runtime.start()
    _install_signal_handlers()
    log.info(
        "serving on http://%s:%s",
        settings.host,
        server.effective_port,  # type: ignore[union-attr]
        extra={"action": "server_ready"},
    )
    started = time.monotonic()
    server.run()
    log.info("shutting down after %.0f s", time.monotonic() - started)
    server.close()
    runtime.stop()


class _Shutdown(SystemExit):
    pass


def _install_signal_handlers() -> None:
    state = {"asked": False}

    def handle(signum: int, _frame: FrameType | None) -> None:
        if state["asked"]:
            log.warning("second %s: exiting now", signal.Signals(signum).name)
            os._exit(1)
        state["asked"] = True
        log.info(
            "%s received: stopping",
            signal.Signals(signum).name,
            extra={"action": "shutdown_requested"},
        )
        raise _Shutdown(0)

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
