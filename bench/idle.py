"""What a server with nothing to do costs: the CPU of its engine, of each web worker, and of
MariaDB and RabbitMQ beside it, per second, with no alarm and no request.

A platform team runs one clock for many applications, most of them quiet most of the time;
this is what the quiet costs. `--code DIR` runs the server from another checkout (a worktree
of an older revision), to compare.

    python -m bench.idle [--seconds 30] [--web-processes 2] [--code DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from bench.clockserver import BenchServer, process_cpu_s, services_cpu_s

SETTLE_S = 10.0  # the start's own work (migrations, first passes, imports) left out


def _workers(parent_pid: int) -> list[int]:
    children = Path(f"/proc/{parent_pid}/task/{parent_pid}/children").read_text().split()
    return sorted(int(pid) for pid in children)


def measure(seconds: float, web_processes: int) -> dict[str, object]:
    with BenchServer(Path(tempfile.mkdtemp()), web_processes=str(web_processes)) as server:
        assert server.process is not None
        time.sleep(SETTLE_S)
        workers = _workers(server.process.pid)
        before = (server.cpu_s(), [process_cpu_s(pid) for pid in workers], services_cpu_s())
        time.sleep(seconds)
        after = (server.cpu_s(), [process_cpu_s(pid) for pid in workers], services_cpu_s())

    def per_s(used: float) -> float:
        return round(used / seconds * 1000, 1)

    return {
        "seconds": seconds,
        "engine_cpu_ms_per_s": per_s(after[0] - before[0]),
        "web_worker_cpu_ms_per_s": [per_s(b - a) for a, b in zip(before[1], after[1], strict=True)],
        **{f"{name}_cpu_ms_per_s": per_s(after[2][name] - before[2].get(name, 0.0))
           for name in after[2]},
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--web-processes", type=int, default=2)
    parser.add_argument("--code", help="run the server from this checkout (PYTHONPATH first)")
    args = parser.parse_args()
    if args.code:
        os.environ["PYTHONPATH"] = str(Path(args.code).resolve())
    print(json.dumps(measure(args.seconds, args.web_processes)))


if __name__ == "__main__":
    main()
