"""The `clock-server` command: `serve` (the default) runs the service, `db` migrates the
database up or down or says where it stands (`migrate` is `db upgrade`), `hash-token` prints
the hashed form of a bearer token read from standard input, `reencrypt-secrets` seals every
stored webhook secret with the first of CLOCK_SECRET_KEYS."""

from __future__ import annotations

import argparse
import atexit
import getpass
import logging
import os
import shutil
import sys
import tempfile

from clock_server import __version__
from clock_server.errors import ConfigError
from clock_server.runtime import db_commands
from clock_server.runtime.logs import configure_logging
from clock_server.settings import Settings
from clock_server.store import migrate
from clock_server.store.alarms import AlarmStore
from clock_server.store.db import open_database
from clock_server.store.db_tls import check_connection
from clock_server.store.secret_box import SecretBox, SecretUnreadable
from clock_server.store.stored_secrets import StoredSecrets

log = logging.getLogger(__name__)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "hash-token":
        return hash_token()
    try:
        settings = Settings.from_env()
    except ConfigError as error:
        print(f"clock-server: bad configuration: {error.message}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level, settings.log_format)
    if args.command == "migrate":  # the spelling of before `db upgrade`
        args = argparse.Namespace(command="db", db_action="upgrade", revision="head")
    try:
        if args.command == "db":
            return db_commands.run(args, settings)
        if args.command == "reencrypt-secrets":
            return reencrypt_secrets(settings)
    except ConfigError as error:
        print(f"clock-server: bad configuration: {error.message}", file=sys.stderr)
        return 2
    if settings.web_processes > 1:
        _share_metrics_between_processes()
    # Imported here, not at the top: prometheus_client picks its storage (one process, or
    # files shared by several) when first imported, which the line above must come before.
    from clock_server.runtime.serve import serve

    try:
        serve(settings)
    except ConfigError as error:
        if settings.log_format != "json":
            print(f"clock-server: bad configuration: {error.message}", file=sys.stderr)
        else:  # every line of standard error stays a JSON object
            log.error("bad configuration: %s", error.message,
                      extra={"action": "bad_configuration", "setting": error.field})  # fmt: skip
        return 2
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="clock-server",
        description="Alarm-clock service. Settings come from CLOCK_* environment variables.",
    )
    parser.add_argument("--version", action="version", version=f"clock {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="command")
    commands.add_parser("serve", help="run the service (the default)")
    db_commands.configure(
        commands.add_parser(
            "db",
            help="the database schema: upgrade, downgrade, current, history",
            description="Migrate the database of CLOCK_DATABASE_URL, or say where it stands.",
        )
    )
    commands.add_parser("migrate", help="the same as `db upgrade`")
    commands.add_parser("hash-token", help="print the hashed form of a token read from stdin")
    commands.add_parser(
        "reencrypt-secrets", help="seal the stored webhook secrets with the first secret key"
    )
    return parser


def hash_token() -> int:
    """Print the sha256:<hex> form of the token on standard input (asked for without echo on
    a terminal), for CLOCK_TOKENS or CLOCK_TOKENS_FILE; a token too weak is refused."""
    # Not at the top: importing the api package imports prometheus_client (see main).
    from clock_server.api.tokens import hashed_form

    token = getpass.getpass("token: ") if sys.stdin.isatty() else sys.stdin.read()
    try:
        print(hashed_form(token.strip()))
    except ConfigError as error:
        print(f"clock-server hash-token: {error.message}", file=sys.stderr)
        return 2
    return 0


def reencrypt_secrets(settings: Settings) -> int:
    """Seal every stored webhook secret with the first of CLOCK_SECRET_KEYS: plain ones, and
    those sealed with another of the keys (the step of a key rotation before the old key is
    dropped). Migrates first, as the server does."""
    if not settings.secret_keys:
        print("clock-server reencrypt-secrets: CLOCK_SECRET_KEYS is unset", file=sys.stderr)
        return 2
    store = AlarmStore(open_database(settings.database_url, pool_size=2))
    try:
        check_connection(store.db)
        if settings.migrate_on_start:
            migrate.upgrade_at_start(store.db)
        secrets = StoredSecrets(store, SecretBox.from_setting(settings.secret_keys))
        try:
            changed = secrets.reseal()
        except SecretUnreadable as error:
            print(f"clock-server reencrypt-secrets: {error}", file=sys.stderr)
            return 2
    finally:
        store.close()
    log.info("webhook secrets of %d applications sealed with the first key", changed,
             extra={"action": "secrets_resealed"})  # fmt: skip
    print(f"re-encrypted the webhook secrets of {changed} applications")
    return 0


def _share_metrics_between_processes() -> None:
    if "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
        directory = tempfile.mkdtemp(prefix="clock-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
        atexit.register(shutil.rmtree, directory, True)


if __name__ == "__main__":
    sys.exit(main())
