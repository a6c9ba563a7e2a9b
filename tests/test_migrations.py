"""The Alembic migrations build exactly the schema the code declares, and run again harmlessly."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import CHAR, BigInteger, Integer, inspect, text

from clock_server.model import STATUS_LENGTH, STATUSES
from clock_server.store import migrate
from clock_server.store.alarms import AlarmStore
from clock_server.store.db import open_database
from clock_server.store.schema import metadata
from tests.support import mariadb_database


def test_migrated_schema_matches_the_models(db_url: str):
    db = open_database(db_url, pool_size=1)
    migrate.upgrade(db)  # a second upgrade is a no-op
    with db.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": True})
        differences = compare_metadata(context, metadata)
    db.dispose()
    assert differences == []


@contextmanager
def database_at(dialect: str, revision: str, tmp_path: Path) -> Iterator[str]:
    """A database of `dialect` whose schema is at `revision`."""
    if dialect == "mariadb":
        with mariadb_database("clock_migrate", revision=revision) as url:
            yield url
        return
    url = f"sqlite:///{tmp_path / 'old.db'}"
    db = open_database(url, pool_size=1)
    migrate.upgrade(db, revision)
    db.dispose()
    yield url


DIALECTS = ["sqlite", pytest.param("mariadb", marks=pytest.mark.mariadb)]


@pytest.fixture(params=DIALECTS)
def at_0001(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with database_at(request.param, "0001", tmp_path) as url:
        yield url


def test_upgrading_from_0001_keeps_every_alarm_and_names_no_claim_owner(at_0001: str):
    """0002 drops the old name column; 0003 adds the engine id, 0 (no engine) for old rows."""
    db = open_database(at_0001, pool_size=1)
    with db.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO clock (application, business_id, payload, target_ring_at,"
                " next_try_time, retry_times, status, version, claimed_by, create_time,"
                " update_time) VALUES ('app', 'b', 'p', 5, 9, 0, 'pending', 3, 'e1', 1, 2)"
            )
        )
    migrate.upgrade(db)
    with db.connect() as conn:
        row = conn.execute(
            text("SELECT business_id, next_try_time, version, claimed_by FROM clock")
        ).one()
        indexes = {index["name"] for index in inspect(conn).get_indexes("clock")}
        tables = set(inspect(conn).get_table_names())
    db.dispose()
    assert tuple(row) == ("b", 9, 3, 0)
    assert "clock_engine" in tables
    assert {"ix_clock_status_next_try_time", "ix_clock_application_id"} <= indexes


@pytest.fixture(params=DIALECTS)
def at_0011(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Before the fixed-size ring columns."""
    with database_at(request.param, "0011", tmp_path) as url:
        yield url


def test_upgrading_to_0012_keeps_ring_times_and_reads_an_unrung_alarm_as_not_rung(at_0011: str):
    db = open_database(at_0011, pool_size=1)
    with db.begin() as conn:
        for business_id, status, rung_at in (("p", "pending", None), ("r", "rung", 77)):
            conn.execute(
                text(
                    "INSERT INTO clock (application, business_id, payload, target_ring_at,"
                    " next_try_time, status, rung_at, create_time, update_time)"
                    " VALUES ('app', :b, 'x', 5, 5, :s, :r, 1, 1)"
                ),
                {"b": business_id, "s": status, "r": rung_at},
            )
    migrate.upgrade(db)
    with db.connect() as conn:
        stored = dict(conn.execute(text("SELECT business_id, rung_at FROM clock")).all())
    store = AlarmStore(db)
    pending, rung = store.get("app", "p"), store.get("app", "r")
    db.dispose()
    assert stored == {"p": 0, "r": 77}
    assert (pending.status, pending.rung_at) == ("pending", None)
    assert (rung.status, rung.rung_at) == ("rung", 77)


# What a claim, a ring, a hand-off and a retry write into an alarm's row.
RING_WRITES = (
    "status", "rung_at", "next_try_time", "version", "update_time", "claimed_by", "retry_times",
)  # fmt: skip


def test_every_column_a_claim_or_a_ring_rewrites_keeps_its_size(db_url: str):
    """A row that grows in a full page makes MariaDB split or reorganize the page: about
    1.4 KB more redo and 12 us more of its CPU per rung alarm (finding 44). A NULL takes no
    room, so none of these may be nullable, and the status must be a CHAR as long as the
    longest status."""
    db = open_database(db_url, pool_size=1)
    with db.connect() as conn:
        columns = {column["name"]: column for column in inspect(conn).get_columns("clock")}
    db.dispose()
    for name in RING_WRITES:
        assert not columns[name]["nullable"], name
        assert isinstance(columns[name]["type"], (BigInteger, Integer, CHAR)), name
    assert columns["status"]["type"].length == STATUS_LENGTH
    assert max(len(status) for status in STATUSES) == STATUS_LENGTH


def test_a_server_starts_on_the_schema_of_a_newer_release(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    """In a rolling upgrade a server of the release before may restart after the upgrade."""
    caplog.set_level(logging.INFO, logger=migrate.__name__)
    db = open_database(f"sqlite:///{tmp_path / 'newer.db'}", pool_size=1)
    migrate.upgrade(db)
    with db.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'of_a_newer_release'"))
    with pytest.raises(migrate.SchemaFromNewerRelease, match="of_a_newer_release"):
        migrate.upgrade(db)
    caplog.clear()
    migrate.upgrade_at_start(db)
    assert migrate.current(db) == "of_a_newer_release"
    db.dispose()
    actions = [getattr(record, "action", None) for record in caplog.records]
    assert actions == ["schema_newer"]
