"""The nemesis: one fault at a time, every few seconds, on a schedule computed from the seed
before the run starts, so that the same seed gives the same faults at the same moments.

Kinds are drawn in rounds, each round every kind once in an order the seed shuffles, so that
a short run still has each kind once when time allows. A fault's moment is relative to the
start of the load; if one ends late (a restart that takes long), the next starts at once.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from bench.chaos.records import Recorder, now_ms

KINDS = (
    "kill",  # SIGKILL a server, restart it (a new process, a new instance id)
    "stall",  # SIGSTOP a server, SIGCONT it 5 to 15 s later
    "node",  # stop a RabbitMQ node (stop_app), start it again
    "database",  # restart the side MariaDB
    "webhook_fail",  # the webhook receiver answers 500
    "webhook_hang",  # ... answers nothing until long after clock's timeout
    "webhook_slow",  # ... answers 1 s late, within the timeout
)
DURATION_S = {
    "kill": (0.5, 3.0),  # down before the restart
    "stall": (5.0, 15.0),
    "node": (3.0, 10.0),
    "database": (0.5, 3.0),  # down between the shutdown and the start
    "webhook_fail": (3.0, 8.0),
    "webhook_hang": (3.0, 8.0),
    "webhook_slow": (3.0, 8.0),
}
GAP_S = (2.0, 5.0)  # from the end of one fault to the start of the next
FIRST_AT_S = 5.0


@dataclass(frozen=True)
class Fault:
    at_s: float  # from the start of the load
    kind: str
    target: int  # the server or node; 0 where there is one
    duration_s: float


def plan(
    seed: int, run_s: float, kinds: tuple[str, ...] = KINDS, servers: int = 3, nodes: int = 3
) -> list[Fault]:
    """The faults of a run of `run_s` seconds, of `kinds` only: each one over by `run_s`."""
    rng = random.Random(seed)
    faults: list[Fault] = []
    at_s = FIRST_AT_S
    round_: list[str] = []
    while True:
        if not round_:
            round_ = list(kinds)
            rng.shuffle(round_)
        kind = round_.pop()
        duration = round(rng.uniform(*DURATION_S[kind]), 1)
        target = rng.randrange({"kill": servers, "stall": servers, "node": nodes}.get(kind, 1))
        if at_s + duration > run_s:
            return faults
        faults.append(Fault(round(at_s, 1), kind, target, duration))
        at_s += duration + rng.uniform(*GAP_S)


def describe(faults: list[Fault]) -> str:
    lines = [f"{len(faults)} faults:"]
    for fault in faults:
        lines.append(f"  at {fault.at_s:6.1f} s  {fault.kind:<13} target {fault.target}  "
                     f"for {fault.duration_s:4.1f} s")  # fmt: skip
    return "\n".join(lines)


def as_records(faults: list[Fault]) -> list[dict[str, Any]]:
    return [asdict(fault) for fault in faults]


class Nemesis:
    """Runs the schedule in a thread. `actions[kind]` breaks (target, duration_s) and mends
    it before returning; `heal` mends whatever a fault cut short by a stop left broken."""

    def __init__(
        self,
        faults: list[Fault],
        actions: dict[str, Callable[[int, float], None]],
        recorder: Recorder,
    ) -> None:
        self.faults = faults
        self.actions = actions
        self.recorder = recorder
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="nemesis")

    def start(self, started_at: float) -> Nemesis:
        self._started_at = started_at  # time.monotonic() at the start of the load
        self._thread.start()
        return self

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        for fault in self.faults:
            wait_s = self._started_at + fault.at_s - time.monotonic()
            if self._stop.wait(max(wait_s, 0)):
                return
            began = now_ms()
            try:
                self.actions[fault.kind](fault.target, fault.duration_s)
                error = None
            except Exception as exc:  # recorded, and the run goes on with the next fault
                error = f"{type(exc).__name__}: {exc}"
                self.errors.append(f"{fault}: {error}")
            self.recorder.write({**asdict(fault), "began_ms": began, "ended_ms": now_ms(),
                                 "error": error})  # fmt: skip
