"""The Alembic migrations build exactly the schema the code declares, and run again harmlessly."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from clock_server import migrate
from clock_server.db import make_engine
from clock_server.schema import metadata


def test_migrated_schema_matches_the_models(db_url: str):
    engine = make_engine(db_url, pool_size=1)
    migrate.upgrade(engine)  # a second upgrade is a no-op
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        differences = compare_metadata(context, metadata)
    engine.dispose()
    assert differences == []
