"""The 100 clients' load once, and which alarms the server rang late, read from the database.

    python -m bench.late_rows                   # 60 s of wrk with 100 connections
    python -m bench.late_rows --seconds 30 --late-ms 200

A fresh BenchServer (two web processes, as bench.run starts it) and the bench's consumer;
wrk creates alarms due 1-10 s later as fast as the server answers, as `bench.run --only
clients` does. Then every row's `create_time`, `target_ring_at` and `rung_at`: how many were
rung more than `late_ms` after their time, by the second they were created and the second
they were rung (from the first create), the ids missing from the range the load used, and the
engine's readings from the start and ids given up on, by reason.
"""

from __future__ import annotations

import argparse
import collections
import tempfile
import time
from pathlib import Path

from sqlalchemy import create_engine, text

from bench.clockserver import BenchServer
from bench.collector import Collector
from bench.wrk_load import WrkCreate

SETTLE_S = 16  # the last alarms are due 10 s after wrk stops, and their answer in flight


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--connections", type=int, default=100)
    parser.add_argument("--late-ms", type=int, default=500)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="bench-late-"))
    application = f"late{int(time.time())}"
    with BenchServer(workdir, web_processes="2") as server:
        collector = Collector(server.exchange, application, workdir).start()
        wrk = WrkCreate(server.base_url, application, args.seconds,
                        connections=args.connections, delay_ms=(1_000, 10_000)).start().result()  # fmt: skip
        time.sleep(SETTLE_S)
        collector.stop()
        preload = server.preload_counters()
        engine = create_engine(server.database_url)
        query = text(
            "SELECT id, create_time, target_ring_at, rung_at FROM clock"
            " WHERE application = :a ORDER BY id"
        )
        with engine.connect() as conn:
            rows = conn.execute(query, {"a": application}).all()
        engine.dispose()
        print(f"wrk: {wrk}\nserver log: {server.log_path}\npreload: {preload}")
    if not rows:
        raise SystemExit("no alarm was created")
    start = min(row.create_time for row in rows)
    late = [row for row in rows if row.rung_at and row.rung_at - row.target_ring_at > args.late_ms]
    print(f"rows {len(rows)}, not rung {sum(1 for row in rows if not row.rung_at)}, "
          f"rung over {args.late_ms} ms late {len(late)}")  # fmt: skip
    by_created = collections.Counter((row.create_time - start) // 1000 for row in late)
    by_rung = collections.Counter((row.rung_at - start) // 1000 for row in late)
    print("late, by the second created:", sorted(by_created.items()))
    print("late, by the second rung:", sorted(by_rung.items()))
    if late:
        lateness = sorted(row.rung_at - row.target_ring_at for row in late)
        print(f"their lateness (ms): {lateness[0]} to {lateness[-1]}")
    ids = [row.id for row in rows]
    print(f"ids {ids[0]}-{ids[-1]}, missing {ids[-1] - ids[0] + 1 - len(ids)}")


if __name__ == "__main__":
    main()
