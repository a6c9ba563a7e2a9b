"""Retention purge under load: lateness at a steady rate while finished alarms past their
retention are deleted, against the same run on a table without them.

    python -m bench.purge                                # 1,000,000 rows, 1,000/s, 30 s, 2 pairs
    python -m bench.purge --rows 100000 --seconds 10 --pairs 1

Each run gets a fresh MariaDB database. For the purge side, `rows` finished alarms (rung,
cancelled, expired and dead in turn), finished 31 days ago and so past the default 30-day
retention, are inserted by SQL (50,000 rows per INSERT ... SELECT) before clock-server
starts; once MariaDB has written back what the fill left dirty, the server starts with
CLOCK_PURGE_INTERVAL_S=`interval`, so that its first purge run begins `interval` seconds
later, and scenario 1 (alarms created at `rate`/s, each due 1-10 s later) runs at once. The
baseline side is the same without the rows; `--sides baseline,purge,kept` adds a side whose
rows finished 29 days ago, a day short of the retention, so that the purge leaves them: it
tells the rows' presence from their purge. Sides alternate in order from pair to pair.

Reported per side: lateness at the consumer (p50, p99) and at the server (published p99),
lost and early alarms; for the purge side, from the server's clock_alarms_purged counter
read every 0.5 s: the rows deleted per second while the load ran, and the time from the
first deletion until every row was gone.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import requests
from sqlalchemy import text

from bench.clockserver import BenchServer
from bench.scenarios import _settle, _steady_on
from bench.stats import figure
from clock_server.store import migrate
from clock_server.store.db import open_database

ROOT = Path(__file__).resolve().parent.parent
DAY_MS = 86_400_000
FILL_STEP = 50_000
APPLICATION = "purged"
RETENTION_DAYS = 30  # the server's default, CLOCK_RETENTION_DAYS
# What each side has in its table before the load: (finished rows, finished how many days ago).
SIDES = {"baseline": (0, 0.0), "purge": (None, 31.0), "kept": (None, 29.0)}


class PreparedServer(BenchServer):
    """A BenchServer whose database is migrated and filled before the server starts."""

    def __init__(self, workdir: Path, rows: int, age_days: float, **settings: str) -> None:
        super().__init__(workdir, **settings)
        self.rows = rows
        self.age_days = age_days
        self.prepared: dict[str, float] = {}

    def __enter__(self) -> PreparedServer:
        with self._admin.connect() as conn:
            conn.execute(text(f"CREATE DATABASE `{self.database}` CHARACTER SET utf8mb4"))
        db = open_database(self.database_url, pool_size=2)
        migrate.upgrade(db)
        db.dispose()
        if self.rows:
            self.prepared = fill_finished(self, self.rows, self.age_days)
        self.start()
        return self

    def count_left(self) -> int:
        db = open_database(self.database_url, pool_size=1)
        with db.connect() as conn:
            query = text("SELECT COUNT(*) FROM clock WHERE application = :a")
            left = int(conn.execute(query, {"a": APPLICATION}).scalar_one())
        db.dispose()
        return left


def fill_finished(server: BenchServer, rows: int, age_days: float) -> dict[str, float]:
    """`rows` alarms that finished `age_days` ago, a millisecond apart, the four finished
    statuses in turn, inserted by SQL; then the write-back waited out."""
    started = time.monotonic()
    old = int(time.time() * 1000) - int(age_days * DAY_MS) - rows
    for first in range(0, rows, FILL_STEP):
        count = min(FILL_STEP, rows - first)
        server.execute(
            "INSERT INTO clock (application, business_id, payload, target_ring_at,"
            " next_try_time, retry_times, status, rung_at, version, claimed_by, create_time,"
            f" update_time) SELECT '{APPLICATION}', CONCAT('p', seq), REPEAT('x', 64),"
            f" {old} + seq, {old} + seq, 0, ELT(1 + seq % 4, 'rung', 'cancelled', 'expired',"
            f" 'dead'), IF(seq % 4 = 0, {old} + seq, 0), 1, 0, {old}, {old} + seq"
            f" FROM seq_{first + 1}_to_{first + count}"
        )
    fill_s = time.monotonic() - started
    return {"finished_rows": rows, "fill_s": fill_s, "settle_s": _settle(server)}


class PurgeSampler:
    """Reads the server's clock_alarms_purged counter from /metrics every `every_s`, in a
    thread: (monotonic time, alarms purged so far) pairs."""

    def __init__(self, base_url: str, every_s: float = 0.5) -> None:
        self.base_url = base_url
        self.every_s = every_s
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._started = time.monotonic()

    def start(self) -> PurgeSampler:
        self._started = time.monotonic()
        self._thread.start()
        return self

    def stop(self) -> list[tuple[float, float]]:
        """Stop sampling, after one last sample."""
        self._stop.set()
        self._thread.join(10)
        with contextlib.suppress(requests.RequestException):
            self.samples.append((time.monotonic() - self._started, self.purged()))
        return self.samples

    def purged(self) -> float:
        text_ = requests.get(self.base_url + "/metrics", timeout=5).text
        return sum(
            float(line.split()[-1])
            for line in text_.splitlines()
            if line.startswith("clock_alarms_purged_total")
        )

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(requests.RequestException):
                self.samples.append((time.monotonic() - self._started, self.purged()))
            self._stop.wait(self.every_s)


def purged_at(samples: list[tuple[float, float]], at_s: float) -> float:
    """The counter at `at_s`, from the last sample before it."""
    before = [count for t, count in samples if t <= at_s]
    return before[-1] if before else 0.0


def one_run(
    workdir: Path,
    rows: int,
    age_days: float,
    rate: float,
    seconds: float,
    interval_s: float,
    wait_s: float,
    **server_settings: str,
) -> dict[str, Any]:
    settings = {"purge_interval_s": str(interval_s), "web_processes": "2", **server_settings}
    with PreparedServer(workdir, rows, age_days, **settings) as server:
        sampler = PurgeSampler(server.base_url).start()
        steady = _steady_on(server, workdir, rate, seconds)
        result: dict[str, Any] = {"rows": rows, **server.prepared, **steady}
        if rows and age_days > RETENTION_DAYS:
            deadline = time.monotonic() + wait_s
            while sampler.purged() < rows and time.monotonic() < deadline:
                time.sleep(1.0)
            samples = sampler.stop()
            # The load ran from about the sampler's start for `seconds`.
            during = purged_at(samples, seconds) - purged_at(samples, 0.0)
            active = [t for t, count in samples if 0 < count < rows]
            done = [t for t, count in samples if count >= rows]
            started_s = active[0] if active else None
            result["purged_during_load"] = during
            result["purge_rows_per_s_during_load"] = during / seconds
            result["purge_started_s"] = started_s
            result["purge_all_s"] = done[0] - started_s if done and started_s else None
            result["purge_rows_per_s_overall"] = (
                rows / result["purge_all_s"] if result["purge_all_s"] else None
            )
            result["left_at_end"] = server.count_left()
        else:
            sampler.stop()
    result.pop("received_sample", None)
    return result


FIGURES = (
    ("received p50 ms", ("received_lateness_ms", "p50")),
    ("received p99 ms", ("received_lateness_ms", "p99")),
    ("received max ms", ("received_lateness_ms", "max")),
    ("published p99 ms", ("published_lateness_ms", "p99")),
    ("lost", ("lost",)),
    ("early", ("early",)),
    ("mariadb µs/alarm", ("mariadb_cpu_us_per_alarm",)),
    ("purge rows/s during the load", ("purge_rows_per_s_during_load",)),
    ("purge rows/s until empty", ("purge_rows_per_s_overall",)),
    ("purge all s", ("purge_all_s",)),
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rate", type=float, default=1_000)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--interval", type=float, default=2.0, help="CLOCK_PURGE_INTERVAL_S")
    parser.add_argument("--batch", type=int, default=1_000, help="CLOCK_PURGE_BATCH")
    parser.add_argument(
        "--sides",
        default="baseline,purge",
        help="of baseline (no finished rows), purge (rows past the retention) and kept (the"
        " same rows a day short of it: there, not purged)",
    )
    parser.add_argument("--wait", type=float, default=600, help="most seconds to purge all")
    args = parser.parse_args()
    sides = [side for side in args.sides.split(",") if side]
    results: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    with tempfile.TemporaryDirectory() as work:
        for pair in range(args.pairs):
            order = sides if pair % 2 == 0 else sides[::-1]
            for side in order:
                rows, age_days = SIDES[side]
                result = one_run(
                    Path(work),
                    args.rows if rows is None else rows,
                    age_days,
                    args.rate,
                    args.seconds,
                    args.interval,
                    args.wait,
                    purge_batch=str(args.batch),
                )
                results[side].append(result)
                shown = ", ".join(
                    f"{name} {value:,.1f}"
                    for name, path in FIGURES
                    if (value := figure(result, path)) is not None
                )
                print(f"[purge] pair {pair + 1} {side}: {shown}", flush=True)
    summary: dict[str, Any] = {"args": vars(args), "results": results, "medians": {}}
    for name, path in FIGURES:
        line = []
        for side in sides:
            values = [v for r in results[side] if (v := figure(r, path)) is not None]
            if not values:
                continue
            median = statistics.median(values)
            summary["medians"].setdefault(side, {})[name] = median
            line.append(f"{side} {median:,.1f} {[round(v, 1) for v in values]}")
        if line:
            print(f"[purge] {name}: median {'; '.join(line)}")
    medians = summary["medians"]
    for name in ("received p50 ms", "received p99 ms"):
        if "baseline" not in medians or "purge" not in medians:
            break
        base, purged = medians["baseline"][name], medians["purge"][name]
        ratio = purged / base if base else float("inf")
        within = "yes" if purged <= base * 1.2 else "no"
        print(f"[purge] {name}: with the purge / without = {ratio:.2f} (within 20 %: {within})")
    out = ROOT / "bench" / "results" / f"purge-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=1, default=str))
    print(f"[purge] wrote {out}")


if __name__ == "__main__":
    main()
