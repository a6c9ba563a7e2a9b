"""Applying the Alembic migrations from inside the service."""

from __future__ import annotations

import logging
from pathlib import Path

from alembic.config import Config
from sqlalchemy import Engine

from alembic import command
from clock_server.store.db import open_database

log = logging.getLogger(__name__)


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


def upgrade(db: Engine, revision: str = "head") -> None:
    """Bring the database schema to `revision`."""
    config = Config()
    config.set_main_option("script_location", script_location())
    with db.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
    log.info("database schema is at %s", revision, extra={"action": "schema_migrated"})


def upgrade_url(url: str) -> None:
    """Bring the database at `url` to the newest schema (`clock-server migrate`)."""
    db = open_database(url)
    try:
        upgrade(db)
    finally:
        db.dispose()
