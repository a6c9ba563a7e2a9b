"""The APScheduler 3 process: a BackgroundScheduler on a SQLAlchemyJobStore that runs the jobs.

``python -m bench.peers.aps_worker URL [--threads N] [--poll S]``; stops on SIGTERM.

APScheduler 3 has no cross-process notification: a scheduler only looks at its job store when it
wakes up for the next job it knows of. Jobs are added by another process (the load generator), so
this process also calls ``scheduler.wakeup()`` every ``--poll`` seconds (default 0.1).
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from datetime import UTC
from types import FrameType

from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
from apscheduler.schedulers.background import BackgroundScheduler

JOB_DEFAULTS = {"misfire_grace_time": None, "coalesce": False, "max_instances": 1}


def make_scheduler(url: str, threads: int = 10) -> BackgroundScheduler:
    """The scheduler both sides configure alike (the generator's one is started paused)."""
    return BackgroundScheduler(
        jobstores={"default": SQLAlchemyJobStore(url=url)},
        executors={"default": ThreadPoolExecutor(max_workers=threads)},
        job_defaults=JOB_DEFAULTS,
        timezone=UTC,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--threads", type=int, default=10)
    parser.add_argument("--poll", type=float, default=0.1)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    stop = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    scheduler = make_scheduler(args.url, args.threads)
    scheduler.start()
    print("aps_worker: started", flush=True)
    try:
        while not stop.wait(args.poll):
            scheduler.wakeup()
    finally:
        scheduler.shutdown(wait=False)


if __name__ == "__main__":
    main()
