"""Wiring the parts together and running them under one lifecycle."""

from __future__ import annotations

import gc
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import FrameType

from flask import Flask

from clock_server import migrate
from clock_server.amqp_publisher import AmqpPublisher
from clock_server.api import Services, create_app
from clock_server.api.app import DueNotifier, HealthSource
from clock_server.api.routes import max_body_bytes
from clock_server.auth import check_exposure
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
    app: Flask | None  # None in the engine process of a multi-process server
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


def build(settings: Settings, clock: Clock | None = None, serve_http: bool = True) -> Runtime:
    """Create every part from `settings`; nothing starts until Runtime.start()."""
    clock = clock or SystemClock()
    db_engine = make_engine(settings.database_url, settings.db_pool_size)
    store = AlarmStore(db_engine)
    if settings.migrate_on_start:
        migrate.upgrade(db_engine)
    metrics = Metrics()
    publisher = engine = app = None
    if settings.run_engine:
        publisher = AmqpPublisher(
            settings.amqp_url,
            exchange=settings.exchange,
            declare_queues=settings.declare_queues,
            queue_prefix=settings.queue_prefix,
        )
        engine = Engine(settings, store, publisher, clock, metrics)
    if serve_http:
        app = create_app(Services(settings, store, clock, metrics, engine, publisher))
    maintenance = Maintenance(store, clock, metrics)
    return Runtime(settings, store, app, engine, publisher, maintenance)


def build_web(
    settings: Settings, notifier: DueNotifier, broker: HealthSource
) -> tuple[Flask, AlarmStore]:
    """The HTTP side alone, for a web worker process: its own pool, the engine elsewhere."""
    store = AlarmStore(make_engine(settings.database_url, settings.db_pool_size))
    services = Services(settings, store, SystemClock(), Metrics(), notifier, broker)
    return create_app(services), store


def create_http_server(app: Flask, settings: Settings, sockets: list[socket.socket] | None = None):  # type: ignore[no-untyped-def]
    """A waitress server for `app` on host:port, or on already-bound `sockets`."""
    import waitress

    where: dict[str, object] = {"sockets": sockets} if sockets else {
        "host": settings.host, "port": settings.port}  # fmt: skip
    server = waitress.create_server(
        app,
        threads=settings.http_threads,
        ident="clock",
        clear_untrusted_proxy_headers=True,
        # refuse at once a body no route would take, instead of buffering up to 1 GiB of it
        max_request_body_size=max_body_bytes(settings),
        **where,
    )
    # waitress warns for every request that waits for a thread: thousands of lines a second
    # under load (and a log record made for each, in its one IO thread), when a line now and
    # then says the same.
    server.task_dispatcher.queue_logger = ThrottledLogger(logging.getLogger("waitress.queue"), 10.0)
    return server


class ThrottledLogger:
    """Stands in for a logger: one warning per `seconds` goes through, saying how many were
    held back meanwhile. The time is checked before any log record is made."""

    def __init__(
        self,
        logger: logging.Logger,
        seconds: float,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.seconds = seconds
        self.monotonic = monotonic
        self._next = 0.0
        self._held = 0
        self._lock = threading.Lock()

    def warning(self, message: str, *args: object) -> None:
        now = self.monotonic()
        with self._lock:
            if now < self._next:
                self._held += 1
                return
            held, self._held, self._next = self._held, 0, now + self.seconds
        if held:
            message = f"{message} ({held} similar messages in the last {self.seconds:g} s)"
        self.logger.warning(message, *args)


def serve(settings: Settings) -> None:
    """Run the API under waitress and the engine until SIGTERM or SIGINT; a second one exits.

    With CLOCK_WEB_PROCESSES > 1 the API runs in that many worker processes instead."""
    check_exposure(settings.host, settings.token_table, settings.allow_unauthenticated)
    log.info(
        "clock-server starting: database %s, broker %s, listening on %s:%d",
        mask_url(settings.database_url),
        mask_url(settings.amqp_url),
        settings.host,
        settings.port,
        extra={"action": "server_starting"},
    )
    log.info("settings: %s", settings.describe())
    log_authentication(settings)
    if settings.web_processes > 1:
        from clock_server.supervisor import Supervisor

        Supervisor(settings).run()
        return
    runtime = build(settings)
    assert runtime.app is not None
    server = create_http_server(runtime.app, settings)
    freeze_startup_objects()
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


def freeze_startup_objects() -> None:
    """Keep what start-up built out of the garbage collector's full passes.

    Modules, Flask, SQLAlchemy's metadata and the like are about 100,000 objects that live as
    long as the process. A full collection walked them all holding the interpreter lock for
    50-75 ms, the worst lateness of a steady run; frozen, they are never walked again.
    """
    gc.collect()
    gc.freeze()


def log_authentication(settings: Settings) -> None:
    """Say at start whether /v1 needs tokens; loudly when it does not. Never logs a token."""
    if settings.token_table.enabled:
        log.info(
            "authentication on: %d bearer tokens",
            len(settings.token_table),
            extra={"action": "authentication_on"},
        )
        return
    log.warning(
        "AUTHENTICATION IS OFF: anyone who can reach %s:%d may read, change and cancel every "
        "alarm; set CLOCK_TOKENS or CLOCK_TOKENS_FILE",
        settings.host,
        settings.port,
        extra={"action": "authentication_off"},
    )


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
