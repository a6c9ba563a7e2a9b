"""`clock-server serve`: the API and the engine in one process, or the supervisor of several."""

from __future__ import annotations

import logging
import time

from clock_server.api.request_guard import RequestGuard
from clock_server.api.tokens import LiveTokens, TokenTable, check_exposure, load_tokens
from clock_server.runtime.build import build
from clock_server.runtime.http_server import create_http_server, stop_requests_by
from clock_server.runtime.process import freeze_startup_objects
from clock_server.runtime.signals import ReloadSignal, ShutdownSignals
from clock_server.runtime.supervisor import Supervisor
from clock_server.runtime.token_reload import TokenReloads
from clock_server.settings import Settings, mask_url

log = logging.getLogger(__name__)


class _Shutdown(SystemExit):
    """Raised in the main thread by the first signal: it ends waitress's loop."""


def serve(settings: Settings) -> None:
    """Run the API under waitress and the engine until SIGTERM or SIGINT; a second one exits.

    With CLOCK_WEB_PROCESSES > 1 the API runs in that many worker processes instead. SIGHUP
    reads CLOCK_TOKENS_FILE again (token_reload), as does a change of the file."""
    tokens = load_tokens(settings.tokens, settings.tokens_file)
    check_exposure(settings.host, tokens, settings.allow_unauthenticated)
    RequestGuard.build(settings, tokens)  # the Host names and origins served, or ConfigError
    log.info(
        "clock-server %s starting: database %s, broker %s, listening on %s:%d",
        settings.instance_id,
        mask_url(settings.database_url),
        settings.describe()["amqp_url"],
        settings.host,
        settings.port,
        extra={"action": "server_starting"},
    )
    log.info("settings: %s", settings.describe(), extra={"action": "server_settings"})
    log_authentication(settings, tokens)
    log_secret_keys(settings)
    if settings.web_processes > 1:
        supervisor = Supervisor(settings)
        with ReloadSignal(supervisor.reload_tokens):
            supervisor.run()
        return
    live = LiveTokens(tokens)
    reloads = TokenReloads(settings.tokens_file, live)
    with ReloadSignal(reloads.request):
        _serve_one_process(settings, live, reloads)


def _serve_one_process(settings: Settings, tokens: LiveTokens, reloads: TokenReloads) -> None:
    runtime = build(settings, tokens=tokens)
    assert runtime.app is not None
    server = create_http_server(runtime.app, settings)
    freeze_startup_objects()
    runtime.start()
    reloads.start()

    def on_first() -> None:
        stop_requests_by(server, signals.deadline_or_new())
        raise _Shutdown(0)

    with ShutdownSignals(settings.shutdown_timeout_s, on_first) as signals:
        started = time.monotonic()
        try:
            log.info("serving on http://%s:%s", settings.host,
                     server.effective_port,
                     extra={"action": "server_ready"})  # fmt: skip
            server.run()  # returns once a signal has ended its loop and its requests
        except _Shutdown:  # a signal before the loop ran
            pass
        finally:
            log.info("shutting down after %.0f s", time.monotonic() - started,
                     extra={"action": "server_stopping"})  # fmt: skip
            deadline = signals.deadline_or_new()
            reloads.stop()
            server.close()
            runtime.stop(deadline)


def log_authentication(settings: Settings, tokens: TokenTable) -> None:
    """Say at start whether /v1 needs tokens; loudly when it does not. Never logs a token."""
    if tokens.enabled:
        log.info(
            "authentication on: %d bearer tokens",
            len(tokens),
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


def log_secret_keys(settings: Settings) -> None:
    """Say at start how webhook secrets are stored; a warning when unencrypted."""
    if settings.secret_keys:
        log.info("webhook secrets are stored encrypted (%d keys in CLOCK_SECRET_KEYS)",
                 len(settings.secret_keys.split(",")),
                 extra={"action": "secret_keys_on"})  # fmt: skip
        return
    log.warning(
        "webhook secrets are stored unencrypted in the database: set CLOCK_SECRET_KEYS to "
        "encrypt them, then run clock-server reencrypt-secrets",
        extra={"action": "secret_keys_off"},
    )
