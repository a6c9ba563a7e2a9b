"""Recurring schedules at scale: many schedules firing every minute, spread over its seconds.

    python -m bench.schedules                           # 100,000 schedules, 60 s measured
    python -m bench.schedules --schedules 10000 --seconds 30
    python -m bench.schedules --planner-only            # the planner alone, in this process

The whole run: a fresh server (MariaDB, the default processes), `--schedules` schedules made
through the API, schedule i with the 6-field cron `<i mod 60> * * * * *`, so about
schedules/60 occurrences fall due each second (100,000: about 1,667 a second). After the
planner has caught up (`--warmup` seconds), the occurrences due in a window of `--seconds`
are measured: their lateness as received by a RabbitMQ consumer and as published (rung_at
minus due, from the database), lost and twice-rung ones, and the CPU per occurrence of the
server's engine process (which runs the planner), MariaDB and RabbitMQ.

`--planner-only` measures what making the occurrences costs, apart from ringing them: the
store's planner pass in this process on a fresh MariaDB database with `--schedules`
schedules, stepped over one minute on its own clock, CPU per occurrence made of this process
and of MariaDB.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests
from sqlalchemy import create_engine, text

from bench.clockserver import MARIADB_URL, BenchServer, services_cpu_s
from bench.collector import Collector
from bench.scenarios import cpu_per_alarm_us, cpu_snapshot
from bench.stats import summarize
from clock_server.store import migrate
from clock_server.store.alarms import AlarmStore
from clock_server.store.db import open_database
from clock_server.store.schedules import SqlSchedules

AHEAD_MS = 30_000  # the server's look-ahead with the default preload window


def _put_all(base_url: str, application: str, count: int) -> float:
    """Make `count` schedules through the API, 8 at a time; seconds it took."""
    started = time.monotonic()

    def put(chunk: range) -> None:
        with requests.Session() as session:
            for i in chunk:
                body = {"cron": f"{i % 60} * * * * *", "payload": f"schedule {i}"}
                answer = session.put(f"{base_url}/v1/schedules/{application}/s{i}", json=body)
                answer.raise_for_status()

    step = max(count // 8, 1)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, [range(n, min(n + step, count)) for n in range(0, count, step)]))
    return time.monotonic() - started


def run_whole(workdir: Path, schedules: int, seconds: int, warmup: int) -> dict[str, Any]:
    application = f"sched{uuid.uuid4().hex[:6]}"
    with BenchServer(workdir) as server:
        collector = Collector(server.exchange, application, workdir).start()
        took_s = _put_all(server.base_url, application, schedules)
        time.sleep(warmup)
        window_from = (int(time.time()) + 1) * 1000
        window_to = window_from + seconds * 1000
        time.sleep(max(window_from / 1000 - time.time(), 0))
        before = cpu_snapshot(server, collector)
        time.sleep(max(window_to / 1000 - time.time(), 0))
        after = cpu_snapshot(server, collector)
        time.sleep(3)  # the last ones' confirms and arrivals
        arrivals = collector.stop()
        rows = server.rung_rows(application)
    inside = [a for a in arrivals if window_from <= a.target_ms < window_to]
    per_id = Counter(a.alarm_id for a in inside)
    expected = sum(
        1 for i in range(schedules) for s in range(window_from // 1000, window_to // 1000)
        if s % 60 == i % 60
    )  # fmt: skip
    published = [
        rung - t for _, t, rung, _ in rows if rung is not None and window_from <= t < window_to
    ]
    return {
        "schedules": schedules,
        "made_in_s": round(took_s, 1),
        "window_s": seconds,
        "expected": expected,
        "received": len(per_id),
        "twice": sum(1 for n in per_id.values() if n > 1),
        "lost": expected - len(per_id),
        "received_lateness_ms": summarize([a.received_ms - a.target_ms for a in inside]),
        "published_lateness_ms": summarize(published),
        **cpu_per_alarm_us(before, after, len(per_id), unit="occurrence"),
    }


def run_planner(schedules: int) -> dict[str, Any]:
    """The planner's pass alone: a minute of passes, one a second, on its own clock."""
    name = f"bench_plan_{uuid.uuid4().hex[:8]}"
    admin = create_engine(MARIADB_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4"))
    try:
        store = AlarmStore(open_database(f"{MARIADB_URL}/{name}", 4))
        migrate.upgrade_at_start(store.db)
        plans = SqlSchedules(store)
        start = (int(time.time()) // 60 + 1) * 60_000
        # The schedules as the API would store them, written in bulk: each next due in the
        # minute from `start`, at its second.
        rows = [
            {"a": "bench", "s": f"s{i}", "c": f"{i % 60} * * * * *", "n": start + (i % 60) * 1000}
            for i in range(schedules)
        ]
        with store.db.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO clock_schedule (application, schedule_id, cron, timezone, "
                    "payload, start_at, catch_up, catch_up_max, paused, next_at, version, "
                    "create_time, update_time) VALUES (:a, :s, :c, 'UTC', 'p', 0, 'skip', 100, "
                    "0, :n, 0, 0, 0)"
                ),
                rows,
            )
        made = 0
        cpu_before = resource.getrusage(resource.RUSAGE_SELF)
        db_before = services_cpu_s()["mariadb"]
        wall = time.perf_counter()
        for second in range(60):
            now = start - AHEAD_MS + second * 1_000
            while True:
                step = plans.plan(now, AHEAD_MS, 200)
                made += step.made
                if step.schedules < 200:
                    break
        wall_s = time.perf_counter() - wall
        cpu_after = resource.getrusage(resource.RUSAGE_SELF)
        db_s = services_cpu_s()["mariadb"] - db_before
        own_s = (cpu_after.ru_utime + cpu_after.ru_stime) - (
            cpu_before.ru_utime + cpu_before.ru_stime
        )
        store.close()
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE `{name}`"))
        admin.dispose()
    return {
        "schedules": schedules,
        "occurrences_made": made,
        "planner_cpu_us_per_occurrence": own_s * 1e6 / max(made, 1),
        "mariadb_cpu_us_per_occurrence": db_s * 1e6 / max(made, 1),
        "wall_s_for_a_minute": round(wall_s, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--schedules", type=int, default=100_000)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=45,
                        help="seconds after the schedules are made before the window")  # fmt: skip
    parser.add_argument("--planner-only", action="store_true")
    args = parser.parse_args()
    if args.planner_only:
        result = run_planner(args.schedules)
    else:
        with tempfile.TemporaryDirectory() as work:
            result = run_whole(Path(work), args.schedules, args.seconds, args.warmup)
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
