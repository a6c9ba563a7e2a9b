"""Peer 1: Celery ETA tasks on RabbitMQ, run by a real ``celery worker`` subprocess.

``python -m bench.peers.celery_eta --steady 1000 --duration 60`` or ``--burst 100000``.
Each run uses a fresh queue (and its direct exchange) ``bench_peers_celery_<hex>``, deleted at
the end, and a worker started with ``-Q <that queue>``; this process publishes with
``apply_async(eta=...)`` from one thread.
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
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import celery
import kombu

from bench.peers import workloads
from bench.peers.celery_app import BROKER, PREFETCH_ENV, app
from bench.peers.celery_app import record as record_task
from bench.peers.common import (
    Collector,
    peak_rss_mib,
    raise_on_sigterm,
    start_process,
    stop_process,
)


@dataclass(frozen=True)
class Worker:
    """How the ``celery worker`` subprocess is started (defaults from ``$BENCH_PEERS_CELERY_*``).

    Defaults are the best of what was tried here: ``-P threads -c 4`` (prefork -c 2 and solo were
    far later at 1,000/s) and ``prefetch_multiplier`` 0, unlimited: RabbitMQ pushes every ETA
    message to the worker at once (about 8 KiB of worker memory per held task). With Celery's
    default (4) the worker raises its channel's prefetch by one per ETA task it holds, but delivery
    resumes only slowly after such a raise (celery/celery issue 2731), so ETA tasks mostly wait in
    the queue until the worker has free slots and are taken late. With unlimited prefetch a warm
    shutdown after a burst takes about a minute, so the worker is usually SIGKILLed after the
    20 s grace (``worker_exit`` -9); by then every job has run and nothing is lost.
    """

    pool: str = os.environ.get("BENCH_PEERS_CELERY_POOL", "threads")
    concurrency: int = int(os.environ.get("BENCH_PEERS_CELERY_CONCURRENCY", "4"))
    prefetch_multiplier: int = int(os.environ.get(PREFETCH_ENV, "0"))

    def argv(self, queue: str) -> list[str]:
        return [sys.executable, "-m", "celery", "-A", "bench.peers.celery_app", "worker",
                "-Q", queue, "-n", f"{queue}@%h", "-l", "WARNING",
                "-P", self.pool, "-c", str(self.concurrency),
                "--without-gossip", "--without-mingle", "--without-heartbeat"]  # fmt: skip


def _settings(queue: str, worker: Worker) -> dict[str, Any]:
    return {
        "tool": "celery",
        "celery_version": celery.__version__,
        "kombu_version": kombu.__version__,
        "python": platform.python_version(),
        "broker": BROKER.split("@")[-1],
        "queue": queue,
        "worker_pool": worker.pool,
        "worker_concurrency": worker.concurrency,
        "worker_prefetch_multiplier": worker.prefetch_multiplier,
        "worker_flags": "--without-gossip --without-mingle --without-heartbeat",
        "serializer": "json",
        "producer": "apply_async(eta=datetime UTC), one thread, no publisher confirms",
        "cpus": os.cpu_count(),
        "loadavg_start": os.getloadavg(),
    }


def _delete_queue(queue: str) -> None:
    with app.connection_for_write() as conn:
        channel = conn.default_channel
        channel.queue_delete(queue)
        channel.exchange_delete(queue)


@contextmanager
def celery_runner(
    config: Worker,
) -> Iterator[tuple[Callable[[int, float], None], Collector, dict[str, Any]]]:
    """Start a worker on a fresh queue; yield (submit, collector, info); clean everything up."""
    queue = f"bench_peers_celery_{uuid.uuid4().hex[:8]}"
    out_dir = Path(tempfile.mkdtemp(prefix="bench_peers_celery_"))
    info: dict[str, Any] = _settings(queue, config)
    worker = None
    try:
        prefetch = {PREFETCH_ENV: str(config.prefetch_multiplier)}  # the CLI flag can't say 0
        worker = start_process(config.argv(queue), out_dir, "worker", prefetch)

        def submit(job_id: int, due_ms: float) -> None:
            eta = datetime.fromtimestamp(due_ms / 1000.0, tz=UTC)
            record_task.apply_async((job_id, due_ms), eta=eta, queue=queue)

        yield submit, Collector(out_dir), info
        info["worker_peak_rss_mib"] = peak_rss_mib(worker.pid)
    finally:
        if worker is not None:
            info["worker_exit"] = stop_process(worker)
        try:
            _delete_queue(queue)
        finally:
            log = out_dir / "worker.log"
            text = log.read_text(errors="replace") if log.exists() else ""
            if info.get("worker_exit") or "Traceback" in text:
                info["worker_log_tail"] = text[-2000:]
            shutil.rmtree(out_dir, ignore_errors=True)


def run_steady(
    rate_per_s: float, duration_s: float, worker: Worker | None = None
) -> dict[str, Any]:
    with celery_runner(worker or Worker()) as (submit, collector, info):
        info["warm_up_creation_rate_per_s"] = round(workloads.warm_up(submit, collector), 1)
        result = workloads.steady(submit, collector, rate_per_s, duration_s)
    return {**info, **result}


def run_burst(count: int, worker: Worker | None = None, lead_factor: float = 2.0) -> dict[str, Any]:
    with celery_runner(worker or Worker()) as (submit, collector, info):
        rate = workloads.warm_up(submit, collector, min(2000, max(count, 100)))
        info["warm_up_creation_rate_per_s"] = round(rate, 1)
        result = workloads.burst(submit, collector, count, rate, lead_factor)
    return {**info, **result}


def main(argv: list[str] | None = None) -> None:
    default = Worker()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--steady", type=float, metavar="RATE_PER_S")
    group.add_argument("--burst", type=int, metavar="COUNT")
    parser.add_argument("--duration", type=float, default=60.0, help="steady: seconds")
    parser.add_argument(
        "--lead-factor", type=float, default=2.0, help="burst: T = now + 5 s + this * count / rate"
    )
    parser.add_argument("--pool", default=default.pool, help="worker pool: threads, prefork, solo")
    parser.add_argument("--concurrency", type=int, default=default.concurrency)
    parser.add_argument(
        "--prefetch-multiplier", type=int, default=default.prefetch_multiplier, help="0: unlimited"
    )
    args = parser.parse_args(argv)
    raise_on_sigterm()
    worker = Worker(args.pool, args.concurrency, args.prefetch_multiplier)
    started = time.time()
    if args.steady is not None:
        result = run_steady(args.steady, args.duration, worker)
    else:
        result = run_burst(args.burst, worker, args.lead_factor)
    result["wall_s"] = round(time.time() - started, 1)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
