"""What the parts alone can do here (scenario 7): MariaDB batched writes, RabbitMQ publishes."""

from __future__ import annotations

import json
import tempfile
import time
import uuid
from pathlib import Path

from sqlalchemy import bindparam, create_engine, insert, text, update

from bench.clockserver import AMQP_URL, MARIADB_URL
from bench.collector import Collector
from bench.publish_rate import cleanup, pipelined_rate
from clock_server.store import migrate
from clock_server.store.db import open_database
from clock_server.store.schema import alarm_table


def mariadb_rates(rows: int = 100_000, batch: int = 1_000) -> dict[str, float]:
    """Rows/s for multi-row INSERT and for UPDATE ... WHERE id IN (1,000 ids) on the clock table."""
    name = f"bench_limits_{uuid.uuid4().hex[:6]}"
    admin = create_engine(MARIADB_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4"))
    db = open_database(f"{MARIADB_URL}/{name}", pool_size=2)
    try:
        migrate.upgrade(db)
        now = int(time.time() * 1000)
        values = [
            {"application": "lim", "business_id": f"b{i}", "payload": "x" * 64,
             "target_ring_at": now + i, "latest_ring_at": None, "next_try_time": now + i,
             "retry_times": 0, "status": "pending", "version": 0, "create_time": now,
             "update_time": now}
            for i in range(rows)
        ]  # fmt: skip
        started = time.perf_counter()
        for first in range(0, rows, batch):
            with db.begin() as conn:
                conn.execute(insert(alarm_table), values[first : first + batch])
        insert_rate = rows / (time.perf_counter() - started)
        with db.connect() as conn:
            ids = [row.id for row in conn.execute(text("SELECT id FROM clock ORDER BY id"))]
        statement = update(alarm_table).where(
            alarm_table.c.id.in_(bindparam("ids", expanding=True))
        )
        started = time.perf_counter()
        for first in range(0, len(ids), batch):
            with db.begin() as conn:
                conn.execute(
                    statement.values(status="rung", rung_at=now),
                    {"ids": ids[first : first + batch]},
                )
        update_rate = len(ids) / (time.perf_counter() - started)
    finally:
        db.dispose()
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS `{name}`"))
        admin.dispose()
    return {"mariadb_insert_rows_per_s": insert_rate, "mariadb_update_rows_per_s": update_rate}


def rabbitmq_rate(total: int = 50_000, batch: int = 1_000) -> dict[str, float]:
    """Persistent publishes/s with pipelined confirms, through clock's own publisher."""
    return {"rabbitmq_pipelined_publishes_per_s": _publish_rate(total, batch, consumed=False)}


def rabbitmq_rate_with_consumer(total: int = 50_000, batch: int = 1_000) -> dict[str, float]:
    """The same while the burst scenario's consumer takes every message from the queue: the
    broker then also delivers and takes acks, which is what a burst costs it."""
    rate = _publish_rate(total, batch, consumed=True)
    return {"rabbitmq_pipelined_publishes_with_consumer_per_s": rate}


def _publish_rate(total: int, batch: int, consumed: bool) -> float:
    exchange = f"bench_limits_{uuid.uuid4().hex[:6]}"
    application = "limits"
    if not consumed:
        try:
            return pipelined_rate(AMQP_URL, exchange, application, total, batch)
        finally:
            cleanup(AMQP_URL, exchange, f"{exchange}.{application}")
    # The collector's queue and a body it can read (it records each message's id and target).
    body = json.dumps({"id": 1, "target_ring_at": 0, "application": application,
                       "business_id": "b-1", "payload": '{"n": 1}'}).encode()  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="clock-limits-") as workdir:
        collector = Collector(exchange, application, Path(workdir)).start()
        try:
            return pipelined_rate(AMQP_URL, exchange, application, total, batch, "clock.", body)
        finally:
            collector.stop()
            cleanup(AMQP_URL, exchange, f"clock.{application}")
