"""The two workloads, independent of the tool: each tool supplies ``submit(job_id, due_ms)``.

Jobs run :func:`bench.peers.common.record`; a :class:`~bench.peers.common.Collector` reads back
when each ran. Warm-up/calibration jobs use negative ids and are left out of the figures.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable
from typing import Any

from bench.peers.common import Collector, summarize

Submit = Callable[[int, float], None]


def now_ms() -> float:
    return time.time() * 1000.0


def wait_for(
    collector: Collector,
    ids: range,
    deadline_ms: float,
    stall_s: float | None = None,
    stall_after_ms: float = 0.0,
) -> int:
    """Poll until every id in ``ids`` ran or ``deadline_ms`` passed or, with ``stall_s``, nothing
    new ran for ``stall_s`` seconds after ``stall_after_ms``; return how many ran."""
    last_count, last_change = -1, now_ms()
    while True:
        collector.poll()
        count = collector.count_in(ids)
        now = now_ms()
        if count != last_count:
            last_count, last_change = count, now
        if count >= len(ids) or now >= deadline_ms:
            return count
        quiet_ms = now - max(last_change, stall_after_ms)
        if stall_s is not None and now > stall_after_ms and quiet_ms > stall_s * 1000.0:
            return count
        time.sleep(0.5)


def warm_up(submit: Submit, collector: Collector, count: int = 1000) -> float:
    """Create ``count`` jobs due 1 s ahead (ids -1..-count), wait until they ran (60 s at most).

    Checks the runner works end to end and returns the creation rate (jobs/s) it saw.
    """
    started = time.perf_counter()
    due = now_ms() + 1000.0
    for i in range(1, count + 1):
        submit(-i, due)
    rate = count / (time.perf_counter() - started)
    ids = range(-count, 0)
    ran = wait_for(collector, ids, now_ms() + 60_000.0)
    if ran < count:
        raise RuntimeError(f"warm-up: only {ran} of {count} jobs ran within 60 s")
    return rate


def steady(
    submit: Submit, collector: Collector, rate_per_s: float, duration_s: float, seed: int = 6
) -> dict[str, Any]:
    """Create jobs at ``rate_per_s`` (as far as the tool keeps up) for ``duration_s`` seconds,
    each due uniformly 1-10 s after its creation; wait until all ran or 30 s after the last due.
    """
    rng = random.Random(seed)
    target = int(rate_per_s * duration_s)
    due: list[float] = []
    started = time.perf_counter()
    for i in range(target):
        elapsed = time.perf_counter() - started
        if elapsed >= duration_s:
            break
        ahead = i / rate_per_s - elapsed
        if ahead > 0:
            time.sleep(ahead)
        due_ms = now_ms() + rng.uniform(1000.0, 10000.0)
        submit(i, due_ms)
        due.append(due_ms)
    creation_s = time.perf_counter() - started
    created = len(due)
    wait_for(collector, range(created), max(due, default=now_ms()) + 30_000.0)
    ran_ids = [i for i in range(created) if i in collector.ran]
    late = [collector.ran[i] - due[i] for i in ran_ids]
    by_10s: dict[int, list[float]] = {}
    first_due = min(due, default=0.0)
    for i, lateness in zip(ran_ids, late, strict=True):
        by_10s.setdefault(int((due[i] - first_due) // 10_000), []).append(lateness)
    return {
        "workload": "steady",
        "target_rate_per_s": rate_per_s,
        "duration_s": duration_s,
        "created": created,
        "creation_s": round(creation_s, 3),
        "creation_rate_per_s": round(created / creation_s, 1) if creation_s else None,
        "ran": len(late),
        "lost": created - len(late),
        "duplicates": collector.duplicates,
        "lateness_ms": summarize(late),
        "p50_p99_by_10s_of_due_ms": [
            [summarize(xs)["p50"], summarize(xs)["p99"]] for _, xs in sorted(by_10s.items())
        ],
        "loadavg_end": os.getloadavg(),
    }


def burst(
    submit: Submit,
    collector: Collector,
    count: int,
    creation_rate_hint: float,
    lead_factor: float = 1.5,
    stall_s: float = 30.0,
    max_wait_s: float = 1200.0,
) -> dict[str, Any]:
    """``count`` jobs all due at one instant T, chosen from ``creation_rate_hint`` so that creation
    should end before T; measure T -> last ring and rings/s = ran / that time.
    """
    lead_s = 5.0 + lead_factor * count / creation_rate_hint
    t_ms = now_ms() + lead_s * 1000.0
    started = time.perf_counter()
    for i in range(count):
        submit(i, t_ms)
    creation_s = time.perf_counter() - started
    created_end_ms = now_ms()
    ids = range(count)
    wait_for(collector, ids, t_ms + max_wait_s * 1000.0, stall_s=stall_s, stall_after_ms=t_ms)
    ran_times = [collector.ran[i] for i in ids if i in collector.ran]
    first = min(ran_times, default=t_ms) - t_ms
    last = max(ran_times, default=t_ms) - t_ms
    return {
        "workload": "burst",
        "count": count,
        "lead_s": round(lead_s, 1),
        "lead_factor": lead_factor,
        "creation_s": round(creation_s, 3),
        "creation_rate_per_s": round(count / creation_s, 1) if creation_s else None,
        "created_before_T": created_end_ms < t_ms,
        "creation_end_minus_T_ms": round(created_end_ms - t_ms, 1),
        "ran": len(ran_times),
        "lost": count - len(ran_times),
        "duplicates": collector.duplicates,
        "T_to_first_ms": round(first, 1),
        "T_to_last_ms": round(last, 1),
        "rings_per_s": round(len(ran_times) / (last / 1000.0), 1) if last > 0 else None,
        "lateness_ms": summarize([t - t_ms for t in ran_times]),
        "loadavg_end": os.getloadavg(),
    }
