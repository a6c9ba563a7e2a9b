"""Peer 2: APScheduler 3 (BackgroundScheduler, date trigger) on a SQLAlchemyJobStore in MariaDB.

``python -m bench.peers.apscheduler3 --steady 1000 --duration 60`` or ``--burst 100000``.
Each run creates a database ``bench_aps_<hex>`` (dropped at the end). This process adds jobs
through a scheduler started paused (so ``add_job`` writes straight to the store and runs
nothing); a separate process (:mod:`bench.peers.aps_worker`) runs them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pymysql

from bench.peers import workloads
from bench.peers.aps_worker import JOB_DEFAULTS, make_scheduler
from bench.peers.common import (
    Collector,
    peak_rss_mib,
    raise_on_sigterm,
    start_process,
    stop_process,
)

MYSQL = os.environ.get("BENCH_PEERS_MYSQL", "root@127.0.0.1:3306")
THREADS = int(os.environ.get("BENCH_PEERS_APS_THREADS", "10"))
POLL_S = float(os.environ.get("BENCH_PEERS_APS_POLL", "0.1"))


def _admin() -> pymysql.connections.Connection[Any]:
    user, _, hostport = MYSQL.rpartition("@")
    user, _, password = user.partition(":")
    host, _, port = hostport.partition(":")
    return pymysql.connect(host=host, port=int(port or 3306), user=user, password=password)


def _server_facts() -> dict[str, Any]:
    with _admin() as conn, conn.cursor() as cur:
        cur.execute("SELECT VERSION(), @@innodb_flush_log_at_trx_commit, @@innodb_buffer_pool_size")
        ver, flush, pool = cur.fetchone() or (None, None, None)
    return {
        "mariadb": ver,
        "innodb_flush_log_at_trx_commit": flush,
        "innodb_buffer_pool_mib": int(pool or 0) // 2**20,
    }


def _settings(database: str, threads: int, poll_s: float) -> dict[str, Any]:
    return {
        "tool": "apscheduler",
        "apscheduler_version": version("APScheduler"),
        "sqlalchemy_version": version("SQLAlchemy"),
        "pymysql_version": version("PyMySQL"),
        "python": platform.python_version(),
        "database": database,
        **_server_facts(),
        "job_store": "SQLAlchemyJobStore (mysql+pymysql)",
        "executor": f"ThreadPoolExecutor(max_workers={threads})",
        "job_defaults": JOB_DEFAULTS,
        "worker_wakeup_poll_s": poll_s,
        "producer": "scheduler.start(paused=True); add_job(trigger='date'), one thread",
        "cpus": os.cpu_count(),
        "loadavg_start": os.getloadavg(),
    }


@contextmanager
def aps_runner(
    threads: int, poll_s: float
) -> Iterator[tuple[Callable[[int, float], None], Collector, dict[str, Any]]]:
    """Create the database, the paused generator scheduler and the worker process; yield
    (submit, collector, info); then stop both and drop the database."""
    database = f"bench_aps_{uuid.uuid4().hex[:8]}"
    out_dir = Path(tempfile.mkdtemp(prefix="bench_peers_aps_"))
    with _admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}`")
    url = f"mysql+pymysql://{MYSQL}/{database}"
    info = _settings(database, threads, poll_s)
    generator, worker = None, None
    try:
        generator = make_scheduler(url)
        generator.start(paused=True)  # creates the table; runs nothing
        argv = [
            sys.executable,
            "-m",
            "bench.peers.aps_worker",
            url,
            "--threads",
            str(threads),
            "--poll",
            str(poll_s),
        ]
        worker = start_process(argv, out_dir, "worker", {})

        def submit(job_id: int, due_ms: float) -> None:
            run_date = datetime.fromtimestamp(due_ms / 1000.0, tz=UTC)
            generator.add_job(
                "bench.peers.common:record",
                "date",
                args=(job_id, due_ms),
                run_date=run_date,
                id=str(job_id),
            )

        yield submit, Collector(out_dir), info
        info["worker_peak_rss_mib"] = peak_rss_mib(worker.pid)
    finally:
        if worker is not None:
            info["worker_exit"] = stop_process(worker)
        if generator is not None:
            # A stopping scheduler processes due jobs once even if paused: detach the store first.
            generator.remove_jobstore("default")
            generator.shutdown(wait=False)
        try:
            with _admin() as conn, conn.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{database}`")
        finally:
            log = out_dir / "worker.log"
            text = log.read_text(errors="replace") if log.exists() else ""
            if info.get("worker_exit") or "Traceback" in text:
                info["worker_log_tail"] = text[-2000:]
            shutil.rmtree(out_dir, ignore_errors=True)


def run_steady(
    rate_per_s: float, duration_s: float, threads: int = THREADS, poll_s: float = POLL_S
) -> dict[str, Any]:
    with aps_runner(threads, poll_s) as (submit, collector, info):
        info["warm_up_creation_rate_per_s"] = round(workloads.warm_up(submit, collector), 1)
        result = workloads.steady(submit, collector, rate_per_s, duration_s)
    return {**info, **result}


def run_burst(
    count: int, threads: int = THREADS, poll_s: float = POLL_S, lead_factor: float = 2.0
) -> dict[str, Any]:
    with aps_runner(threads, poll_s) as (submit, collector, info):
        rate = workloads.warm_up(submit, collector, min(2000, max(count, 100)))
        info["warm_up_creation_rate_per_s"] = round(rate, 1)
        result = workloads.burst(submit, collector, count, rate, lead_factor)
    return {**info, **result}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--steady", type=float, metavar="RATE_PER_S")
    group.add_argument("--burst", type=int, metavar="COUNT")
    parser.add_argument("--duration", type=float, default=60.0, help="steady: seconds")
    parser.add_argument(
        "--lead-factor", type=float, default=2.0, help="burst: T = now + 5 s + this * count / rate"
    )
    parser.add_argument("--threads", type=int, default=THREADS, help="executor threads")
    parser.add_argument("--poll", type=float, default=POLL_S, help="worker wakeup period, s")
    args = parser.parse_args(argv)
    raise_on_sigterm()
    started = time.time()
    if args.steady is not None:
        result = run_steady(args.steady, args.duration, args.threads, args.poll)
    else:
        result = run_burst(args.burst, args.threads, args.poll, args.lead_factor)
    result["wall_s"] = round(time.time() - started, 1)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
