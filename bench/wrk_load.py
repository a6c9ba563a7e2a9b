"""wrk driving POST /v1/alarms with 64 keep-alive connections (scenario 4's single creates)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

SCRIPT = Path(__file__).with_name("wrk") / "create.lua"


class WrkCreate:
    """Runs wrk in the background; result() waits for it and parses its summary."""

    def __init__(
        self,
        base_url: str,
        application: str,
        duration_s: int,
        connections: int = 64,
        threads: int = 1,
        delay_ms: tuple[int, int] = (3_600_000, 3_600_000),
    ) -> None:
        self.command = [
            "wrk", f"-t{threads}", f"-c{connections}", f"-d{duration_s}s", "--timeout", "10s",
            "-s", str(SCRIPT), f"{base_url}/v1/alarms", "--", application,
            str(delay_ms[0]), str(delay_ms[1]),
        ]  # fmt: skip
        self._process: subprocess.Popen[str] | None = None

    def start(self) -> WrkCreate:
        self._process = subprocess.Popen(self.command, stdout=subprocess.PIPE, text=True)
        return self

    def result(self) -> dict:  # type: ignore[type-arg]
        assert self._process is not None
        out, _ = self._process.communicate(timeout=3_600)
        line = next(line for line in out.splitlines() if line.startswith("JSON "))
        figures = json.loads(line[5:])
        seconds = figures["duration_us"] / 1e6
        return {**figures, "requests_per_s": figures["requests"] / seconds,
                "connections": int(self.command[2][2:])}  # fmt: skip
