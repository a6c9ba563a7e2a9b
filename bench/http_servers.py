"""WSGI servers side by side: the echo app of `bench.http_alone`, or clock's own API, under the
same wrk load.

Three servers, each with two processes, take turns (round after round) serving `echo_app`
(or with `--app clock`, clock's API as a web worker builds it, on a fresh MariaDB database,
without the engine: single creates stored, nothing rung):
waitress as clock-server serves its API (`bench.http_alone`'s own code path: one process per
SO_REUSEPORT socket, CLOCK_HTTP_THREADS threads), gunicorn's gthread worker (2 workers, 32
threads each) and granian in WSGI mode (2 workers, its default threads). Each gets scenario
4's wrk (64 keep-alive connections, one thread, `bench/wrk/create.lua`) for the same seconds;
the CPU time of the server's processes (the master and its workers) is read from /proc before
and after. Benchmark only: gunicorn and granian are not dependencies of clock-server.

    python -m bench.http_servers [--seconds 10] [--rounds 2] [--app clock]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from sqlalchemy import create_engine, text

from bench.clockserver import MARIADB_URL, process_cpu_s
from bench.http_alone import APP_ENV, _wait_healthy, http_alone_rate, served_app
from bench.wrk_load import WrkCreate
from clock_server.store.migrate import upgrade_url

# the WSGI object gunicorn and granian import (`bench.http_servers:app`)
app = served_app()

BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _tree(root: int) -> list[int]:
    """`root` and the processes under it (a master's workers), from /proc."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat[1])
    found = [root]
    for pid in found:
        found.extend(child for child, parent in parents.items() if parent == pid)
    return found


def _cpu_s(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        with contextlib.suppress(OSError):  # a process that has exited meanwhile
            total += process_cpu_s(pid)
    return total


def _command_rate(command: list[str], duration_s: int) -> dict:  # type: ignore[type-arg]
    """wrk's figures against the server `command` starts (with {port} filled in), and the CPU
    time its processes spent per request."""
    port = _free_port()
    server = subprocess.Popen(
        [part.format(port=port) for part in command],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        base_url = f"http://127.0.0.1:{port}"
        _wait_healthy(base_url, [server])
        pids = _tree(server.pid)
        cpu_before = _cpu_s(pids)
        figures = WrkCreate(base_url, "httpservers", duration_s).start().result()
        cpu_used = _cpu_s(pids) - cpu_before
        return {
            **figures,
            "processes": len(pids),
            "web_cpu_us_per_request": cpu_used * 1e6 / max(figures["requests"], 1),
        }
    finally:
        server.terminate()
        try:
            server.wait(15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(5)


GUNICORN = [
    str(BIN / "gunicorn"), "-k", "gthread", "-w", "2", "--threads", "32",
    "-b", "127.0.0.1:{port}", "--log-level", "warning", "bench.http_servers:app",
]  # fmt: skip
GRANIAN = [
    str(BIN / "granian"), "--interface", "wsgi", "--workers", "2",
    "--host", "127.0.0.1", "--port", "{port}", "--no-access-log", "--log-level", "warning",
    "bench.http_servers:app",
]  # fmt: skip

SERVERS: dict[str, Callable[[int], dict]] = {  # type: ignore[type-arg]
    "waitress": lambda seconds: {**http_alone_rate(seconds, 2), "processes": 2},
    "gunicorn gthread": lambda seconds: _command_rate(GUNICORN, seconds),
    "granian wsgi": lambda seconds: _command_rate(GRANIAN, seconds),
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--app", choices=("echo", "clock"), default="echo")
    args = parser.parse_args()
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    with contextlib.ExitStack() as stack:
        if args.app == "clock":
            os.environ[APP_ENV] = "clock"
            os.environ["CLOCK_DATABASE_URL"] = stack.enter_context(_migrated_database())
        _rounds(args.seconds, args.rounds)


@contextlib.contextmanager
def _migrated_database() -> Iterator[str]:
    """A fresh MariaDB database at the newest schema, dropped afterwards."""
    name = f"bench_http_{uuid.uuid4().hex[:8]}"
    admin = create_engine(MARIADB_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4"))
    try:
        upgrade_url(f"{MARIADB_URL}/{name}")
        yield f"{MARIADB_URL}/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE `{name}`"))
        admin.dispose()


def _rounds(seconds: int, rounds: int) -> None:
    print("| round | server | processes | requests/s | p50 ms | p99 ms | max ms | errors "
          "| server CPU us/request |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for round_no in range(1, rounds + 1):
        names = list(SERVERS)
        if round_no % 2 == 0:  # alternate the order, so that no server always goes first
            names.reverse()
        for name in names:
            f = SERVERS[name](seconds)
            errors = f["errors_status"] + f["errors_connect"] + f["errors_timeout"]
            print(f"| {round_no} | {name} | {f['processes']} | {f['requests_per_s']:,.0f} "
                  f"| {f['p50_ms']:.1f} | {f['p99_ms']:.1f} | {f['max_ms']:.1f} | {errors} "
                  f"| {f['web_cpu_us_per_request']:.0f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
