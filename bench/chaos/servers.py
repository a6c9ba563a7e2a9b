"""The clock servers of a chaos run: each one process group, killed, stalled and restarted.

Each server runs this checkout's clock_server (PYTHONSAFEPATH, and the checkout first on
PYTHONPATH; `start` checks which code a server would import). A server keeps its port over
restarts, so clients keep one list of addresses. Every process of a server (the engine and
its web workers) is in the server's own process group, which SIGKILL, SIGSTOP and SIGCONT
reach as a whole, as a container's or a unit's processes are.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import requests

from bench.chaos.ports import free_port

ROOT = Path(__file__).resolve().parents[2]

# Short timings, so that a fault resolves within seconds of the run (the defaults in
# brackets): a silent engine is declared dead after 1.5 s (2 s) and a claim's lease is 4 s
# (30 s); a failed publish is retried 5 times (16), 0.2 s to 1 s apart (1 s to 300 s).
TIMINGS = {
    "CLOCK_PRELOAD_WINDOW_S": "1",
    "CLOCK_PRELOAD_INTERVAL_S": "0.2",
    "CLOCK_LEASE_S": "4",
    "CLOCK_HEARTBEAT_S": "0.25",
    "CLOCK_ENGINE_DEAD_AFTER_S": "1.5",
    "CLOCK_RETRY_BASE_S": "0.2",
    "CLOCK_RETRY_CAP_S": "1",
    "CLOCK_RETRY_MAX": "5",
    "CLOCK_PUBLISH_TIMEOUT_S": "5",
    "CLOCK_SHUTDOWN_TIMEOUT_S": "5",
}
RING_LANES, RING_BATCH = 4, 50  # what one server can have in flight: 200 alarms


class ClockServer:
    """One clock-server (an engine process and its web workers) under a fixed port."""

    def __init__(self, index: int, env: dict[str, str], log_dir: Path) -> None:
        self.index = index
        self.port = free_port()
        self.lives = 0
        self.log_dir = log_dir
        self.env = {**env, "CLOCK_PORT": str(self.port), "CLOCK_HOST": "127.0.0.1"}
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 60) -> None:
        """Start a new life (a new instance id) and wait until it answers HTTP."""
        self.lives += 1
        name = f"s{self.index}-life{self.lives}"
        metrics = self.log_dir / f"metrics-{name}"
        metrics.mkdir()
        env = {
            **os.environ,
            **self.env,
            "CLOCK_INSTANCE_ID": name,
            "PROMETHEUS_MULTIPROC_DIR": str(metrics),
            "PYTHONSAFEPATH": "1",
            "PYTHONPATH": str(ROOT),
        }
        with (self.log_dir / f"{name}.log").open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "clock_server.runtime.cli"],
                env=env, stdout=log, stderr=log, cwd=self.log_dir, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while not self._answers():
            if self.process.poll() is not None:
                raise RuntimeError(f"clock server {name} exited; see {self.log_dir}/{name}.log")
            if time.monotonic() > deadline:
                raise RuntimeError(f"clock server {name} did not answer within {timeout_s} s")
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL every process of the server."""
        self._signal_group(signal.SIGKILL)
        if self.process is not None:
            self.process.wait(10)

    def stall(self) -> None:
        self._signal_group(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal_group(signal.SIGCONT)

    def stop(self) -> None:
        """End the server however it is: resumed, asked to stop, killed if it does not."""
        if self.process is None:
            return
        self._signal_group(signal.SIGCONT)
        self._signal_group(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(15)
        self._signal_group(signal.SIGKILL)  # web workers left behind, if any
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(10)
        for metrics in self.log_dir.glob(f"metrics-s{self.index}-life*"):
            shutil.rmtree(metrics, ignore_errors=True)

    def _signal_group(self, sig: signal.Signals) -> None:
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, sig)

    def _answers(self) -> bool:
        try:
            requests.get(self.base_url + "/healthz", timeout=1)
        except requests.RequestException:
            return False
        return True


def server_env(database_url: str, amqp_urls: list[str], index: int) -> dict[str, str]:
    """Server `index`'s settings: every node of the cluster, its own node first, so that the
    servers publish to different nodes."""
    nodes = amqp_urls[index % len(amqp_urls) :] + amqp_urls[: index % len(amqp_urls)]
    return {
        "CLOCK_DATABASE_URL": database_url,
        "CLOCK_AMQP_URL": ",".join(nodes),
        "CLOCK_QUEUE_TYPE": "quorum",
        "CLOCK_WEB_PROCESSES": "2",
        "CLOCK_RING_LANES": str(RING_LANES),
        "CLOCK_RING_BATCH": str(RING_BATCH),
        "CLOCK_DB_POOL_SIZE": "8",
        "CLOCK_WEBHOOK_ALLOW_PRIVATE": "true",
        "CLOCK_LOG_LEVEL": "INFO",
        **TIMINGS,
    }


def code_of(server_env: dict[str, str]) -> Path:
    """Where a server started so would import clock_server from."""
    imported = subprocess.run(
        [sys.executable, "-c", "import clock_server; print(clock_server.__file__)"],
        env={**os.environ, **server_env, "PYTHONSAFEPATH": "1", "PYTHONPATH": str(ROOT)},
        capture_output=True, text=True, check=True, cwd="/",
    ).stdout.strip()  # fmt: skip
    return Path(imported).resolve().parent.parent
