"""Opening the database (a pooled SQLAlchemy Engine), with what each dialect needs decided once
here."""

from __future__ import annotations

import contextlib
import sqlite3
from dataclasses import dataclass

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url

from clock_server.store.db_tls import check_tls_options


@dataclass(frozen=True)
class Capabilities:
    """What the database can do, decided once at start-up."""

    row_locks: bool  # SELECT ... FOR UPDATE (MySQL/MariaDB); SQLite locks the whole file
    skip_locked: bool  # FOR UPDATE SKIP LOCKED (MySQL 8, MariaDB 10.6)
    insert_returning: bool  # INSERT ... RETURNING (MariaDB 10.5, SQLite 3.35; not MySQL)
    index_hints: bool  # FORCE INDEX (MySQL/MariaDB)

    @property
    def skip_locked_suffix(self) -> str:
        """Ends a SELECT that locks the rows it takes and passes over rows others hold:
        SKIP LOCKED where there is one, a plain FOR UPDATE on an older MySQL, nothing on
        SQLite (whose transaction holds the whole file)."""
        if self.skip_locked:
            return " FOR UPDATE SKIP LOCKED"
        return " FOR UPDATE" if self.row_locks else ""


def open_database(url: str, pool_size: int = 20) -> Engine:
    """The database at `url`, pooled; SQLite gets WAL and BEGIN IMMEDIATE so writers
    serialize cleanly. Connects to nothing yet; a TLS option of the URL that would not do
    what it says is a ConfigError (`db_tls.check_tls_options`)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        db = create_engine(url, connect_args={"timeout": 30, "check_same_thread": False})
        _configure_sqlite(db)
        return db
    check_tls_options(parsed)
    return create_engine(
        url,
        pool_size=pool_size,
        max_overflow=pool_size,
        pool_recycle=3600,
        pool_timeout=10,
        isolation_level="READ COMMITTED",
        connect_args={"connect_timeout": 5, "charset": "utf8mb4"},
        # Every Connection ends its own transaction (commit in begin(), rollback when a
        # connect() block closes), so the pool's extra ROLLBACK on check-in is one more
        # round trip per transaction that changes nothing.
        pool_reset_on_return=None,
    )


def open_ahead(db: Engine, connections: int) -> None:
    """Open up to `connections` pooled connections now, so that the first transactions of
    threads starting together (the ring lanes) do not each wait for a new connection."""
    if db.dialect.name == "sqlite":
        return
    with contextlib.ExitStack() as held:
        for _ in range(min(connections, db.pool.size())):  # type: ignore[attr-defined]
            held.enter_context(db.connect())


def capabilities(db: Engine) -> Capabilities:
    if db.dialect.name == "sqlite":
        return Capabilities(
            row_locks=False,
            skip_locked=False,
            insert_returning=sqlite3.sqlite_version_info >= (3, 35),
            index_hints=False,
        )
    with db.connect() as conn:
        version = str(conn.exec_driver_sql("SELECT VERSION()").scalar_one())
    mariadb = "mariadb" in version.lower()
    release = _release(version)
    return Capabilities(
        row_locks=True,
        skip_locked=release >= (10, 6) if mariadb else release >= (8, 0),
        insert_returning=mariadb and release >= (10, 5),
        index_hints=True,
    )


def _release(version: str) -> tuple[int, int]:
    numbers = [int(part) for part in version.split("-")[0].split(".")[:2] if part.isdigit()]
    major, minor = [*numbers, 0, 0][:2]
    return major, minor


def _configure_sqlite(db: Engine) -> None:
    # pysqlite's own transaction handling defers BEGIN; take the write lock at BEGIN instead,
    # so a read-then-write transaction cannot fail halfway with "database is locked".
    @event.listens_for(db, "connect")
    def _on_connect(dbapi_connection, _record):  # type: ignore[no-untyped-def]
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.close()

    @event.listens_for(db, "begin")
    def _on_begin(conn):  # type: ignore[no-untyped-def]
        conn.exec_driver_sql("BEGIN IMMEDIATE")
