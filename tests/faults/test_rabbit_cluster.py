"""A RabbitMQ cluster node lost mid-ringing: clock moves to another node and loses nothing.

Starts three extra RabbitMQ nodes beside the machine's own broker (never touching it),
clusters them, and stops the node clock publishes to while alarms ring into a quorum queue
that a consumer reads through another node.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.chaos.cluster import RabbitCluster
from tests.faults.harness import judge
from tests.support import Cluster, mariadb_database

pytestmark = [pytest.mark.fault, pytest.mark.process, pytest.mark.mariadb]

ALARMS = 2_000


@pytest.fixture
def rabbit_cluster() -> Iterator[RabbitCluster]:
    nodes = RabbitCluster()
    try:
        yield nodes.start()
    finally:
        nodes.stop()


def test_a_node_stopped_mid_ringing_loses_nothing(
    rabbit_cluster: RabbitCluster, tmp_path: Path
) -> None:
    first, second, third = rabbit_cluster.urls
    with mariadb_database("clock_cluster") as url:
        group = Cluster(url, tmp_path, amqp_url=second, queue_type="quorum")
        try:
            server = group.server(
                "clustered", amqp_url=f"{first},{second},{third}", CLOCK_QUEUE_TYPE="quorum"
            ).start()
            ids = group.create_batch(server, ALARMS, spread_ms=3_000, offset_ms=500)
            group.collector.wait_for(300, 10, "nothing rang before the fault")
            stopped_ms = time.time_ns() // 1_000_000
            rabbit_cluster.stop_node(0)  # the node clock publishes to
            group.collector.wait_for(ALARMS, 30)
            time.sleep(0.5)  # a late duplicate would show up here
            deliveries = group.collector.snapshot()
            verdict = judge(ids, group.rows(), deliveries)
            published = sorted({d.body["published_at"] for d in deliveries})
            after = [at for at in published if at >= stopped_ms]
            pause_ms = max((b - a for a, b in itertools.pairwise(after)), default=0)
            print(f"\nnode stopped mid-ringing: {verdict.summary()}; longest pause in "
                  f"publishing after the stop {pause_ms} ms; last publish "
                  f"{published[-1] - stopped_ms} ms after the stop; consumer reconnects "
                  f"{group.collector.reconnects}")  # fmt: skip
            verdict.assert_sound(max_duplicates=ALARMS // 2)
            assert group.collector.reconnects == 0  # the consumer on another node went on
        finally:
            group.close()
