"""One chaos run: load and faults for the run's length, then a quiet period in which every
fault is mended and everything due has time to ring, then each alarm's final status as its
GET answers. Records go to the work directory; the checker judges them afterwards."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import orjson
import requests

from bench.chaos import nemesis
from bench.chaos.clients import APPLICATIONS, Client
from bench.chaos.consumers import PULL_MAX
from bench.chaos.http import CarefulHttp
from bench.chaos.receiver import MODES
from bench.chaos.records import FAULTS, RUN, TOLD, Recorder, read
from bench.chaos.servers import RING_BATCH, RING_LANES, TIMINGS
from bench.chaos.stage import (
    PULL_VISIBILITY_S,
    PULLERS,
    WEBHOOK_IN_FLIGHT,
    WEBHOOK_TIMEOUT_S,
    Stage,
    say,
    staged,
)

CLIENTS = 4
OVERRUN_MAX_S = 300.0  # the faults' schedule may run late by this much
QUIET_MAX_S = 180.0  # at most this long for everything due to ring once the faults stop
LATE_S = 3.0  # after the last alarm settled, for a late copy to arrive
READERS = 4  # threads reading the final statuses


def execute(
    minutes: float, seed: int, workdir: Path, kinds: tuple[str, ...] = nemesis.KINDS
) -> None:
    """Run the chaos for `minutes` with the faults of `seed` of `kinds` (none: a calm run),
    recording into `workdir`."""
    run_s = minutes * 60
    faults = nemesis.plan(seed, run_s, kinds) if kinds else []
    log = workdir / "run.log"
    say(log, f"seed {seed}, {minutes} min; {nemesis.describe(faults)}")
    with staged(workdir, log) as stage:
        (workdir / RUN).write_bytes(orjson.dumps(_parameters(stage, minutes, seed, faults)))
        told = Recorder(workdir / TOLD)
        fault_log = Recorder(workdir / FAULTS)
        try:
            _load_and_break(stage, seed, faults, run_s, told, fault_log, log)
            _quiet(stage, log)
            _final_reads(stage, workdir, told, log)
        finally:
            told.close()
            fault_log.close()


def _load_and_break(
    stage: Stage,
    seed: int,
    faults: list[nemesis.Fault],
    run_s: float,
    told: Recorder,
    fault_log: Recorder,
    log: Path,
) -> None:
    clients = [Client(n, seed, stage.base_urls, told) for n in range(CLIENTS)]
    the_nemesis = nemesis.Nemesis(faults, _actions(stage), fault_log)
    started = time.monotonic()
    say(log, "load and faults begin")
    for client in clients:
        client.start()
    the_nemesis.start(started)
    try:
        time.sleep(run_s)
        # Each fault's moment is a start at the earliest: restarts that took long can
        # push the last ones past the end, and the load goes on until they are done.
        the_nemesis.join(OVERRUN_MAX_S)
    finally:
        for client in clients:
            client.stop()
        the_nemesis.stop()
        the_nemesis.join(60)  # a fault under way is mended before it returns
        for client in clients:
            client.join()
        _mend(stage)
    say(log, f"load and faults over: {told.count} requests, {fault_log.count} faults; "
             f"nemesis errors {the_nemesis.errors or 'none'}")  # fmt: skip


def _actions(stage: Stage) -> dict[str, Any]:
    def kill(target: int, down_s: float) -> None:
        stage.servers[target].kill()
        time.sleep(down_s)
        stage.servers[target].start()

    def stall(target: int, duration_s: float) -> None:
        stage.servers[target].stall()
        try:
            time.sleep(duration_s)
        finally:
            stage.servers[target].resume()

    def node(target: int, duration_s: float) -> None:
        stage.cluster.stop_node(target)
        try:
            time.sleep(duration_s)
        finally:
            stage.cluster.start_node(target)

    def database(_target: int, down_s: float) -> None:
        stage.database.restart(down_s)

    def receiver(mode: str) -> Any:
        def act(_target: int, duration_s: float) -> None:
            stage.receiver.mode = mode
            try:
                time.sleep(duration_s)
            finally:
                stage.receiver.mode = "ok"

        return act

    actions = {"kill": kill, "stall": stall, "node": node, "database": database}
    return actions | {f"webhook_{mode}": receiver(mode) for mode in MODES if mode != "ok"}


def _mend(stage: Stage) -> None:
    """Whatever a fault cut short left broken is mended: each server running and resumed."""
    stage.receiver.mode = "ok"
    for server in stage.servers:
        server.resume()
        if server.process is None or server.process.poll() is not None:
            server.start()


def _quiet(stage: Stage, log: Path) -> None:
    """Wait until no alarm is pending or delivering (or QUIET_MAX_S), then LATE_S more."""
    started = time.monotonic()
    while time.monotonic() - started < QUIET_MAX_S:
        if not any(_unsettled(stage, name) for name in APPLICATIONS):
            break
        time.sleep(1)
    say(log, f"quiet: settled after {time.monotonic() - started:.0f} s")
    time.sleep(LATE_S)


def _unsettled(stage: Stage, application: str) -> bool:
    for status in ("pending", "delivering"):
        query = f"application={application}&status={status}&limit=1"
        try:
            answer = requests.get(f"{stage.base_urls[0]}/v1/alarms?{query}", timeout=10)
        except requests.RequestException:
            return True
        if answer.status_code != 200 or answer.json()["alarms"]:
            return True
    return False


def _final_reads(stage: Stage, workdir: Path, told: Recorder, log: Path) -> None:
    """Each alarm's GET once, recorded as op "final"."""
    keys = sorted(_keys(read(workdir / TOLD)))
    say(log, f"reading the final status of {len(keys)} alarms")
    shares = [keys[n::READERS] for n in range(READERS)]

    def read_share(n: int) -> None:
        http = CarefulHttp(stage.base_urls, n, told, who=f"reader-{n}")
        for application, business_id in shares[n]:
            http.call("final", "GET", f"/v1/alarms/{application}/{_quoted(business_id)}")

    threads = [threading.Thread(target=read_share, args=(n,)) for n in range(READERS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _keys(records: list[dict[str, Any]]) -> set[tuple[str, str]]:
    keys = set()
    for record in records:
        if record["op"] == "create":
            keys.add((record["request"]["application"], record["request"]["business_id"]))
        elif record["op"] == "batch":
            for item in record["request"]["alarms"]:
                keys.add((item["application"], item["business_id"]))
    return keys


def _quoted(business_id: str) -> str:
    return business_id.replace("/", "%2F")


def _parameters(
    stage: Stage, minutes: float, seed: int, faults: list[nemesis.Fault]
) -> dict[str, Any]:
    return {
        "minutes": minutes,
        "seed": seed,
        "servers": len(stage.servers),
        "nodes": len(stage.cluster.urls),
        "ring_lanes": RING_LANES,
        "ring_batch": RING_BATCH,
        "webhook_timeout_s": WEBHOOK_TIMEOUT_S,
        "webhook_in_flight": WEBHOOK_IN_FLIGHT,
        "pullers": PULLERS,
        "pull_max": PULL_MAX,
        "pull_visibility_s": PULL_VISIBILITY_S,
        "timings": TIMINGS,
        "applications": stage.settings(),
        "schedule": nemesis.as_records(faults),
    }
