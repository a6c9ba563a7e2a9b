"""Run the whole peer comparison and print one Markdown table (and optionally save the JSON).

``python -m bench.peers.run_all [--steady 1000] [--duration 60] [--burst 100000] [--repeat 2]
[--peers celery_eta,apscheduler3] [--out results.json]``; runs one thing at a time.
"""

from __future__ import annotations

import argparse
import importlib
import json
import traceback
from pathlib import Path
from typing import Any

from bench.peers.common import raise_on_sigterm

PEERS = ("celery_eta", "apscheduler3")


def _row(peer: str, r: dict[str, Any]) -> str:
    lat = r.get("lateness_ms") or {}
    cells = [peer, r.get("workload", "?")]
    if r.get("workload") == "steady":
        cells += [f"{r['created']} @ {r['creation_rate_per_s']}/s", str(r["ran"]), str(r["lost"])]
    else:
        before = "" if r.get("created_before_T") else " (NOT before T)"
        cells += [f"{r['count']} @ {r['creation_rate_per_s']}/s{before}", str(r["ran"]),
                  str(r["lost"])]  # fmt: skip
    cells += [str(lat.get(k)) for k in ("early", "p50", "p99", "p999", "max")]
    if r.get("workload") == "burst":
        cells += [str(r.get("T_to_last_ms")), str(r.get("rings_per_s"))]
    else:
        cells += ["", ""]
    return "| " + " | ".join(cells) + " |"


HEADER = (
    "| peer | workload | created @ rate | ran | lost | early | p50 ms | p99 ms | p99.9 ms | max ms "
    "| T->last ms | rings/s |\n|" + "---|" * 12
)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steady", type=float, default=1000.0, help="rate/s; 0 to skip")
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--burst", type=int, default=100_000, help="count; 0 to skip")
    parser.add_argument("--repeat", type=int, default=1, help="steady runs per peer")
    parser.add_argument("--peers", default=",".join(PEERS))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    raise_on_sigterm()
    results: list[dict[str, Any]] = []
    for peer in args.peers.split(","):
        module = importlib.import_module(f"bench.peers.{peer}")
        runs: list[tuple[str, Any]] = []
        runs += [("steady", (args.steady, args.duration))] * (args.repeat if args.steady else 0)
        runs += [("burst", (args.burst,))] if args.burst else []
        for kind, params in runs:
            try:
                result = getattr(module, f"run_{kind}")(*params)
            except Exception:
                result = {"workload": kind, "error": traceback.format_exc(limit=3)}
            result["peer"] = peer
            results.append(result)
            print(json.dumps(result), flush=True)
            if args.out:
                args.out.write_text(json.dumps(results, indent=2))
    print(HEADER)
    for r in results:
        print(_row(r["peer"], r) if "error" not in r else f"| {r['peer']} | {r['workload']} | "
              f"error: {r['error'].splitlines()[-1]} |")  # fmt: skip


if __name__ == "__main__":
    main()
