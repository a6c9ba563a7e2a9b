"""Recurring schedules at scale: many schedules firing every minute.

    python -m bench.schedules --steady                  # 100,000 intervals, then alarms alike
    python -m bench.schedules --calendar cron           # 100,000 crons on whole seconds
    python -m bench.schedules --schedules 10000 --seconds 30
    python -m bench.schedules --planner-only            # the planner alone, in this process

The whole run: a fresh server (MariaDB, `--web-processes` web workers: 2, so that the
workers plan, as in a deployment on MariaDB), `--schedules` schedules made
through the API, about schedules/60 occurrences due each second (100,000: about 1,667):
- `--calendar interval` (the default): schedule i rings `every_s` 60 from a `start_at`
  i/schedules of a minute past one anchor, so the occurrences are spread evenly over each
  minute, as one-off alarms at that rate are;
- `--calendar cron`: schedule i has the 6-field cron `<i mod 60> * * * * *`, so each whole
  second is a burst of schedules/60 occurrences due at the same millisecond.

After the planner has caught up (`--warmup` seconds), the occurrences due in a window of
`--seconds` are measured: their lateness as received by a RabbitMQ consumer and as published
(rung_at minus due, from the database), lost and twice-rung ones, and the CPU per occurrence
of the server's engine process, its web workers (which plan), MariaDB and RabbitMQ.
`--steady`
then runs bench's steady scenario at the same rate for the same seconds on a fresh server,
so that the occurrences' figures stand beside one-off alarms' of the same sitting.

`--bulk` writes the schedules straight into the table, as the API stores them (all due
from the next minute on), instead of through the API: minutes instead of a quarter of an hour.

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
from sqlalchemy import Connection, create_engine, text

from bench.clockserver import MARIADB_URL, BenchServer, services_cpu_s
from bench.collector import Collector
from bench.scenarios import cpu_per_alarm_us, cpu_snapshot, steady
from bench.stats import summarize
from clock_server.store import migrate
from clock_server.store.alarms import AlarmStore
from clock_server.store.db import open_database
from clock_server.store.schedules import SqlSchedules

AHEAD_MS = 30_000  # the server's look-ahead with the default preload window


def _calendar(kind: str, i: int, count: int, anchor_ms: int) -> dict[str, Any]:
    """Schedule i of `count`: its calendar, due once a minute."""
    if kind == "cron":
        return {"cron": f"{i % 60} * * * * *"}
    return {"every_s": 60, "start_at": _first_at(kind, i, count, anchor_ms)}


def _first_at(kind: str, i: int, count: int, anchor_ms: int) -> int:
    """Schedule i's first occurrence from the minute boundary `anchor_ms`: its second of the
    minute for a cron, its `start_at` for an interval."""
    if kind == "cron":
        return anchor_ms + (i % 60) * 1000
    return anchor_ms + i * 60_000 // count


def _due_in(kind: str, i: int, count: int, anchor_ms: int, window: range) -> int:
    """How many occurrences of schedule i, once a minute from its first, fall in
    [window.start, window.stop) (ms). None before its first: a window that opened before
    the anchor (the bulk writes having begun late in a minute) would otherwise expect
    occurrences that never were."""
    first_at = _first_at(kind, i, count, anchor_ms)
    start = max(window.start, first_at)
    first = start - (start - first_at) % 60_000
    first += 60_000 if first < start else 0
    return len(range(first, window.stop, 60_000))


def _put_all(base_url: str, application: str, count: int, kind: str, anchor_ms: int) -> float:
    """Make `count` schedules through the API, 8 at a time; seconds it took."""
    started = time.monotonic()

    def put(chunk: range) -> None:
        with requests.Session() as session:
            for i in chunk:
                body = {**_calendar(kind, i, count, anchor_ms), "payload": f"schedule {i}"}
                answer = session.put(f"{base_url}/v1/schedules/{application}/s{i}", json=body)
                answer.raise_for_status()

    step = max(count // 8, 1)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(put, [range(n, min(n + step, count)) for n in range(0, count, step)]))
    return time.monotonic() - started


def run_whole(
    workdir: Path, schedules: int, seconds: int, warmup: int, kind: str, bulk: bool, web: int
) -> dict[str, Any]:
    application = f"sched{uuid.uuid4().hex[:6]}"
    with BenchServer(workdir, web_processes=str(web)) as server:
        collector = Collector(server.exchange, application, workdir).start()
        if bulk:
            anchor_ms = (int(time.time()) // 60 + 1) * 60_000  # the next minute boundary
            started = time.monotonic()
            database = create_engine(server.database_url)
            with database.begin() as conn:
                _write_all(conn, application, schedules, kind, anchor_ms)
            database.dispose()
            took_s = time.monotonic() - started
        else:
            anchor_ms = (int(time.time()) // 60 - 1) * 60_000  # a minute boundary in the past
            took_s = _put_all(server.base_url, application, schedules, kind, anchor_ms)
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
    window = range(window_from, window_to)
    expected = sum(_due_in(kind, i, schedules, anchor_ms, window) for i in range(schedules))
    published = [
        rung - t for _, t, rung, _ in rows if rung is not None and window_from <= t < window_to
    ]
    return {
        "calendar": kind,
        "schedules": schedules,
        "made_in_s": round(took_s, 1),
        "window_from_anchor_s": (window_from - anchor_ms) / 1000,
        "window_s": seconds,
        "expected": expected,
        "received": len(per_id),
        "twice": sum(1 for n in per_id.values() if n > 1),
        "lost": expected - len(per_id),
        "received_lateness_ms": summarize([a.received_ms - a.target_ms for a in inside]),
        "published_lateness_ms": summarize(published),
        **cpu_per_alarm_us(before, after, len(per_id), unit="occurrence"),
    }


def _write_all(conn: Connection, application: str, count: int, kind: str, start_ms: int) -> None:
    """Write `count` schedules straight into the table, as the API stores them, each next due
    in the minute from `start_ms` (a minute boundary)."""
    rows = []
    for i in range(count):
        calendar = _calendar(kind, i, count, start_ms)
        first = _first_at(kind, i, count, start_ms)
        rows.append({"a": application, "s": f"s{i}", "c": calendar.get("cron"),
                     "e": calendar.get("every_s"), "st": calendar.get("start_at", 0),
                     "n": first, "p": f"schedule {i}"})  # fmt: skip
    conn.execute(
        text(
            "INSERT INTO clock_schedule (application, schedule_id, cron, every_s, timezone, "
            "payload, start_at, catch_up, catch_up_max, paused, next_at, version, create_time, "
            "update_time) VALUES (:a, :s, :c, :e, 'UTC', :p, :st, 'skip', 100, 0, :n, 0, 0, 0)"
        ),
        rows,
    )


def run_planner(schedules: int, kind: str) -> dict[str, Any]:
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
        # minute from `start`.
        with store.db.begin() as conn:
            _write_all(conn, "bench", schedules, kind, start)
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
        "calendar": kind,
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
    parser.add_argument("--calendar", choices=("interval", "cron"), default="interval")
    parser.add_argument("--steady", action="store_true",
                        help="then one-off alarms at the same rate, for the same seconds")  # fmt: skip
    parser.add_argument("--web-processes", type=int, default=2,
                        help="CLOCK_WEB_PROCESSES of the servers (with 2 or more, the web workers plan)")  # fmt: skip
    parser.add_argument("--bulk", action="store_true",
                        help="write the schedules straight into the table, not through the API")  # fmt: skip
    parser.add_argument("--planner-only", action="store_true")
    args = parser.parse_args()
    if args.planner_only:
        print(json.dumps(run_planner(args.schedules, args.calendar), indent=1))
        return
    with tempfile.TemporaryDirectory() as work:
        result = run_whole(
            Path(work),
            args.schedules,
            args.seconds,
            args.warmup,
            args.calendar,
            args.bulk,
            args.web_processes,
        )
        print(json.dumps(result, indent=1), flush=True)
    if args.steady:
        with tempfile.TemporaryDirectory() as work:
            alike = steady(
                Path(work), args.schedules / 60, args.seconds, web_processes=str(args.web_processes)
            )
        alike.pop("received_sample", None)
        print(json.dumps({"steady_alarms_alike": alike}, indent=1))


if __name__ == "__main__":
    main()
