"""python -m bench.chaos --minutes N --seed S: one chaos run, judged; exits 1 when a
must-be-0 figure is not 0."""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path

import orjson

from bench.chaos.checker import check
from bench.chaos.nemesis import KINDS
from bench.chaos.report import readable
from bench.chaos.run import execute

RESULTS = Path(__file__).resolve().parents[1] / "results"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    parser.add_argument("--minutes", type=float, default=10.0, help="of load and faults")
    parser.add_argument("--seed", type=int, default=1, help="draws the faults' schedule")
    parser.add_argument("--calm", action="store_true", help="no faults: every figure is 0")
    parser.add_argument(
        "--only", help=f"these kinds of fault only, comma-separated: {','.join(KINDS)}"
    )
    parser.add_argument("--workdir", type=Path, help="for the records and logs (kept)")
    args = parser.parse_args(argv)
    if args.workdir is None:
        RESULTS.mkdir(exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        args.workdir = Path(tempfile.mkdtemp(prefix=f"chaos-{stamp}-s{args.seed}-", dir=RESULTS))
    args.workdir.mkdir(parents=True, exist_ok=True)
    kinds = () if args.calm else tuple(args.only.split(",")) if args.only else KINDS
    if unknown := set(kinds) - set(KINDS):
        parser.error(f"no such kind of fault: {', '.join(sorted(unknown))}")
    # A SIGTERM unwinds as Ctrl-C does, so every server the run started is stopped.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    execute(args.minutes, args.seed, args.workdir, kinds)
    figures = check(args.workdir)
    (args.workdir / "summary.json").write_bytes(orjson.dumps(figures, option=orjson.OPT_INDENT_2))
    print(orjson.dumps(figures).decode())
    print(readable(figures))
    print(f"records and logs: {args.workdir}")
    return 1 if figures["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
