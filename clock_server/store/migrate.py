"""Applying the Alembic migrations from inside the service, and telling where a database's
schema stands against them (`clock-server db ...`)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from alembic.config import Config
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.util import CommandError
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from alembic import command
from clock_server.settings import mask_url
from clock_server.store.db import open_database
from clock_server.store.db_tls import check_connection

log = logging.getLogger(__name__)


class MigrationError(Exception):
    """A migration command could not run: the database failed or refused it."""


class UnknownRevision(MigrationError):
    """The revision asked for is not among this release's scripts, or not reachable from the
    database's revision in that direction."""


class SchemaFromNewerRelease(MigrationError):
    """The database is at a revision this release does not know: a newer release migrated it."""


@dataclass(frozen=True)
class Revision:
    """One migration script: its id, the one it follows, and the first line of its doc."""

    revision: str
    down_revision: str | None
    title: str


@dataclass(frozen=True)
class Moved:
    """Where a schema was before and after a command (None: no schema yet)."""

    before: str | None
    after: str | None


def script_location() -> str:
    """The migration scripts: the repository's alembic/ folder, or its installed copy."""
    package = Path(__file__).resolve().parent.parent
    checkout = package.parent / "alembic"
    if (checkout / "env.py").is_file():
        return str(checkout)
    installed = package / "migrations"
    if (installed / "env.py").is_file():
        return str(installed)
    raise FileNotFoundError("the Alembic migration scripts are not installed with clock_server")


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", script_location())
    return config


def _scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(_config())


def head() -> str:
    """The newest revision of this release's scripts."""
    newest = _scripts().get_current_head()
    assert newest is not None, "the migration scripts have no head"
    return newest


def history() -> list[Revision]:
    """Every revision of this release's scripts, newest first."""
    return [
        Revision(
            str(script.revision),
            str(script.down_revision) if script.down_revision else None,
            (script.doc or "").strip().splitlines()[0] if script.doc else "",
        )
        for script in _scripts().walk_revisions()
    ]


def current(db: Engine) -> str | None:
    """The database's revision, known to this release or not; None while it has no schema
    (before the first upgrade)."""
    with db.connect() as connection:
        return _current(connection)


def known(revision: str) -> bool:
    """Whether `revision` is one of this release's scripts."""
    try:
        _scripts().get_revision(revision)
    except CommandError:
        return False
    return True


def upgrade(db: Engine, revision: str = "head") -> Moved:
    """Bring the database schema up to `revision`. A database at a revision of a newer
    release raises SchemaFromNewerRelease, and an unknown `revision` UnknownRevision."""
    moved = _run(db, command.upgrade, revision)
    log.info("database schema is at %s", moved.after, extra={"action": "schema_migrated"})
    return moved


def upgrade_at_start(db: Engine) -> None:
    """`upgrade` to the head, as a server does at start with CLOCK_MIGRATE_ON_START. A
    database a newer release migrated is left as it is: under the expand/contract rule
    (docs/operations.md#schema) this release runs on the newer schema, as its servers still
    running do in a rolling upgrade."""
    try:
        upgrade(db)
    except SchemaFromNewerRelease as error:
        log.warning("%s; starting on it", error, extra={"action": "schema_newer"})


def downgrade(db: Engine, revision: str) -> Moved:
    """Bring the database schema down to `revision` ("base": no tables but alembic's own)."""
    moved = _run(db, command.downgrade, revision)
    log.info("database schema is at %s", moved.after, extra={"action": "schema_downgraded"})
    return moved


def upgrade_url(url: str, revision: str = "head") -> Moved:
    """`upgrade` on the database at `url` (`clock-server db upgrade`)."""
    with _database(url) as db:
        return upgrade(db, revision)


def downgrade_url(url: str, revision: str) -> Moved:
    """`downgrade` on the database at `url` (`clock-server db downgrade`)."""
    with _database(url) as db:
        return downgrade(db, revision)


def current_url(url: str) -> str | None:
    """`current` on the database at `url` (`clock-server db current`)."""
    with _database(url) as db:
        return current(db)


def _run(db: Engine, step: Callable[[Config, str], None], revision: str) -> Moved:
    config = _config()
    with db.begin() as connection:
        before = _current(connection)
        if before is not None and not known(before):
            raise SchemaFromNewerRelease(
                f"the database is at revision {before}, which this release does not know"
                f" (its newest is {head()}): a newer release migrated it"
            )
        config.attributes["connection"] = connection
        try:
            step(config, revision)
        except CommandError as error:
            raise UnknownRevision(f"revision {revision!r}: {error}") from error
        return Moved(before, _current(connection))


def _current(connection: Connection) -> str | None:
    heads = MigrationContext.configure(connection).get_current_heads()
    return heads[0] if heads else None


@contextmanager
def _database(url: str) -> Iterator[Engine]:
    """The database at `url` for one command; a failure of the database itself becomes a
    MigrationError that names the database without its password, and a TLS certificate
    refused a ConfigError (`db_tls.check_connection`)."""
    db = open_database(url, pool_size=1)
    try:
        check_connection(db)
        yield db
    except SQLAlchemyError as error:
        reason = getattr(error, "orig", None) or error
        raise MigrationError(f"database {mask_url(url)}: {reason}") from error
    finally:
        db.dispose()
