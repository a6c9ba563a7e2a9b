"""What the run saw, one JSON object a line: what clients were told and what consumers got.

The checker reads these files and nothing else of the run's, so a record holds everything
it needs: times in epoch ms, answers as the server sent them.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import orjson

TOLD = "told.jsonl"  # every HTTP exchange of the clients, final reads included
RECEIVED = "received.jsonl"  # every message a consumer received
FAULTS = "faults.jsonl"  # every fault as the nemesis did it
RUN = "run.json"  # the run's parameters and schedule


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Recorder:
    """Appends records to one file, from any thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._file = path.open("ab")
        self.count = 0

    def write(self, record: dict[str, Any]) -> None:
        line = orjson.dumps(record) + b"\n"
        with self._lock:
            self._file.write(line)
            self._file.flush()  # readable at once, and kept if the run is killed
            self.count += 1

    def close(self) -> None:
        with self._lock:
            self._file.close()


def read(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
