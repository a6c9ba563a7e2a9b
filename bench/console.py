"""The console at scale: each API call the console's pages make, timed against a table of
10,000,000 alarms.

    python -m bench.console                          # 10,000,000 rows, each call 7 times
    python -m bench.console --rows 1000000 --repeat 5

A fresh MariaDB database is filled by SQL (INSERT ... SELECT from MariaDB's seq db,
100,000 rows per statement) with alarms of ten applications: 70 % rung over the last 30
days, 20 % pending over the next 30 days (1 % due in 5 to 15 minutes), 4 % cancelled, 3 %
expired, 2 % dead, 1 % rung within the last 5 minutes. Once MariaDB has written back what
the fill left dirty, clock-server starts (engine included) and each call is made `repeat`
times after one warm-up: the overview, the applications, search pages by each filter and
the next page, an alarm and its history, and the page itself. Reported: median and max in
ms per call, against the target of 500 ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import requests
from sqlalchemy import text

from bench.clockserver import BenchServer
from bench.scenarios import _settle
from clock_server.store import migrate
from clock_server.store.db import open_database

ROOT = Path(__file__).resolve().parent.parent
FILL_STEP = 100_000
DAY_MS = 86_400_000
TARGET_MS = 500.0


class FilledServer(BenchServer):
    """A BenchServer whose database is migrated and filled before the server starts."""

    def __init__(self, workdir: Path, rows: int, **settings: str) -> None:
        super().__init__(workdir, **settings)
        self.rows = rows
        self.prepared: dict[str, float] = {}
        self.now_ms = int(time.time() * 1000)

    def __enter__(self) -> FilledServer:
        with self._admin.connect() as conn:
            conn.execute(text(f"CREATE DATABASE `{self.database}` CHARACTER SET utf8mb4"))
        db = open_database(self.database_url, pool_size=2)
        migrate.upgrade(db)
        db.dispose()
        self.prepared = fill(self, self.rows)
        self.start()
        return self


def fill(server: FilledServer, rows: int) -> dict[str, float]:
    """`rows` alarms as the module says, then the write-back waited out."""
    started = time.monotonic()
    now = server.now_ms
    for first in range(0, rows, FILL_STEP):
        count = min(FILL_STEP, rows - first)
        # b = seq % 100 picks the status band; h spreads times over 30 days.
        server.execute(
            "INSERT INTO clock (application, business_id, payload, target_ring_at,"
            " next_try_time, retry_times, status, rung_at, version, claimed_by, create_time,"
            " update_time, created_by)"
            " SELECT application, business_id, REPEAT('x', 100),"
            "  IF(status = 'rung', next_try_time - (seq DIV 100) % 50, next_try_time), next_try_time, 0,"
            "  status, IF(status = 'rung', next_try_time, 0), 1, 0,"
            f"  {now - 31 * DAY_MS}, next_try_time, 'admin'"
            " FROM (SELECT seq, CONCAT('app-', seq % 10) AS application,"
            "  CONCAT('order-', seq) AS business_id,"
            "  CASE WHEN seq % 100 < 71 THEN 'rung' WHEN seq % 100 < 91 THEN 'pending'"
            "   WHEN seq % 100 < 95 THEN 'cancelled' WHEN seq % 100 < 98 THEN 'expired'"
            "   ELSE 'dead' END AS status,"
            f"  CASE WHEN seq % 100 = 70 THEN {now} - seq % 300000"
            f"   WHEN seq % 100 = 71 THEN {now} + 300000 + seq % 600000"
            f"   WHEN seq % 100 < 71 THEN {now} - 300000 - (seq * 7919) % {30 * DAY_MS}"
            f"   WHEN seq % 100 < 91 THEN {now} + 3600000 + (seq * 7919) % {30 * DAY_MS}"
            f"   ELSE {now} - (seq * 7919) % {30 * DAY_MS} END AS next_try_time"
            f" FROM seq_{first + 1}_to_{first + count}) AS made"
        )
        if (first // FILL_STEP) % 10 == 9:
            print(f"[console] filled {first + count:,} rows", flush=True)
    fill_s = time.monotonic() - started
    return {"rows": rows, "fill_s": fill_s, "settle_s": _settle(server)}


def calls(server: FilledServer) -> dict[str, str]:
    """What the console's pages ask, by what the page shows."""
    now = int(time.time() * 1000)
    seq = min(123_453, server.rows)
    seq -= (seq - 3) % 10  # an alarm of app-3 (seq % 10 == 3) that the fill made
    key = f"order-{seq}"
    dead_page = requests.get(server.base_url + "/v1/alarms?status=dead&limit=50", timeout=60).json()
    return {
        "overview page: GET /v1/overview": "/v1/overview",
        "applications page: GET /v1/applications?counts=false": "/v1/applications?counts=false",
        "exact counts: GET /v1/applications (the API, not the console)": "/v1/applications",
        "search, no filter": "/v1/alarms?limit=50",
        "search, application": "/v1/alarms?application=app-3&limit=50",
        "search, status dead": "/v1/alarms?status=dead&limit=50",
        "search, status dead, next page": f"/v1/alarms?status=dead&limit=50&cursor={dead_page['next_cursor']}",
        "search, application + status dead": "/v1/alarms?application=app-3&status=dead&limit=50",
        "search, application + business_id prefix": f"/v1/alarms?application=app-3&business_id_prefix={key[:-1]}&limit=50",
        "search, application + due range": f"/v1/alarms?application=app-3&due_from={now + 3_600_000}&due_to={now + 7_200_000}&limit=50",
        "search, pending due within 15 min": f"/v1/alarms?status=pending&due_from={now}&due_to={now + 900_000}&limit=50",
        "search, exact business_id": f"/v1/alarms/app-3/{key}",
        "alarm detail: history": f"/v1/alarms/app-3/{key}/events",
        "the page: GET /console": "/console",
    }


def time_calls(server: FilledServer, repeat: int) -> dict[str, dict[str, Any]]:
    session = requests.Session()
    timed: dict[str, dict[str, Any]] = {}
    for name, path in calls(server).items():
        url = server.base_url + path
        status = session.get(url, timeout=120).status_code  # warm-up
        samples = []
        for _ in range(repeat):
            started = time.perf_counter()
            session.get(url, timeout=120).raise_for_status()
            samples.append((time.perf_counter() - started) * 1000)
        timed[name] = {
            "path": path,
            "status": status,
            "median_ms": statistics.median(samples),
            "max_ms": max(samples),
            "samples_ms": samples,
        }
        print(
            f"[console] {name}: median {statistics.median(samples):,.1f} ms, "
            f"max {max(samples):,.1f} ms",
            flush=True,
        )
    return timed


def measure(rows: int, repeat: int) -> dict[str, Any]:
    """A table of `rows` alarms, and each call of the console's pages timed `repeat` times."""
    with tempfile.TemporaryDirectory() as workdir, FilledServer(Path(workdir), rows) as server:
        print(f"[console] prepared: {server.prepared}", flush=True)
        timed = time_calls(server, repeat)
        overview = requests.get(server.base_url + "/v1/overview", timeout=60).json()
    over = [name for name, t in timed.items() if t["max_ms"] > TARGET_MS]
    print(f"[console] over {TARGET_MS:.0f} ms at max: {over or 'none'}")
    return {"prepared": server.prepared, "calls": timed, "overview": overview}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    summary = {"args": vars(args), **measure(args.rows, args.repeat)}
    out = ROOT / "bench" / "results" / f"console-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=1, default=str))
    print(f"[console] wrote {out}")


if __name__ == "__main__":
    main()
