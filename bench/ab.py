"""Old code against new in one sitting: steady runs or bursts, alternating, on one machine.

    python -m bench.ab --old f78438a --scenario steady --rate 1000 --seconds 30 --pairs 3
    python -m bench.ab --old f78438a --scenario burst --alarms 100000 --pairs 2
    python -m bench.ab --old fa9f889 --between 9b96a59,f54a94d --new HEAD --scenario burst
    python -m bench.ab --old 7ca7c67 --scenario noisy --alarms 100000 --pairs 3
    python -m bench.ab --old b4396da --scenario create --seconds 30 --alarms 200000 --pairs 3
    python -m bench.ab --old b1c3cb6 --scenario precreated --rate 10000 --seconds 20 --pairs 2

The noisy scenario runs bench.noisy's A beside B only (A alone is not part of the figures),
B at --neighbour-rate alarms a second (100 by default).
The create scenario is bench.run's without its echo run: single creates with wrk for
--seconds, then --alarms through the batch API. The precreated scenario is bench.run's steady
10,000/s: --rate x --seconds alarms created beforehand, one due every 1/--rate s.
With --between, more revisions join the rotation (old, each of them, new; reversed every
other round), to find which commit moved a figure. With --shuffle SEED each round's order is
drawn at random instead, so that a slow slot of the machine does not always fall to one side.

The old revision is checked out into a temporary git worktree and its server runs from there
(PYTHONPATH first); the new one is this checkout, or another worktree with --new REV (so that
work in progress in this checkout cannot leak into a long run). Each run gets a fresh database, migrated by
the code under test. Prints each run's figures and the medians, old then new.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bench import noisy, scenarios
from bench.stats import figure

ROOT = Path(__file__).resolve().parent.parent
STEADY_FIGURES = (
    ("received p99 ms", ("received_lateness_ms", "p99")),
    ("published p99 ms", ("published_lateness_ms", "p99")),
    ("engine µs/alarm", ("engine_cpu_us_per_alarm",)),
    ("mariadb µs/alarm", ("mariadb_cpu_us_per_alarm",)),
    ("lost", ("lost",)),
    ("early", ("early",)),
)
BURST_FIGURES = (
    ("rings/s", ("ring_rate_per_s",)),
    ("engine µs/alarm", ("engine_cpu_us_per_alarm",)),
    ("mariadb µs/alarm", ("mariadb_cpu_us_per_alarm",)),
    ("lost", ("lost",)),
)
NOISY_FIGURES = (
    ("B received p99 during A's drain, ms", ("quiet_received_ms", "during", "p99")),
    ("B published p99 during A's drain, ms", ("quiet_published_during_ms", "p99")),
    ("A rings/s beside B", ("drain_rate_per_s",)),
    # CPU from A's second until its last alarm arrived, per alarm of A, B's share included
    ("engine µs per alarm of A", ("engine_cpu_us_per_alarm",)),
    ("mariadb µs per alarm of A", ("mariadb_cpu_us_per_alarm",)),
    ("B lost", ("quiet_lost",)),
)
CREATE_FIGURES = (
    ("single creates/s", ("single", "requests_per_s")),
    ("single create p99 ms", ("single", "p99_ms")),
    ("web µs/request", ("single", "web_cpu_us_per_request")),
    ("mariadb µs/request", ("single", "mariadb_cpu_us_per_request")),
    ("batch alarms/s", ("batch", "alarms_per_s")),
)
FIGURES = {"steady": STEADY_FIGURES, "precreated": STEADY_FIGURES, "burst": BURST_FIGURES,
           "noisy": NOISY_FIGURES, "create": CREATE_FIGURES}  # fmt: skip


@contextmanager
def worktree(revision: str) -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="clock-ab-") as tmp:
        path = Path(tmp) / "tree"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(path), revision],
            check=True,
        )
        try:
            yield path
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(path)], check=False
            )


@contextmanager
def code_from(path: Path | None) -> Iterator[None]:
    """Servers started in the block import clock_server from `path` (None: this checkout)."""
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(path or ROOT)
    try:
        yield
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--old", required=True, help="the git revision to compare against")
    parser.add_argument("--new", help="the git revision to compare (default: this checkout)")
    parser.add_argument("--scenario", choices=tuple(FIGURES), default="steady")
    parser.add_argument("--rate", type=float, default=1_000)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--alarms", type=int, default=100_000)
    parser.add_argument(
        "--neighbour-rate",
        type=float,
        default=100,
        help="noisy: B's alarms a second (more give its p99 during the drain more alarms)",
    )
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument(
        "--between",
        default="",
        help="more revisions, comma-separated, run in the same rotation (to bisect a change)",
    )
    parser.add_argument(
        "--shuffle",
        type=int,
        metavar="SEED",
        help="draw each round's order at random from SEED instead of alternating it",
    )
    args = parser.parse_args()
    order = random.Random(args.shuffle) if args.shuffle is not None else None
    figures = FIGURES[args.scenario]
    between = [rev for rev in args.between.split(",") if rev]
    labels = ["old", *between, "new"]
    results: dict[str, list[dict[str, Any]]] = {label: [] for label in labels}
    with contextlib.ExitStack() as stack:
        paths: dict[str, Path | None] = {
            label: stack.enter_context(worktree(rev))
            for label, rev in zip(labels[:-1], [args.old, *between], strict=True)
        }
        paths["new"] = stack.enter_context(worktree(args.new)) if args.new else None
        work = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        for pair in range(args.pairs):
            if order is not None:
                sides = order.sample(labels, len(labels))
            else:
                sides = labels if pair % 2 == 0 else labels[::-1]
            for side in sides:
                with code_from(paths[side]):
                    if args.scenario == "steady":
                        result = scenarios.steady(work, args.rate, args.seconds)
                    elif args.scenario == "precreated":
                        result = scenarios.steady_precreated(work, args.rate, args.seconds)
                    elif args.scenario == "noisy":
                        result = noisy.run_once(
                            work, args.alarms, args.neighbour_rate, with_neighbour=True
                        )
                    elif args.scenario == "create":
                        result = scenarios.creates(
                            work, int(args.seconds), args.alarms, web_processes="2"
                        )
                    else:
                        result = scenarios.burst(work, args.alarms)
                results[side].append(result)
                shown = ", ".join(f"{name} {figure(result, path)}" for name, path in figures)
                print(f"[ab] pair {pair + 1} {side}: {shown}", flush=True)
    for name, path in figures:
        line = []
        for side in labels:
            values = [v for r in results[side] if (v := figure(r, path)) is not None]
            median = statistics.median(values) if values else float("nan")
            line.append(f"{side} {median:.1f} {[round(v, 1) for v in values]}")
        print(f"[ab] {name}: median {'; '.join(line)}")


if __name__ == "__main__":
    main()
