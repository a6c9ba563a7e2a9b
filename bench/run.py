"""Run the benchmark scenarios against a local MariaDB and RabbitMQ and write the results.

    python -m bench.run                 # every scenario, 3 runs each (about an hour)
    python -m bench.run --quick         # smaller figures, 1 run each (about 8 minutes)
    python -m bench.run --only steady,burst --runs 2
    python -m bench.run --only steady --steady-rates 10000
    python -m bench.run --only noisy,purge,console --tiny

Besides the Results table's scenarios it runs the knee (bench.knee: the highest steady rate
with p99 within 25 ms, as a share of the publish limit), the noisy neighbour (bench.noisy),
the retention purge under load (bench.purge) and the console at scale (bench.console).

Writes bench/results/<stamp>.json and .md and docs/perf/lateness.png.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import console, knee, limits, noisy, purge, report, scenarios
from bench.stats import median_and_spread

ROOT = Path(__file__).resolve().parent.parent
FULL = {"steady_s": 60, "knee_s": 20, "burst": 1_000_000, "scale_rows": 10_000_000, "create_s": 30,
        "batch_alarms": 200_000, "peer_steady_s": 60, "peer_burst": 100_000,
        "noisy_burst": 100_000, "purge_rows": 1_000_000, "console_rows": 10_000_000}  # fmt: skip
QUICK = {"steady_s": 20, "knee_s": 10, "burst": 100_000, "scale_rows": 1_000_000, "create_s": 10,
         "batch_alarms": 50_000, "peer_steady_s": 20, "peer_burst": 20_000,
         "noisy_burst": 50_000, "purge_rows": 200_000, "console_rows": 1_000_000}  # fmt: skip
TINY = {"steady_s": 5, "knee_s": 3, "burst": 5_000, "scale_rows": 50_000, "create_s": 3,
        "batch_alarms": 5_000, "peer_steady_s": 5, "peer_burst": 2_000,
        "noisy_burst": 5_000, "purge_rows": 20_000, "console_rows": 50_000}  # fmt: skip
KNEE_P99_MS, KNEE_STEPS = 25, 5  # the bound of the knee's search, and the rates it tries
SCENARIOS = ("limits", "steady", "knee", "burst", "scale", "create", "mixed", "peers", "clients",
             "noisy", "purge", "console")  # fmt: skip


def run_repeated(runs: int, label: str, once: Callable[[], dict[str, Any]]) -> list[dict[str, Any]]:
    results = []
    for index in range(runs):
        started = time.monotonic()
        print(f"[bench] {label} run {index + 1}/{runs} ...", flush=True)
        results.append(once())
        print(
            f"[bench] {label} run {index + 1} took {time.monotonic() - started:.0f} s", flush=True
        )
    return results


def pick(results: list[dict[str, Any]], *path: str) -> dict[str, float]:
    values = []
    for result in results:
        value: Any = result
        for key in path:
            value = value[key]
        values.append(float(value))
    return median_and_spread(values)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--tiny", action="store_true", help="a smoke test of the harness itself")
    parser.add_argument("--summarize", type=Path, help="re-summarize a saved raw result file")
    parser.add_argument("--runs", type=int)
    parser.add_argument("--only", default=",".join(SCENARIOS))
    parser.add_argument("--web-processes", type=int, default=2)
    parser.add_argument(
        "--steady-rates", default="1000,5000,10000", help="the steady scenario's rates"
    )
    parser.add_argument(
        "--label", default="", help="a word in the results' names (bench.pinned: 'pinned'); "
        "a labelled run is not the record, and draws its plot beside its results"
    )  # fmt: skip
    args = parser.parse_args()
    if args.summarize:
        finish(json.loads(args.summarize.read_text()))
        return
    sizes = TINY if args.tiny else QUICK if args.quick else FULL
    runs = args.runs or (1 if args.quick or args.tiny else 3)
    chosen = [name for name in args.only.split(",") if name]
    # Found missing only when its scenario starts, wrk would end a run of an hour half-way.
    if {"create", "mixed"} & set(chosen) and shutil.which("wrk") is None:
        parser.error("the create and mixed scenarios need wrk: apt-get install wrk")
    workdir = Path(tempfile.mkdtemp(prefix="clock-bench-"))
    server: dict[str, Any] = {"web_processes": str(args.web_processes)}
    raw: dict[str, Any] = {"sizes": sizes, "runs": runs, "server_settings": server}
    if args.label:
        raw["label"] = args.label
    stamp = time.strftime("%Y%m%d-%H%M%S") + (f"-{args.label}" if args.label else "")
    partial = ROOT / "bench" / "results" / f"{stamp}-raw.json"
    partial.parent.mkdir(parents=True, exist_ok=True)

    def repeat(runs: int, label: str, once: Callable[[], dict[str, Any]]) -> list[dict[str, Any]]:
        partial.write_text(json.dumps(raw, default=str))  # what is done so far survives a crash
        return run_repeated(runs, label, once)

    if "limits" in chosen:
        raw["limits"] = repeat(
            runs,
            "limits",
            lambda: {
                **limits.mariadb_rates(),
                **limits.rabbitmq_rate(),
                **limits.rabbitmq_rate_with_consumer(),
            },
        )
    if "steady" in chosen:
        rates = {int(rate) for rate in args.steady_rates.split(",")}
        for rate in sorted(rates & {1_000, 5_000}):
            raw[f"steady_{rate}"] = repeat(runs, f"steady {rate}/s", functools.partial(
                scenarios.steady, workdir, rate, sizes["steady_s"], **server))  # fmt: skip
        # Creating 10,000 a second while ringing them fills both cores with the load
        # generator and the web workers: the alarms are created beforehand instead.
        if 10_000 in rates:
            raw["steady_10000"] = repeat(runs, "steady 10,000/s", lambda: scenarios.steady_precreated(
                workdir, 10_000, sizes["steady_s"], **server))  # fmt: skip
    if "knee" in chosen:  # the highest steady rate within 25 ms, as a share of the limit
        raw["knee"] = repeat(runs, "knee", lambda: knee.search(
            workdir, KNEE_P99_MS, sizes["knee_s"], KNEE_STEPS, **server))  # fmt: skip
    if "burst" in chosen:
        raw["burst"] = repeat(
            runs, "burst", lambda: scenarios.burst(workdir, sizes["burst"], **server)
        )
    if "scale" in chosen:
        raw["scale"] = repeat(runs, "scale", lambda: scenarios.scale(
            workdir, sizes["scale_rows"], 1_000, sizes["steady_s"], **server))  # fmt: skip
    if "create" in chosen:
        raw["create"] = repeat(runs, "create", lambda: scenarios.create(
            workdir, sizes["create_s"], sizes["batch_alarms"], **server))  # fmt: skip
    if "mixed" in chosen:
        raw["mixed"] = repeat(runs, "mixed", lambda: scenarios.steady(
            workdir, 1_000, sizes["steady_s"], with_api_load=True, **server))  # fmt: skip
    if "clients" in chosen:
        raw["clients"] = repeat(runs, "clients", lambda: scenarios.clients(
            workdir, 100, sizes["steady_s"], **server))  # fmt: skip
    if "peers" in chosen:
        raw["peers"] = run_peers(sizes)
        # the peers' burst size for clock too, so that their rates compare like with like
        raw["peer_size_burst"] = repeat(runs, f"burst of {sizes['peer_burst']:,}",
                                        lambda: scenarios.burst(workdir, sizes["peer_burst"], **server))  # fmt: skip
    if "noisy" in chosen:
        pairs = itertools.count()
        raw["noisy"] = repeat(
            runs, "noisy neighbour", lambda: noisy_pair(workdir, sizes, next(pairs))
        )
    if "purge" in chosen:
        raw["purge"] = repeat(runs, "purge", lambda: purge_pair(workdir, sizes))
    if "console" in chosen:  # one filled table; each call is timed several times in it
        raw["console"] = repeat(1, "console", lambda: console.measure(sizes["console_rows"], 7))
    partial.write_text(json.dumps(raw, default=str))
    finish(raw, stamp)


def noisy_pair(workdir: Path, sizes: dict[str, int], pair: int) -> dict[str, Any]:
    """A's burst alone and beside B's 100 alarms a second, the order turned every other pair
    (as bench.noisy does): whatever one run leaves the next does not fall on one side only."""
    order = ("alone", "beside") if pair % 2 == 0 else ("beside", "alone")
    return {
        side: noisy.run_once(workdir, sizes["noisy_burst"], 100, side == "beside") for side in order
    }


def purge_pair(workdir: Path, sizes: dict[str, int]) -> dict[str, Any]:
    """Steady 1,000/s on a table without finished rows, then while a backlog is purged."""
    pair = {}
    for side in ("baseline", "purge"):
        rows, age_days = purge.SIDES[side]
        pair[side] = purge.one_run(
            workdir, sizes["purge_rows"] if rows is None else rows, age_days, 1_000,
            min(sizes["steady_s"], 30), 2.0, 900,
        )  # fmt: skip
    return pair


def finish(raw: dict[str, Any], stamp: str | None = None) -> None:
    stamp = stamp or time.strftime("%Y%m%d-%H%M%S")
    summary = summarize(raw)
    json_path, md_path = report.write(summary, ROOT / "bench" / "results", stamp)
    # The published plot comes from full runs; others draw theirs beside their results.
    full = raw.get("sizes") == FULL and not raw.get("label")
    plot = ROOT / "docs" / "perf" / "lateness.png" if full else json_path.with_suffix(".png")
    if summary["lateness_samples"]:
        plot.parent.mkdir(parents=True, exist_ok=True)
        report.plot_lateness(summary["lateness_samples"], plot)
    print(md_path.read_text())
    print(f"[bench] wrote {json_path} and {md_path}")


def run_peers(sizes: dict[str, int]) -> dict[str, Any]:
    from bench.peers import apscheduler3, celery_eta

    out: dict[str, Any] = {}
    for name, module in (("celery", celery_eta), ("apscheduler3", apscheduler3)):
        print(f"[bench] peer {name} ...", flush=True)
        out[name] = {
            "steady": module.run_steady(1_000, sizes["peer_steady_s"]),
            "burst": module.run_burst(sizes["peer_burst"]),
        }
    return out


def summarize(raw: dict[str, Any]) -> dict[str, Any]:
    from bench.targets import rows_for

    return {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.node()}: {os.cpu_count()} cores, {platform.python_implementation()} "
        f"{platform.python_version()}, {platform.system()} {platform.release()}",
        "runs": raw["runs"],
        "rows": rows_for(raw, pick),
        "lateness_samples": raw.pop("_samples", {}),
        "raw": raw,
    }


if __name__ == "__main__":
    main()

__all__ = ["main", "statistics"]
