"""Ninety seconds of chaos: every promise checked at once under faults of every kind.

Runs `python -m bench.chaos --minutes 1.5 --seed 7` in this process: three clock servers of
two web processes each on a MariaDB of the run's own and a three-node RabbitMQ cluster, both
beside the machine's servers (never touching them), while clients create, reschedule, cancel
and count alarms of AMQP, webhook and pull applications and a nemesis kills, stalls and
restarts things. The checker then judges every alarm from what clients were told and what
consumers received. `-s` prints the schedule and the figures.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.chaos import nemesis
from bench.chaos.checker import MUST_BE_ZERO, check
from bench.chaos.report import readable
from bench.chaos.run import execute

pytestmark = [pytest.mark.fault, pytest.mark.process]

MINUTES, SEED = 1.5, 7  # the schedule of seed 7 has every kind of fault within 90 s


@pytest.mark.timeout(480)  # measured: 170 to 231 s
def test_ninety_seconds_of_chaos_break_no_promise(tmp_path: Path) -> None:
    faults = nemesis.plan(SEED, MINUTES * 60)
    assert {fault.kind for fault in faults} == set(nemesis.KINDS)
    execute(MINUTES, SEED, tmp_path)
    figures = check(tmp_path)
    print("\n" + readable(figures))
    assert figures["fault_errors"] == []
    assert sum(figures["faults"].values()) == len(faults)
    assert figures["accepted"] > 1_000
    assert {name: figures[name] for name in MUST_BE_ZERO} == dict.fromkeys(MUST_BE_ZERO, 0)
