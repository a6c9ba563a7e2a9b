"""Shared pieces: the run-time recorder jobs call, its collector, the summary, process helpers.

Collection: each job calls :func:`record`, which takes ``time.time()`` first and then appends one
line ``id,due_ms,ran_ms`` with a single unbuffered ``os.write`` to ``ran-<pid>.csv`` in the
directory named by ``$BENCH_PEERS_OUT`` (opened ``O_APPEND``, so lines from threads never
interleave). That costs a few microseconds per job, after the time stamp is taken, and no network
round trip; :class:`Collector` reads the files back exactly.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

OUT_ENV = "BENCH_PEERS_OUT"
ROOT = Path(__file__).resolve().parents[2]

_fd_lock = threading.Lock()
_fd: tuple[int, int] | None = None  # (pid, fd): reopened after a fork


def _out_fd() -> int:
    global _fd
    pid = os.getpid()
    current = _fd
    if current is not None and current[0] == pid:
        return current[1]
    with _fd_lock:
        if _fd is None or _fd[0] != pid:
            path = Path(os.environ[OUT_ENV]) / f"ran-{pid}.csv"
            _fd = (pid, os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644))
        return _fd[1]


def record(job_id: int, due_ms: float) -> None:
    """The job body for every peer: note when it ran (epoch ms) against its due time."""
    ran_ms = time.time() * 1000.0
    os.write(_out_fd(), f"{job_id},{due_ms:.3f},{ran_ms:.3f}\n".encode())


class Collector:
    """Reads the ``ran-*.csv`` files of one run incrementally: id -> first ran_ms."""

    def __init__(self, out_dir: Path) -> None:
        self.out_dir = out_dir
        self.ran: dict[int, float] = {}
        self.duplicates = 0
        self._offsets: dict[Path, int] = {}
        self._tails: dict[Path, bytes] = {}

    def poll(self) -> int:
        """Read what was appended since the last call; return how many distinct ids ran."""
        for path in sorted(self.out_dir.glob("ran-*.csv")):
            with path.open("rb") as f:
                f.seek(self._offsets.get(path, 0))
                data = self._tails.pop(path, b"") + f.read()
                self._offsets[path] = f.tell()
            complete, _, tail = data.rpartition(b"\n")
            if tail:
                self._tails[path] = tail
            for line in complete.split(b"\n") if complete else ():
                job_id, _due, ran = line.split(b",")
                key = int(job_id)
                if key in self.ran:
                    self.duplicates += 1
                else:
                    self.ran[key] = float(ran)
        return len(self.ran)

    def count_in(self, ids: range) -> int:
        return sum(1 for key in self.ran if key in ids)


def percentile(ordered: list[float], q: float) -> float:
    """Nearest-rank percentile of an already sorted list (q in 0..100)."""
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def summarize(latencies_ms: list[float]) -> dict[str, Any]:
    """count, p50, p99, p999, max, mean (ms, rounded to 0.01) and early (count below zero)."""
    if not latencies_ms:
        return {
            "count": 0,
            "p50": None,
            "p99": None,
            "p999": None,
            "max": None,
            "mean": None,
            "early": 0,
        }
    ordered = sorted(latencies_ms)
    return {
        "count": len(ordered),
        "p50": round(percentile(ordered, 50), 2),
        "p99": round(percentile(ordered, 99), 2),
        "p999": round(percentile(ordered, 99.9), 2),
        "max": round(ordered[-1], 2),
        "mean": round(sum(ordered) / len(ordered), 2),
        "early": sum(1 for x in ordered if x < 0),
    }


def raise_on_sigterm() -> None:
    """Turn SIGTERM (and SIGINT, even where inherited as ignored) into SystemExit in this process,
    so that the runners' ``finally`` blocks stop the workers and drop what they created."""

    def handler(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)


def start_process(
    argv: list[str], out_dir: Path, name: str, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in its own session (so its whole group can be stopped), logging to a file."""
    full_env = {**os.environ, **env, OUT_ENV: str(out_dir), "PYTHONPATH": str(ROOT)}
    with (out_dir / f"{name}.log").open("wb") as log:
        return subprocess.Popen(
            argv,
            cwd=ROOT,
            env=full_env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def stop_process(proc: subprocess.Popen[bytes], grace_s: float = 20.0) -> int | None:
    """SIGTERM the process group started by :func:`start_process`, SIGKILL it after ``grace_s``."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(wait_s)
            if sig == signal.SIGTERM:
                os.killpg(proc.pid, signal.SIGKILL)  # stray children of the group, if any
        except subprocess.TimeoutExpired:
            continue
        except ProcessLookupError:
            pass
        break
    return proc.poll()


def peak_rss_mib(pid: int) -> float:
    """Sum of VmHWM (peak resident set) of ``pid`` and its direct children, in MiB."""
    pids = [pid]
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        pids += [int(c) for c in children]
    except OSError:
        return 0.0
    total_kib = 0
    for p in pids:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total_kib += int(line.split()[1])
        except OSError:
            continue
    return round(total_kib / 1024.0, 1)
