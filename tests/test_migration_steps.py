"""Every migration goes up, down and up again, on SQLite and MariaDB: each downgrade gives back
exactly the schema of the revision before, each upgrade again exactly its own, the head is the
models' schema, and the base holds no table of clock's."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, inspect

from clock_server.store import migrate
from clock_server.store.db import open_database
from clock_server.store.schema import metadata
from tests.support import mariadb_database

Schema = dict[str, object]


def schema_of(db: Engine) -> Schema:
    """Each table's columns (type, nullability, default), indexes, unique constraints and
    primary key, as the database reports them; alembic's own table left out. The order of
    the columns is not compared."""
    with db.connect() as conn:
        found = inspect(conn)
        return {
            table: {
                # By name: a downgrade that adds back a dropped column adds it last.
                "columns": sorted(
                    (c["name"], str(c["type"]), c["nullable"], str(c.get("default")))
                    for c in found.get_columns(table)
                ),
                "indexes": sorted(
                    (i["name"], tuple(i["column_names"]), bool(i["unique"]))
                    for i in found.get_indexes(table)
                ),
                "unique": sorted(
                    (u["name"], tuple(u["column_names"]))
                    for u in found.get_unique_constraints(table)
                ),
                "primary_key": tuple(found.get_pk_constraint(table)["constrained_columns"]),
            }
            for table in sorted(found.get_table_names())
            if table != "alembic_version"
        }


@contextmanager
def empty_database(dialect: str, tmp_path: Path) -> Iterator[Engine]:
    """A database of `dialect` with no schema at all."""
    if dialect == "mariadb":
        with mariadb_database("clock_steps", revision="base") as url:
            db = open_database(url, pool_size=1)
            yield db
            db.dispose()
        return
    db = open_database(f"sqlite:///{tmp_path / 'steps.db'}", pool_size=1)
    yield db
    db.dispose()


@pytest.mark.parametrize("dialect", ["sqlite", pytest.param("mariadb", marks=pytest.mark.mariadb)])
def test_every_migration_goes_up_down_and_up_again(dialect: str, tmp_path: Path):
    steps = list(reversed(migrate.history()))  # oldest first
    with empty_database(dialect, tmp_path) as db:
        before = schema_of(db)
        assert before == {}
        for step in steps:
            migrate.upgrade(db, step.revision)
            up = schema_of(db)
            assert up != before, f"{step.revision} changed nothing"
            moved = migrate.downgrade(db, step.down_revision or "base")
            assert moved == migrate.Moved(step.revision, step.down_revision)
            assert schema_of(db) == before, f"{step.revision}'s downgrade left another schema"
            migrate.upgrade(db, step.revision)
            assert schema_of(db) == up, f"{step.revision}'s second upgrade built another schema"
            before = up
        assert migrate.current(db) == migrate.head()
        with db.connect() as conn:
            context = MigrationContext.configure(conn, opts={"compare_type": True})
            assert compare_metadata(context, metadata) == []
        migrate.downgrade(db, "base")
        assert migrate.current(db) is None
        with db.connect() as conn:
            assert set(inspect(conn).get_table_names()) <= {"alembic_version"}
