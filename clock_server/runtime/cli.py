"""The `clock-server` command: `serve` (the default) runs the service, `migrate` migrates,
`hash-token` prints the hashed form of a bearer token read from standard input,
`reencrypt-secrets` seals every stored webhook secret with the first of CLOCK_SECRET_KEYS."""

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
from clock_server.runtime.process import configure_logging
from clock_server.settings import Settings, mask_url
from clock_server.store import migrate
from clock_server.store.alarms import AlarmStore
from clock_server.store.db import open_database
from clock_server.store.secret_box import SecretBox, SecretUnreadable
from clock_server.store.stored_secrets import StoredSecrets


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="clock-server",
        description="Alarm-clock service. Settings come from CLOCK_* environment variables.",
    )
    parser.add_argument(
        "command",
        nargs="?",
        default="serve",
        choices=["serve", "migrate", "hash-token", "reencrypt-secrets"],
    )
    parser.add_argument("--version", action="version", version=f"clock {__version__}")
    args = parser.parse_args(argv)
    if args.command == "hash-token":
        return hash_token()
    try:
        settings = Settings.from_env()
    except ConfigError as error:
        print(f"clock-server: bad configuration: {error.message}", file=sys.stderr)
        return 2
    configure_logging(settings.log_level)
    if args.command == "migrate":
        migrate.upgrade_url(settings.database_url)
        logging.getLogger(__name__).info("migrated %s", mask_url(settings.database_url))
        return 0
    if args.command == "reencrypt-secrets":
        return reencrypt_secrets(settings)
    if settings.web_processes > 1:
        _share_metrics_between_processes()
    # Imported here, not at the top: prometheus_client picks its storage (one process, or
    # files shared by several) when first imported, which the line above must come before.
    from clock_server.runtime.serve import serve

    try:
        serve(settings)
    except ConfigError as error:
        print(f"clock-server: bad configuration: {error.message}", file=sys.stderr)
        return 2
    return 0


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
        if settings.migrate_on_start:
            migrate.upgrade(store.db)
        secrets = StoredSecrets(store, SecretBox.from_setting(settings.secret_keys))
        try:
            changed = secrets.reseal()
        except SecretUnreadable as error:
            print(f"clock-server reencrypt-secrets: {error}", file=sys.stderr)
            return 2
    finally:
        store.close()
    logging.getLogger(__name__).info(
        "webhook secrets of %d applications sealed with the first key", changed
    )
    print(f"re-encrypted the webhook secrets of {changed} applications")
    return 0


def _share_metrics_between_processes() -> None:
    if "PROMETHEUS_MULTIPROC_DIR" not in os.environ:
        directory = tempfile.mkdtemp(prefix="clock-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
        atexit.register(shutil.rmtree, directory, True)


if __name__ == "__main__":
    sys.exit(main())
