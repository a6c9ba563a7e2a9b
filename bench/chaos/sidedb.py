"""A MariaDB server of the run's own: its datadir, port and socket under one directory in /tmp.

The machine's own MariaDB is never touched. `stop()` ends the server and removes the
directory, whatever state the run left it in; `restart()` is the nemesis's fault.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from bench.chaos.ports import free_port

DATABASE = "clock_chaos"


class SideMariaDB:
    """`mariadbd --no-defaults` on 127.0.0.1:<free port>, root without a password over TCP.
    `options`, set before `start()`, are more of mariadbd's (its TLS files, say, which may
    go in `directory`)."""

    def __init__(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="clock-chaos-db-", dir="/tmp"))
        self.port = free_port()
        self.options: list[str] = []
        self.prefix: list[str] = []  # before mariadbd's command: `taskset -c 1`, say
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def socket(self) -> Path:
        return self.directory / "mysqld.sock"

    @property
    def url(self) -> str:
        return f"mysql+pymysql://root@127.0.0.1:{self.port}/{DATABASE}"

    def start(self) -> SideMariaDB:
        """Make the datadir on the first start, then start the server and wait for it."""
        datadir = self.directory / "data"
        if not datadir.exists():
            shutil.chown(self.directory, "mysql", "mysql")
            subprocess.run(
                ["mariadb-install-db", "--no-defaults", f"--datadir={datadir}", "--user=mysql",
                 "--auth-root-authentication-method=normal", "--skip-test-db"],
                check=True, capture_output=True, timeout=120,
            )  # fmt: skip
            self._launch()
            self._sql(
                "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';"
                "GRANT ALL ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;"
                f"CREATE DATABASE {DATABASE} CHARACTER SET utf8mb4 COLLATE utf8mb4_bin;"
            )
        else:
            self._launch()
        return self

    def restart(self, down_s: float = 0.0) -> None:
        """A clean shutdown, as an operator's restart would do, `down_s` down, then a start."""
        self._shutdown()
        time.sleep(down_s)
        self._launch()

    def stop(self) -> None:
        """End the server however it is, and remove its directory."""
        with contextlib.suppress(Exception):
            self._shutdown()
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        shutil.rmtree(self.directory, ignore_errors=True)

    def _launch(self) -> None:
        log = (self.directory / "mariadbd.log").open("ab")
        self.process = subprocess.Popen(
            [*self.prefix, "mariadbd", "--no-defaults", f"--datadir={self.directory / 'data'}",
             f"--port={self.port}", "--bind-address=127.0.0.1", f"--socket={self.socket}",
             f"--pid-file={self.directory / 'mariadbd.pid'}", "--user=mysql",
             "--innodb-buffer-pool-size=128M", "--max-connections=500",
             "--innodb-flush-log-at-trx-commit=2", "--skip-log-bin", *self.options],
            stdout=log, stderr=log,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + 60
        while not self._answers():
            if self.process.poll() is not None:
                raise RuntimeError(f"mariadbd exited; see {self.directory / 'mariadbd.log'}")
            if time.monotonic() > deadline:
                raise RuntimeError("the side MariaDB did not start within 60 s")
            time.sleep(0.1)

    def _shutdown(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)  # mariadbd shuts down cleanly on SIGTERM
        try:
            self.process.wait(60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)

    def _answers(self) -> bool:
        return self._sql("SELECT 1", check=False) == 0

    def _sql(self, statements: str, check: bool = True) -> int:
        done = subprocess.run(
            ["mariadb", "--no-defaults", "-uroot", f"--socket={self.socket}", "-e", statements],
            capture_output=True, timeout=30, check=False,
        )  # fmt: skip
        if check and done.returncode != 0:
            raise RuntimeError(f"the side MariaDB refused {statements!r}: {done.stderr!r}")
        return done.returncode
