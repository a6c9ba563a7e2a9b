"""RabbitMQ blocks clock's connection (a memory alarm): the alarms wait, no attempt spent.

Starts one extra RabbitMQ node beside the machine's own broker (never touching it) and sets
its memory watermark to 0, which blocks every publishing connection until it is set back.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from bench.chaos.cluster import RabbitCluster
from tests.faults.harness import judge
from tests.support import Cluster, eventually, mariadb_database

pytestmark = [pytest.mark.fault, pytest.mark.process, pytest.mark.mariadb]

ALARMS = 300


@pytest.fixture
def rabbit_node() -> Iterator[RabbitCluster]:
    node = RabbitCluster(size=1)
    try:
        yield node.start()
    finally:
        node.stop()


def _watermark(node: RabbitCluster, fraction: str) -> None:
    subprocess.run(
        ["rabbitmqctl", "-q", "-n", node.names[0], "set_vm_memory_high_watermark", fraction],
        check=True,
        timeout=60,
        capture_output=True,
    )


def test_a_blocked_connection_holds_the_alarms_and_spends_no_attempt(
    rabbit_node: RabbitCluster, tmp_path: Path
) -> None:
    (url,) = rabbit_node.urls
    with mariadb_database("clock_blocked") as database:
        group = Cluster(database, tmp_path, amqp_url=url)
        try:
            server = group.server(
                "blocked", amqp_url=url, CLOCK_RETRY_MAX="1", CLOCK_RETRY_BASE_S="0.2"
            ).start()
            # RabbitMQ blocks a connection when it next publishes: the alarms of that first
            # publish wait for their confirms, the rest are held at once.
            _watermark(rabbit_node, "0")
            ids = group.create_batch(server, ALARMS, spread_ms=500, offset_ms=300)
            eventually(
                lambda: (
                    requests.get(server.base_url + "/healthz", timeout=5).json()["broker"] != "ok"
                ),
                15,
                0.1,
                "the blocked connection still looks healthy",
            )
            time.sleep(3)  # every alarm due and held meanwhile, far past a retry budget
            rows = group.rows()
            assert {(row.status, row.retry_times) for row in rows} == {("pending", 0)}
            assert group.collector.ids() == []
            _watermark(rabbit_node, "0.4")
            group.collector.wait_for(ALARMS, 20)
            rows = group.wait_all_rung()
            verdict = judge(ids, rows, group.collector.snapshot())
            print(f"\nconnection blocked 3 s: {verdict.summary()}")
            # Those sent into the connection as it was blocked, taken when it is unblocked,
            # are published again.
            verdict.assert_sound(max_duplicates=ALARMS)
            assert {row.retry_times for row in rows} == {0}
        finally:
            group.close()
