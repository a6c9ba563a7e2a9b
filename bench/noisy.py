"""The noisy neighbour: one application's burst drains while another's alarms fall due.

    python -m bench.noisy                      # 100,000 burst alarms, 100/s beside, 3 pairs
    python -m bench.noisy --burst 20000 --pairs 1
    python -m bench.noisy --apart              # also B on a clock server of its own

Application A has `burst` alarms due within one second; application B has `rate` alarms a
second due evenly from 5 s before that second until well after A has drained, all created
beforehand through the batch API. Each pair runs A alone and A with B on fresh servers (two
web processes, MariaDB) in one sitting, so that A's drain rate alone and beside B compare.
Reported: A's drain rate in both, the CPU each process used during A's drain per alarm of A
(B's share included beside B), and B's lateness before, during and after A's drain.

With --apart each pair also runs B on a second clock server, with its own process and
database, beside the same MariaDB and RabbitMQ: isolation by a clock per application, the
most a fair share inside one clock could give. Where B is as late there as beside A, B's
lateness is the machine's, not the sharing's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import requests

from bench.clockserver import BenchServer
from bench.collector import Collector
from bench.load import MAX_BATCH, bulk_create
from bench.scenarios import cpu_per_alarm_us, cpu_snapshot
from bench.stats import summarize

LEAD_S = 5  # B's alarms start this long before A's second
TAIL_S = 15  # and end this long after it


def _create_steady(
    base_url: str, application: str, rate: float, first_ms: int, last_ms: int
) -> int:
    """B's alarms, one every 1/rate s from first_ms to last_ms, in batches."""
    step_ms = 1000 / rate
    targets = [int(first_ms + i * step_ms) for i in range(int((last_ms - first_ms) / step_ms))]
    created = 0
    with requests.Session() as session:
        for start in range(0, len(targets), MAX_BATCH):
            items: list[dict[str, Any]] = [
                {"application": application, "business_id": f"b{start + i}", "payload": "x" * 64,
                 "target_ring_at": target}
                for i, target in enumerate(targets[start : start + MAX_BATCH])
            ]  # fmt: skip
            response = session.post(f"{base_url}/v1/alarms/batch", json={"alarms": items})
            response.raise_for_status()
            created += sum(r["status"] == 201 for r in response.json()["results"])
    return created


def run_once(
    workdir: Path, burst: int, rate: float, with_neighbour: bool, apart: bool = False
) -> dict[str, Any]:
    """One drain of A's burst: alone, or with B's steady alarms on the same server, or with
    `apart`, on a clock server of B's own (its own process and database, the same MariaDB
    and RabbitMQ servers): what isolating B by a second clock would give on this machine."""
    tag = uuid.uuid4().hex[:6]
    noisy, quiet = f"noisy{tag}", f"quiet{tag}"
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(BenchServer(workdir, web_processes="2"))
        own = stack.enter_context(BenchServer(workdir, web_processes="1")) if apart else None
        quiet_server = own or server
        collectors = {noisy: Collector(server.exchange, noisy, workdir).start()}
        if with_neighbour:
            collectors[quiet] = Collector(quiet_server.exchange, quiet, workdir).start()
        target_ms = int(time.time() * 1000) + int(burst / 8_000 * 1000) + 20_000
        insert = bulk_create(server.base_url, noisy, burst, target_ms)
        quiet_created = 0
        if with_neighbour:
            quiet_created = _create_steady(
                quiet_server.base_url, quiet, rate, target_ms - LEAD_S * 1000,
                target_ms + TAIL_S * 1000,
            )  # fmt: skip
        time.sleep(max(target_ms / 1000 - time.time() - 0.2, 0))
        cpu_before = cpu_snapshot(server)
        own_before = own.cpu_s() if own is not None else 0.0
        deadline = time.monotonic() + burst / 2_000 + 30
        while collectors[noisy].count() < insert["created"] and time.monotonic() < deadline:
            time.sleep(0.2)
        cpu_used = cpu_per_alarm_us(cpu_before, cpu_snapshot(server), insert["created"])
        if own is not None:  # B's engine: beside, its work is in engine_cpu_us_per_alarm
            cpu_used["quiet_engine_cpu_us_per_alarm"] = (
                (own.cpu_s() - own_before) * 1e6 / max(insert["created"], 1)
            )
        time.sleep(max((target_ms + TAIL_S * 1000) / 1000 - time.time() + 3, 0))
        arrivals = {app: collector.stop() for app, collector in collectors.items()}
        noisy_rows = server.rung_rows(noisy)
        quiet_rows = quiet_server.rung_rows(quiet) if with_neighbour else []
    rung = [r for _, _, r, _ in noisy_rows if r is not None]
    drain_end_ms = max(rung)
    drain_s = (drain_end_ms - target_ms) / 1000
    result: dict[str, Any] = {
        "burst": burst,
        "created": insert["created"],
        "noisy_rung": len(rung),
        "noisy_lost": insert["created"] - len({a.alarm_id for a in arrivals[noisy]}),
        "drain_s": drain_s,
        "drain_rate_per_s": len(rung) / drain_s,
        # from A's second until A's last alarm arrived, per alarm of A: B's share included
        **cpu_used,
    }
    if with_neighbour:
        phases: dict[str, list[float]] = {"before": [], "during": [], "after": []}
        for a in arrivals[quiet]:
            late = a.received_ms - a.target_ms
            phase = "before" if a.target_ms < target_ms else "during"
            phases["after" if a.target_ms > drain_end_ms else phase].append(late)
        published = [
            r - t for _, t, r, _ in quiet_rows if r is not None and target_ms <= t <= drain_end_ms
        ]
        result.update(
            quiet_created=quiet_created,
            quiet_lost=quiet_created - len({a.alarm_id for a in arrivals[quiet]}),
            quiet_received_ms={name: summarize(values) for name, values in phases.items()},
            quiet_published_during_ms=summarize(published),
        )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--burst", type=int, default=100_000)
    parser.add_argument("--rate", type=float, default=100)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--apart", action="store_true",
                        help="each pair also runs B on a clock server of its own")  # fmt: skip
    args = parser.parse_args()
    sides = ("alone", "beside", "apart") if args.apart else ("alone", "beside")
    results: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    with tempfile.TemporaryDirectory() as work:
        for pair in range(args.pairs):
            turn = pair % len(sides)  # each side first in turn: a drift in the machine's
            for side in sides[turn:] + sides[:turn]:  # speed does not fall on one side only
                result = run_once(
                    Path(work), args.burst, args.rate, side != "alone", apart=side == "apart"
                )
                results[side].append(result)
                print(f"[noisy] pair {pair + 1} {side}: {json.dumps(result)}", flush=True)
    report(results)


def report(results: dict[str, list[dict[str, Any]]]) -> None:
    rates = {side: [r["drain_rate_per_s"] for r in runs] for side, runs in results.items()}
    alone = statistics.median(rates["alone"])
    for name in ("engine", "web", "mariadb", "rabbitmq"):
        key = f"{name}_cpu_us_per_alarm"
        each = ", ".join(f"{side} {statistics.median(r[key] for r in runs):.1f}"
                         for side, runs in results.items())  # fmt: skip
        print(f"[noisy] {name} CPU per alarm of A during its drain (µs): {each}")
    if "apart" in results:
        own = statistics.median(r["quiet_engine_cpu_us_per_alarm"] for r in results["apart"])
        print(f"[noisy] B's own server's engine CPU during A's drain, per alarm of A: {own:.1f} µs")
    for side in results:
        if side == "alone":
            continue
        median = statistics.median(rates[side])
        # each pair's own ratio too: its two runs were minutes apart, the pairs far longer
        ratios = [round(b / a, 3) for a, b in zip(rates["alone"], rates[side], strict=True)]
        where = "beside B" if side == "beside" else "with B on a clock of its own"
        print(f"[noisy] A's drain rate: alone {alone:.0f}/s, {where} {median:.0f}/s "
              f"(ratio of the medians {median / alone:.3f}; each pair's {ratios}, "
              f"median {statistics.median(ratios):.3f})")  # fmt: skip
        during = [r["quiet_received_ms"]["during"]["p99"] for r in results[side]]
        published = [r["quiet_published_during_ms"]["p99"] for r in results[side]]
        print(f"[noisy] B's p99 lateness during A's drain, {where} (ms): received median "
              f"{statistics.median(during):.1f} of {[round(p, 1) for p in during]}, published "
              f"median {statistics.median(published):.0f} of {published}")  # fmt: skip


if __name__ == "__main__":
    main()
