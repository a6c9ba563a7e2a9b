"""clock-server as a benchmark subject: its own database, exchange and log, and its memory use."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pika
import requests
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, text

MARIADB_URL = os.environ.get("CLOCK_BENCH_MARIADB_URL", "mysql+pymysql://root@127.0.0.1:3306")
ROOT = Path(__file__).resolve().parent.parent
AMQP_URL = os.environ.get("CLOCK_BENCH_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def process_cpu_s(pid: int) -> float:
    """CPU time (user + system) process `pid` has used so far, in seconds."""
    return _cpu_of(_stat_fields(pid))


def _stat_fields(pid: int | str) -> list[str]:
    """/proc/<pid>/stat after the command name: [0] is the state, [1] the parent's pid."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def _cpu_of(stat: list[str]) -> float:
    return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")


def children_cpu_s(parent_pid: int, module: str | None = None) -> float:
    """CPU seconds used so far by the live child processes of `parent_pid`; with `module`,
    of those running `python -m module` alone."""
    used = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = _stat_fields(entry.name)
            if int(stat[1]) != parent_pid:
                continue
            if module is not None and module.encode() not in (entry / "cmdline").read_bytes():
                continue
        except OSError:  # the process ended meanwhile
            continue
        used += _cpu_of(stat)
    return used


def services_cpu_s() -> dict[str, float]:
    """CPU seconds used so far by the MariaDB and RabbitMQ servers on this host, by name; a
    server not found here (another host, another name) is left out."""
    names = {"mariadbd": "mariadb", "mysqld": "mariadb", "beam.smp": "rabbitmq"}
    used: dict[str, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            name = names.get((entry / "comm").read_text().strip())
            if name:
                used[name] = used.get(name, 0.0) + process_cpu_s(int(entry.name))
        except OSError:  # the process ended meanwhile
            continue
    return used


class BenchServer:
    """A fresh database plus one clock-server process. Use as a context manager."""

    def __init__(self, workdir: Path, **settings: str) -> None:
        tag = uuid.uuid4().hex[:8]
        self.database = f"bench_clock_{tag}"
        self.database_url = f"{MARIADB_URL}/{self.database}"
        self.exchange = f"bench_{tag}"
        self.port = _free_port()
        self.log_path = workdir / f"server-{tag}.log"
        self.env = {
            **os.environ,
            "CLOCK_DATABASE_URL": self.database_url,
            "CLOCK_AMQP_URL": AMQP_URL,
            "CLOCK_EXCHANGE": self.exchange,
            "CLOCK_PORT": str(self.port),
            "CLOCK_HOST": "127.0.0.1",
            "CLOCK_LOG_LEVEL": "WARNING",
            **{f"CLOCK_{key.upper()}": str(value) for key, value in settings.items()},
        }
        self.process: subprocess.Popen[bytes] | None = None
        self._admin = create_engine(MARIADB_URL, isolation_level="AUTOCOMMIT")

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> BenchServer:
        with self._admin.connect() as conn:
            conn.execute(text(f"CREATE DATABASE `{self.database}` CHARACTER SET utf8mb4"))
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        with self._admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS `{self.database}`"))
        self._admin.dispose()
        connection = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
        connection.channel().exchange_delete(self.exchange)
        connection.close()

    @property
    def code_path(self) -> Path:
        """Where the server imports clock_server from: the first PYTHONPATH entry (bench.ab's
        worktree of the revision under test), else this checkout."""
        first = self.env.get("PYTHONPATH", "").split(os.pathsep)[0]
        return Path(first).resolve() if first else ROOT

    def start(self) -> None:
        code = self.code_path
        # The layout by concern moved the entry point; older revisions keep theirs.
        flat = not (code / "clock_server" / "runtime" / "cli.py").exists()
        module = "clock_server.cli" if flat else "clock_server.runtime.cli"
        # Without PYTHONSAFEPATH `python -m` puts the working directory first on sys.path
        # (in the web processes too), and a harness run from a checkout would start that
        # checkout's code whatever the revision.
        self.env["PYTHONSAFEPATH"] = "1"
        imported = subprocess.run(
            [sys.executable, "-c", "import clock_server; print(clock_server.__file__)"],
            env=self.env, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        if not Path(imported).resolve().is_relative_to(code):
            raise RuntimeError(f"the server would import {imported}, not the code at {code}")
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", module], env=self.env, stdout=log, stderr=log
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"clock-server exited; see {self.log_path}")
            try:
                if requests.get(self.base_url + "/healthz", timeout=1).status_code == 200:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.1)
        raise RuntimeError(f"clock-server did not become healthy; see {self.log_path}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)

    def memory_mb(self) -> dict[str, float]:
        """Resident memory now and at its peak (VmRSS, VmHWM), in MB."""
        assert self.process is not None
        fields = {}
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) / 1024
        return {"rss_mb": fields.get("VmRSS", 0.0), "peak_rss_mb": fields.get("VmHWM", 0.0)}

    def cpu_s(self) -> float:
        """CPU time (user + system) the server process has used so far: in a multi-process
        server, the engine's process, the web workers not included."""
        assert self.process is not None
        return process_cpu_s(self.process.pid)

    def web_cpu_s(self) -> float:
        """CPU time the web worker processes have used so far (none in a one-process server)."""
        assert self.process is not None
        return children_cpu_s(self.process.pid, "clock_server.runtime.web_process")

    def rung_rows(self, application: str) -> list[tuple[int, int, int | None, str]]:
        """(id, target_ring_at, rung_at, status) of every alarm of `application`."""
        engine = create_engine(self.database_url)
        # 0 is "not rung" since migration 0012, NULL before it.
        query = text(
            "SELECT id, target_ring_at, NULLIF(rung_at, 0), status FROM clock WHERE application = :a"
        )
        with engine.connect() as conn:
            rows = conn.execute(query, {"a": application}).all()
        engine.dispose()
        return [tuple(row) for row in rows]  # type: ignore[misc]

    def preload_counters(self) -> dict[str, float]:
        """The engine's readings from the start and the ids it gave up on, by reason, and the
        times it was fenced, from /metrics: what finds an alarm late, or misses it a while."""
        answer = requests.get(f"{self.base_url}/metrics", timeout=10)
        answer.raise_for_status()
        wanted = ("clock_preload_readings_from_start", "clock_preload_ids_given_up",
                  "clock_engine_fenced")  # fmt: skip
        counters: dict[str, float] = {}
        for family in text_string_to_metric_families(answer.text):
            if family.name not in wanted:
                continue
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    reason = sample.labels.get("reason")
                    counters[f"{family.name}:{reason}" if reason else family.name] = sample.value
        return counters

    def dirty_pages(self) -> int:
        """InnoDB's buffer pool pages not yet written back, server-wide."""
        with self._admin.connect() as conn:
            row = conn.execute(text("SHOW GLOBAL STATUS LIKE 'Innodb_buffer_pool_pages_dirty'"))
            return int(row.one()[1])

    def execute(self, sql: str) -> None:
        engine = create_engine(self.database_url)
        with engine.begin() as conn:
            conn.execute(text(sql))
        engine.dispose()
