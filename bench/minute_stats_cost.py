"""What keeping the per-minute statistics costs the ring path, part by part, in one process.

    python -m bench.minute_stats_cost                  # SQLite in a temporary folder
    python -m bench.minute_stats_cost --mariadb        # a scratch database on MariaDB

Two parts, each timed with the process's CPU clock:
- counting: for a ring batch of n alarms of one application, what `Outcomes.record` adds for
  the statistics (a tally per application, a lateness appended per alarm) and the one
  `MinuteTally.rang` call, per alarm;
- writing: one `SqlMinuteStats.add` of the (minute, application) entries a process gathers in
  its flush interval, spread over the alarms rung in it at --rate.
The engine CPU per alarm these are compared with is bench.ab's steady figure.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy import create_engine, text

from clock_server.minute_stats import MINUTE_MS, MinuteCounts, MinuteTally, RingTally
from clock_server.store.alarms import AlarmStore
from clock_server.store.db import open_database
from clock_server.store.migrate import upgrade_at_start
from clock_server.store.minute_stats import SqlMinuteStats

MARIADB = "mysql+pymysql://root@127.0.0.1:3306"
FLUSH_S = 5


def counting_us_per_alarm(batch: int, rounds: int) -> float:
    """CPU per alarm of the statistics' share of recording a batch of `batch` alarms."""
    tally = MinuteTally()
    now_ms = 1_800_000_000_000
    started = time.process_time()
    for round_ in range(rounds):
        tallies: dict[str, RingTally] = {}
        for late_ms in range(batch):
            one = tallies.get("orders")
            if one is None:
                one = tallies["orders"] = RingTally()
            one.rung += 1
            one.lateness_ms.append(late_ms % 7)
        tally.rang(now_ms, tallies)
        if round_ % 1_000 == 0:  # as the writer takes it every few seconds
            tally.take()
    return (time.process_time() - started) * 1e6 / (rounds * batch)


@contextlib.contextmanager
def scratch_store(mariadb: bool) -> Iterator[AlarmStore]:
    if not mariadb:
        with tempfile.TemporaryDirectory() as folder:
            store = AlarmStore(open_database(f"sqlite:///{Path(folder) / 'clock.db'}", 5))
            upgrade_at_start(store.db)
            yield store
            store.close()
        return
    name = f"clock_bench_stats_{uuid.uuid4().hex[:8]}"
    admin = create_engine(MARIADB, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4"))
    try:
        store = AlarmStore(open_database(f"{MARIADB}/{name}", 5))
        upgrade_at_start(store.db)
        yield store
        store.close()
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE `{name}`"))
        admin.dispose()


def writing_us_per_alarm(store: AlarmStore, applications: int, rate: float, rounds: int) -> float:
    """CPU per alarm rung at `rate` of one flush of `applications` entries every FLUSH_S."""
    sink = SqlMinuteStats(store)
    started = time.process_time()
    for round_ in range(rounds):
        minute = 1_800_000_000_000 + round_ * MINUTE_MS
        counts = {}
        for index in range(applications):
            one = MinuteCounts(rung=int(rate * FLUSH_S / applications))
            one.lateness[1] = one.rung
            counts[(minute, f"app{index}")] = one
        sink.add(counts)
    return (time.process_time() - started) * 1e6 / (rounds * rate * FLUSH_S)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mariadb", action="store_true")
    parser.add_argument("--rate", type=float, default=1_000)
    args = parser.parse_args()
    for batch in (1, 10, 100, 1_000):
        rounds = max(200_000 // batch, 200)
        print(f"counting, batches of {batch}: {counting_us_per_alarm(batch, rounds):.3f} µs/alarm")
    with scratch_store(args.mariadb) as store:
        for applications in (1, 10):
            cost = writing_us_per_alarm(store, applications, args.rate, 200)
            print(
                f"writing, {applications} applications at {args.rate:,.0f}/s: {cost:.3f} µs/alarm"
            )


if __name__ == "__main__":
    main()
