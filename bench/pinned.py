"""bench.run with the database on a core of its own: the projection for a deployment whose
database has a machine of its own, on a box whose cores the database, the broker, clock and
the load otherwise share.

    python -m bench.pinned -- --only burst,knee --runs 1

A side MariaDB (bench.chaos.sidedb), set as the machine's own is (a commit flushed on every
transaction, a 128 MiB buffer pool, no binary log), runs pinned by `taskset` to the last CPU;
bench.run, with the arguments after `--`, runs pinned to the others against it (clock, its
web processes and the load, all children of it, inherit the pinning). The machine's own
MariaDB is not touched and stays idle. RabbitMQ is the machine's own, not pinned: it runs
where the scheduler puts it, so the database's core is its own but for the broker's share of
it. The results are written as bench.run writes them, their names ending in `-pinned`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from bench.chaos.sidedb import SideMariaDB

# The machine's MariaDB as this box runs it (SELECT @@innodb_flush_log_at_trx_commit, ...).
AS_THE_MACHINE_S = [
    "--innodb-flush-log-at-trx-commit=1",
    "--innodb-buffer-pool-size=128M",
    "--innodb-log-file-size=96M",
]


def cores() -> tuple[str, str]:
    """The database's CPU, and the others', as taskset lists them."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise SystemExit("bench.pinned needs at least two CPUs")
    return str(cpus[-1]), ",".join(str(cpu) for cpu in cpus[:-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_args", nargs=argparse.REMAINDER, help="bench.run's, after --")
    args = parser.parse_args()
    run_args = [a for a in args.run_args if a != "--"]
    database_cpu, other_cpus = cores()
    side = SideMariaDB()
    side.options = AS_THE_MACHINE_S
    side.prefix = ["taskset", "-c", database_cpu]
    try:
        side.start()
        url = side.url.rsplit("/", 1)[0]  # bench.run makes a database per run on the server
        print(f"[pinned] MariaDB on CPU {database_cpu} at {url}; bench.run on {other_cpus}",
              flush=True)  # fmt: skip
        env = {**os.environ, "CLOCK_BENCH_MARIADB_URL": url}
        command = ["taskset", "-c", other_cpus, sys.executable, "-m", "bench.run",
                   "--label", "pinned", *run_args]  # fmt: skip
        return subprocess.run(command, env=env, check=False).returncode
    finally:
        side.stop()


if __name__ == "__main__":
    sys.exit(main())
