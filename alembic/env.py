"""Alembic environment: runs on a connection handed over by clock_server.store.migrate, or on
CLOCK_DATABASE_URL when invoked as `alembic upgrade head` from the repository root."""

from __future__ import annotations

from sqlalchemy import create_engine

from alembic import context
from clock_server.settings import Settings
from clock_server.store.schema import metadata


def run_migrations() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_engine(Settings.from_env().database_url)
    with engine.connect() as conn:
        _run(conn)
    engine.dispose()


def _run(connection) -> None:  # type: ignore[no-untyped-def]
    context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
    with context.begin_transaction():
        context.run_migrations()


run_migrations()
