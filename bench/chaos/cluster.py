"""A three-node RabbitMQ cluster started beside the machine's own broker, for the fault suite
and the chaos run.

Each node gets its own name, ports, config, data and log directories (owned by the rabbitmq
user), so the main node on 5672 is never touched. stop() ends every node, whatever happened,
and removes the directory.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from bench.chaos.ports import free_port


class RabbitCluster:
    def __init__(self, size: int = 3) -> None:
        tag = uuid.uuid4().hex[:6]
        self.names = [f"clk{tag}n{i}@localhost" for i in range(size)]
        self.ports = [free_port() for _ in range(size)]
        self.directory = Path(tempfile.mkdtemp(prefix="clock-rabbit-", dir="/tmp"))
        # More lines for every node's rabbitmq.conf (a TLS listener, say); the files they name
        # may be put in `directory`, which start() hands to the rabbitmq user.
        self.config = ""

    @property
    def urls(self) -> list[str]:
        return [f"amqp://guest:guest@127.0.0.1:{port}/%2F" for port in self.ports]

    def start(self) -> RabbitCluster:
        self.directory.chmod(0o755)
        subprocess.run(["chown", "-R", "rabbitmq:rabbitmq", str(self.directory)], check=True)
        for name, port in zip(self.names, self.ports, strict=True):
            self._start_node(name, port)
        for name in self.names:
            _await_startup(name, 90)
        for name in self.names[1:]:
            _ctl(name, "stop_app")
            _ctl(name, "join_cluster", self.names[0])
            _ctl(name, "start_app")
        return self

    def stop_node(self, index: int) -> None:
        """Stop one node's broker (the Erlang node stays, as `rabbitmqctl stop_app` leaves it)."""
        _ctl(self.names[index], "stop_app")

    def start_node(self, index: int) -> None:
        """Start a node's broker again after stop_node; it rejoins the cluster."""
        _ctl(self.names[index], "start_app", timeout=120)

    def stop(self) -> None:
        for name in self.names:
            with contextlib.suppress(subprocess.TimeoutExpired):
                subprocess.run(["rabbitmqctl", "-q", "-n", name, "stop"], capture_output=True,
                               timeout=60, check=False)  # fmt: skip
            self._kill_leftover(name)
        shutil.rmtree(self.directory, ignore_errors=True)

    def _kill_leftover(self, name: str) -> None:
        """A node that `rabbitmqctl stop` did not end is killed by the pid it wrote."""
        pid_file = self.directory / name.split("@")[0] / "pid"
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(pid_file.read_text().strip()), signal.SIGKILL)

    def _start_node(self, name: str, port: int) -> None:
        home = self.directory / name.split("@")[0]
        (home / "mnesia").mkdir(parents=True)
        (home / "log").mkdir()
        config = home / "rabbitmq.conf"
        config.write_text(
            f"listeners.tcp.local = 127.0.0.1:{port}\nloopback_users = none\n{self.config}"
        )
        (home / "enabled_plugins").write_text("[].\n")
        subprocess.run(["chown", "-R", "rabbitmq:rabbitmq", str(home)], check=True)
        env = {
            "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
            "RABBITMQ_NODENAME": name,
            "RABBITMQ_DIST_PORT": str(free_port()),
            "RABBITMQ_CONFIG_FILE": str(config),
            "RABBITMQ_MNESIA_BASE": str(home / "mnesia"),
            "RABBITMQ_LOG_BASE": str(home / "log"),
            "RABBITMQ_FEATURE_FLAGS_FILE": str(home / "feature_flags"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(home / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(home / "pid"),
        }
        subprocess.run(["rabbitmq-server", "-detached"], env=env, check=True, timeout=60,
                       capture_output=True)  # fmt: skip


def _ctl(node: str, *args: str, timeout: float = 60) -> None:
    subprocess.run(["rabbitmqctl", "-q", "-n", node, *args], check=True, timeout=timeout,
                   capture_output=True)  # fmt: skip


def _await_startup(node: str, timeout_s: float) -> None:
    """await_startup gives up at once while the node is not yet known to epmd: ask again."""
    deadline = time.monotonic() + timeout_s
    while True:
        done = subprocess.run(["rabbitmqctl", "-q", "-n", node, "await_startup", "--timeout", "10"],
                              capture_output=True, timeout=30, check=False)  # fmt: skip
        if done.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{node} did not start: {done.stderr.decode()[-500:]}")
        time.sleep(0.5)
