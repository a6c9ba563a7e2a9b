"""The ring path's statements on the DBAPI cursor (store.sql.DriverCursor), against the real
MariaDB and SQLite: they run in the transaction, and a driver's error comes out as the one
SQLAlchemy would raise, a lost connection as Unavailable with the pooled connection
discarded."""

from __future__ import annotations

import pytest
from sqlalchemy import exc, text

from clock_server.errors import Unavailable
from clock_server.store.alarms import AlarmStore
from clock_server.store.sql import DriverCursor, translate_errors


def test_statements_run_in_the_transaction_and_roll_back_with_it(store: AlarmStore):
    engine = store.engine
    with engine.connect() as conn:
        conn.exec_driver_sql("CREATE TABLE driver_probe (n INTEGER)")
        conn.commit()
    try:
        with pytest.raises(RuntimeError), engine.begin() as conn:
            driver = DriverCursor(conn)
            driver.run("INSERT INTO driver_probe (n) VALUES (7)")
            assert driver.rows("SELECT n FROM driver_probe") == [(7,)]
            raise RuntimeError("abandon the transaction")
        with engine.begin() as conn:
            assert conn.execute(text("SELECT COUNT(*) FROM driver_probe")).scalar() == 0
            DriverCursor(conn).run("INSERT INTO driver_probe (n) VALUES (8)")
        with engine.connect() as conn:
            assert conn.execute(text("SELECT n FROM driver_probe")).all() == [(8,)]
    finally:
        with engine.begin() as conn:
            conn.exec_driver_sql("DROP TABLE driver_probe")


def test_a_bad_statement_raises_what_exec_driver_sql_raises(store: AlarmStore):
    bad = "SELECT no_such_column FROM no_such_table"
    raised = []
    for run in (lambda conn: conn.exec_driver_sql(bad), lambda conn: DriverCursor(conn).run(bad)):
        with pytest.raises(exc.DBAPIError) as caught, store.engine.begin() as conn:
            run(conn)
        raised.append(caught.value)
    assert type(raised[1]) is type(raised[0])
    assert str(raised[1].orig) == str(raised[0].orig)
    assert not raised[1].connection_invalidated


def test_a_killed_connection_is_unavailable_and_the_pool_discards_it(
    mariadb_store: AlarmStore,
):
    engine = mariadb_store.engine
    with pytest.raises(Unavailable), translate_errors(), engine.begin() as conn:
        victim = conn.exec_driver_sql("SELECT CONNECTION_ID()").scalar()
        with engine.connect() as other:
            other.exec_driver_sql(f"KILL {int(victim)}")
        DriverCursor(conn).rows("SELECT 1")
    with engine.connect() as conn:  # a live connection again, not the killed one
        assert conn.exec_driver_sql("SELECT CONNECTION_ID()").scalar() != victim
        assert conn.exec_driver_sql("SELECT 1").scalar() == 1
