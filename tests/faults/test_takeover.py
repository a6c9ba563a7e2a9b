"""Takeover with the default heartbeat settings: an engine that dies, or stalls, while it holds
claims; its claims ring within seconds of the fault, not a 30 s lease later.

Each case is judged by alarm id as in test_faults.py. The orphans are the alarms still pending in
the faulty server's slots when the fault struck; each case reports the time from the
fault to the last orphan rung and asserts the p99 of their lateness.
"""

from __future__ import annotations

import signal
import time

from tests.faults.harness import FAULT_MARKS, Verdict, default_timing, judge
from tests.support import Cluster, ServerProcess, eventually

pytestmark = FAULT_MARKS

LANES, RING_BATCH = 4, 100
IN_FLIGHT = LANES * RING_BATCH
TAKEOVER_BOUND_MS = 3_000
# The default lease, window and heartbeat (Cluster.server shortens them otherwise); small
# ring batches bound what a fault catches.
DEFAULTS = {"CLOCK_RING_LANES": str(LANES), "CLOCK_RING_BATCH": str(RING_BATCH), **default_timing()}


def now_ms() -> int:
    return int(time.time() * 1000)


def p99(values: list[int]) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, (len(ordered) * 99) // 100)]


def orphans_of(cluster: Cluster, instance_id: str) -> set[int]:
    """The alarms the engine running as `instance_id` has to ring now: those still pending
    in the slots it owns."""
    [engine] = [row for row in cluster.engines() if row.instance_id == instance_id]
    return {
        row.id
        for row in cluster.rows()
        if row.status == "pending" and engine.slot_from <= row.slot < engine.slot_to
    }


def takeover_figures(
    verdict: Verdict, rows: list, orphans: set[int], fault_at: int, resumed_at: int | None
) -> dict:
    """The orphans' lateness. With `resumed_at` (a stall), the orphans first received only
    after the resume are those the stalled server had locked before it stopped, and rang
    itself: they are counted apart, and the p99 is of the ones the survivor could take."""
    targets = {row.id: row.target_ring_at for row in rows}
    first = verdict.first_received
    kept = {i for i in orphans if resumed_at is not None and first[i] >= resumed_at}
    lateness = [max(first[i] - targets[i], 0) for i in orphans - kept]
    return {
        "orphans": len(orphans),
        "taken_over_p99_ms": p99(lateness),
        "taken_over_max_ms": max(lateness),
        "fault_to_last_taken_over_ms": max(first[i] for i in orphans - kept) - fault_at,
        "kept_by_the_faulty_server": len(kept),
        "kept_max_ms": max((first[i] - targets[i] for i in kept), default=0),
    }


def report(name: str, figures: dict, verdict: Verdict) -> None:
    print(
        f"\n[{name}] {figures['orphans']} orphaned claims; taken over: lateness p99 "
        f"{figures['taken_over_p99_ms']} ms, max {figures['taken_over_max_ms']} ms, the last "
        f"rung {figures['fault_to_last_taken_over_ms']} ms after the fault; kept and rung by "
        f"the faulty server after its resume: {figures['kept_by_the_faulty_server']} (max "
        f"{figures['kept_max_ms']} ms late); {verdict.summary()}"
    )


def start_ringing(cluster: Cluster, server: ServerProcess) -> list[int]:
    """3,000 alarms due over 3 s from 1 s on, every third with a 60 s cutoff; returns once
    1,000 have arrived."""
    ids = cluster.create_batch(
        server, 3_000, spread_ms=3_000, offset_ms=1_000, cutoff_every=3, cutoff_ms=60_000
    )
    cluster.collector.wait_for(1_000, 10, "the server did not start ringing")
    return ids


def start_two(cluster: Cluster, faulty: str) -> tuple[ServerProcess, list[int]]:
    """A server that claims 3,000 alarms due over 3 s from 4 s on, then a survivor; returns
    the first and the ids once 1,000 have arrived. The 4 s are for the survivor's start: on
    a slow machine it took long enough that the first had rung every alarm by then."""
    server = cluster.server(faulty, **DEFAULTS).start()
    ids = cluster.create_batch(server, 3_000, spread_ms=3_000, offset_ms=4_000)
    # its next preload pass, at most one interval away
    eventually(
        lambda: len(orphans_of(cluster, faulty)) >= len(ids), 5, 0.05, f"{faulty} did not claim"
    )
    cluster.server("survivor", **DEFAULTS).start()
    cluster.collector.wait_for(1_000, 10, "the servers did not start ringing")
    return server, ids


def judge_takeover(
    cluster: Cluster,
    name: str,
    ids: list[int],
    orphans: set[int],
    fault_at: int,
    resumed_at: int | None = None,
) -> dict:
    """Once every alarm rang: each judged by id, and the orphans' figures reported."""
    cluster.collector.wait_for(3_000, 15)
    rows = cluster.wait_all_rung()
    time.sleep(1)  # a copy a faulty server still published would arrive meanwhile
    verdict = judge(ids, rows, cluster.collector.snapshot())
    figures = takeover_figures(verdict, rows, orphans, fault_at, resumed_at)
    report(name, figures, verdict)
    verdict.assert_sound(max_duplicates=IN_FLIGHT)
    return figures


def test_a_server_killed_while_ringing_and_restarted_under_a_new_id_rings_its_claims_in_seconds(
    cluster: Cluster,
):
    victim = cluster.server("first-life", **DEFAULTS).start()
    ids = start_ringing(cluster, victim)
    victim.kill()
    killed_at = now_ms()
    orphans = orphans_of(cluster, "first-life")
    assert orphans, "everything rang before the kill"
    # Restarted as systemd or Kubernetes would: a new process, so a new instance id.
    cluster.server("second-life", **DEFAULTS).start()
    figures = judge_takeover(cluster, "SIGKILL, restart under a new id", ids, orphans, killed_at)
    assert figures["taken_over_p99_ms"] <= TAKEOVER_BOUND_MS, figures


def test_two_servers_one_killed_the_survivor_rings_its_claims_in_seconds(cluster: Cluster):
    victim, ids = start_two(cluster, "victim")
    victim.kill()
    killed_at = now_ms()
    orphans = orphans_of(cluster, "victim")
    assert orphans, "the victim held no claim at the kill"
    figures = judge_takeover(cluster, "two servers, one SIGKILLed", ids, orphans, killed_at)
    assert figures["taken_over_p99_ms"] <= TAKEOVER_BOUND_MS, figures


def test_a_server_stalled_for_ten_seconds_rings_nothing_the_survivor_took_over(
    cluster: Cluster,
):
    stalled, ids = start_two(cluster, "stalled")
    assert stalled.process is not None
    stalled.process.send_signal(signal.SIGSTOP)
    stopped_at = now_ms()
    try:
        orphans = orphans_of(cluster, "stalled")
        assert orphans, "the stalled server held no claim"
        time.sleep(10)
    finally:
        stalled.process.send_signal(signal.SIGCONT)
    resumed_at = now_ms()
    figures = judge_takeover(
        cluster, "two servers, one SIGSTOPped for 10 s", ids, orphans, stopped_at, resumed_at
    )
    # Only rows it had locked before the stall are its to ring when it resumes, late, and
    # no more than its ring lanes hold; the survivor rang the rest, and none twice (judged).
    assert figures["kept_by_the_faulty_server"] <= IN_FLIGHT, figures
    assert figures["taken_over_p99_ms"] <= TAKEOVER_BOUND_MS, figures
    assert stalled.process.poll() is None, "the stalled server died"
    # its first beat after the stall told it it had been declared dead
    assert "was declared dead" in stalled.log_path.read_text()
