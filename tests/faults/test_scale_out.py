"""Servers that share the slots: three each ring a third of a steady load, and when one
joins, stops or dies its share moves within 3 s, with no alarm lost or early, and none rung
twice but a killed server's batches in flight.

Every server runs with the default heartbeat, window and lease. Who rang an alarm is the
engine its row names (`claimed_by`): the ring leaves the claim's owner in place.
"""

from __future__ import annotations

import time
from collections import Counter

import pytest
import requests

from clock_server.slot_space import SLOTS
from tests.faults.harness import FAULT_MARKS, default_timing, judge
from tests.support import Cluster, ServerProcess, eventually

pytestmark = FAULT_MARKS

LANES, RING_BATCH = 4, 100
# A server killed between the broker's confirms and its commit publishes its batches in
# flight again (at least once): at most this many.
IN_FLIGHT = LANES * RING_BATCH
TIMING = {"CLOCK_RING_LANES": str(LANES), "CLOCK_RING_BATCH": str(RING_BATCH), **default_timing()}
MOVE_BOUND_MS = 3_000
SHARE_TOLERANCE = 0.10  # of the share itself: a third is 30.0 % to 36.7 %
RATE_PER_S = 500


def now_ms() -> int:
    return int(time.time() * 1000)


def start(cluster: Cluster, names: list[str]) -> dict[str, int]:
    """The servers started one after the other; each one's engine id, once the shares among
    all of them are settled."""
    for name in names:
        cluster.server(name, **TIMING).start()
    return settled(cluster, names)


def settled(cluster: Cluster, names: list[str]) -> dict[str, int]:
    """Each of `names`' engine ids, once the live engines are those and each owns its part."""

    def shares() -> dict[str, int]:
        live = [row for row in cluster.engines() if row.dead_at is None]
        assert sorted(row.instance_id for row in live) == sorted(names), live
        sizes = {row.slot_to - row.slot_from for row in live}
        assert sizes <= {SLOTS // len(names), SLOTS // len(names) + 1}, live
        return {row.instance_id: row.id for row in live}

    return eventually(shares, 10, 0.1, "the engines did not settle their shares")


def ring(cluster: Cluster, server: ServerProcess, seconds: int) -> list[int]:
    """RATE_PER_S alarms a second for `seconds`, the first due 2 s from now."""
    return cluster.create_batch(
        server, RATE_PER_S * seconds, spread_ms=seconds * 1_000, offset_ms=2_000
    )


def rung_by(rows: list, engine_ids: dict[str, int], due_from_ms: int) -> Counter[str]:
    """How many of the alarms due from `due_from_ms` on each server rang."""
    names = {engine_id: name for name, engine_id in engine_ids.items()}
    return Counter(
        names.get(row.claimed_by, f"engine {row.claimed_by}")
        for row in rows
        if row.target_ring_at >= due_from_ms
    )


def judged(cluster: Cluster, ids: list[int], max_duplicates: int = 0) -> list:
    """The rows once every alarm rang and arrived, none early, each once but for at most
    `max_duplicates`."""
    cluster.collector.wait_for(len(ids), 30)
    rows = cluster.wait_all_rung()
    time.sleep(0.5)  # a second copy would arrive meanwhile
    verdict = judge(ids, rows, cluster.collector.snapshot())
    print(f"\n{verdict.summary()}")
    verdict.assert_sound(max_duplicates)
    return rows


def assert_shares(counts: Counter[str], names: list[str]) -> None:
    total = sum(counts.values())
    fair = 1 / len(names)
    shares = {name: counts[name] / total for name in names}
    print(f"shares of {total} alarms: {shares}")
    assert set(counts) <= set(names), counts
    for name in names:
        assert abs(shares[name] - fair) <= fair * SHARE_TOLERANCE, (name, shares)


def slots_metric(server: ServerProcess) -> float:
    text = requests.get(server.base_url + "/metrics", timeout=5).text
    (line,) = [line for line in text.splitlines() if line.startswith("clock_engine_slots ")]
    return float(line.split()[1])


def test_three_servers_each_ring_a_third(cluster: Cluster):
    names = ["one", "two", "three"]
    engine_ids = start(cluster, names)
    assert sorted(slots_metric(server) for server in cluster.servers) == [341, 341, 342]
    ids = ring(cluster, cluster.servers[0], 6)
    assert_shares(rung_by(judged(cluster, ids), engine_ids, 0), names)


def test_a_server_that_joins_takes_its_third_within_3_s(cluster: Cluster):
    engine_ids = start(cluster, ["one", "two"])
    ids = ring(cluster, cluster.servers[0], 12)
    time.sleep(3)
    cluster.server("three", **TIMING).start()
    joined_at = now_ms()
    engine_ids = settled(cluster, ["one", "two", "three"])
    rows = judged(cluster, ids)
    before = rung_by(rows, engine_ids, 0) - rung_by(rows, engine_ids, joined_at)
    print(f"due before the join: {dict(before)}")
    print(
        "DEBUG",
        Counter(
            (row.claimed_by, row.slot // 341)
            for row in rows
            if row.target_ring_at >= joined_at + 3000
        ),
    )
    print("DEBUG engines", engine_ids)
    assert_shares(rung_by(rows, engine_ids, joined_at + MOVE_BOUND_MS), ["one", "two", "three"])


@pytest.mark.parametrize("how", ["SIGTERM", "SIGKILL"])
def test_when_a_server_stops_or_dies_the_others_take_its_share_within_3_s(
    cluster: Cluster, how: str
):
    engine_ids = start(cluster, ["one", "two", "three"])
    leaving = cluster.servers[2]
    ids = ring(cluster, cluster.servers[0], 12)
    time.sleep(4)
    if how == "SIGKILL":
        leaving.kill()
    else:
        assert leaving.terminate() == 0
    left_at = now_ms()
    rows = judged(cluster, ids, IN_FLIGHT if how == "SIGKILL" else 0)
    assert_shares(rung_by(rows, engine_ids, left_at + MOVE_BOUND_MS), ["one", "two"])
