"""The benchmark scenarios. Each returns a JSON-able dict of what it measured."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from bench.clockserver import BenchServer, services_cpu_s
from bench.collector import Collector
from bench.http_alone import http_alone_rate
from bench.load import SteadyLoad, bulk_create
from bench.stats import summarize
from bench.wrk_load import WrkCreate

SETTLE_S = 5.0


def steady(
    workdir: Path,
    rate: float,
    duration_s: float,
    with_api_load: bool = False,
    **server_settings: str,
) -> dict:
    """Scenario 1: alarms created at `rate`/s for `duration_s`, each due 1-10 s later;
    `with_api_load` runs wrk's single creates at full speed meanwhile (scenario 5)."""
    with BenchServer(workdir, **server_settings) as server:
        return _steady_on(server, workdir, rate, duration_s, with_api_load)


def steady_precreated(
    workdir: Path,
    rate: float,
    duration_s: float,
    insert_rate_guess: float = 8_000,
    **server_settings: str,
) -> dict:
    """Scenario 1 at a rate this machine cannot also create at while ringing it: rate x
    duration_s alarms due one every 1/rate s, created beforehand through the batch API, so
    that the ring path alone has to hold the rate. `load` holds the rate the rings reached:
    the alarms over the time from the first one's due time to the last ring."""
    application = f"steady{uuid.uuid4().hex[:6]}"
    count = int(rate * duration_s)
    with BenchServer(workdir, **server_settings) as server:
        collector = Collector(server.exchange, application, workdir).start()
        insert, target_ms, late_insert_ms = _created_beforehand(
            server, application, count, insert_rate_guess, per_alarm_ms=1000 / rate
        )
        cpu_before = cpu_snapshot(server)
        _wait_while_delivering(collector, insert["created"], duration_s + 10 + SETTLE_S)
        time.sleep(1.0)  # late duplicates would arrive here
        cpu_used = cpu_per_alarm_us(cpu_before, cpu_snapshot(server), insert["created"])
        arrivals = collector.stop()
        memory = server.memory_mb()
        rows = server.rung_rows(application)
    rung_at = [rung for _, _, rung, _ in rows if rung is not None]
    ring_span_s = (max(rung_at) - target_ms) / 1000 if rung_at else float("nan")
    return {
        "rate": rate,
        "duration_s": duration_s,
        "precreated": True,
        "insert": insert,
        "inserts_finished_before_target": late_insert_ms < 0,
        "load": {"created": len(rung_at), "elapsed_s": ring_span_s},
        **_delivery_figures(arrivals, rows, insert["created"]),
        **cpu_used,
        **memory,
    }


def _created_beforehand(
    server: BenchServer,
    application: str,
    count: int,
    insert_rate_guess: float,
    per_alarm_ms: float | None = None,
) -> tuple[dict, int, int]:  # type: ignore[type-arg]
    """`count` alarms created through the batch API, the first due 15 s after the inserts
    should have ended; then waits until it is due. Returns what bulk_create answered, the
    first due time, and how late the inserts ended after it (negative: in time)."""
    target_ms = int(time.time() * 1000) + int(count / insert_rate_guess * 1000) + 15_000
    insert = bulk_create(server.base_url, application, count, target_ms, per_alarm_ms=per_alarm_ms)
    late_insert_ms = int(time.time() * 1000) - target_ms
    time.sleep(max(0.0, -late_insert_ms / 1000))
    return insert, target_ms, late_insert_ms


def _wait_while_delivering(collector: Collector, expected: int, at_least_s: float) -> None:
    """Until `expected` alarms arrived: at least `at_least_s`, and then as long as they keep
    arriving, so that a rate the server could not hold shows as lateness, not as alarms lost
    (lost are those still missing after 10 s without one arriving)."""
    started = time.monotonic()
    last_count, last_progress = -1, started
    while (count := collector.count()) < expected:
        now = time.monotonic()
        if count != last_count:
            last_count, last_progress = count, now
        elif now - started > at_least_s and now - last_progress > 10:
            return
        time.sleep(0.2)


def scale(workdir: Path, rows: int, rate: float, duration_s: float, **server_settings: str) -> dict:
    """Scenario 3: scenario 1 on an empty table, then `rows` far-future alarms are added to
    the same table and scenario 1 runs again: the pair is measured minutes apart on one server,
    so that the machine's drift over a sitting does not pass for a cost of the rows."""
    with BenchServer(workdir, **server_settings) as server:
        empty = _steady_on(server, workdir, rate, duration_s)
        prepared = fill_far_future(server, rows)
        full = _steady_on(server, workdir, rate, duration_s)
    return {**full, "prepared": prepared, "empty": empty}


def _steady_on(
    server: BenchServer, workdir: Path, rate: float, duration_s: float, with_api_load: bool = False
) -> dict:
    application = f"steady{uuid.uuid4().hex[:6]}"
    collector = Collector(server.exchange, application, workdir).start()
    wrk = WrkCreate(server.base_url, "wrkmixed", int(duration_s)).start() if with_api_load else None
    cpu_before = cpu_snapshot(server)
    load = SteadyLoad(server.base_url, application, rate, duration_s).start().join()
    api_load = wrk.result() if wrk else None
    deadline = time.monotonic() + 10 + SETTLE_S
    while collector.count() < load["created"] and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)  # late duplicates would arrive here
    cpu_used = cpu_per_alarm_us(cpu_before, cpu_snapshot(server), load["created"])
    arrivals = collector.stop()
    memory = server.memory_mb()
    rows = server.rung_rows(application)
    return {
        "rate": rate,
        "duration_s": duration_s,
        "load": load,
        "api_load": api_load,
        **_delivery_figures(arrivals, rows, load["created"]),
        **cpu_used,
        **memory,
    }


def cpu_snapshot(server: BenchServer, collector: Collector | None = None) -> dict[str, float]:
    """CPU seconds used so far by the engine's process, the MariaDB and RabbitMQ servers (all
    they served meanwhile) and, if given, the collector."""
    used = {"engine": server.cpu_s(), "web": server.web_cpu_s(), **services_cpu_s()}
    if collector is not None:
        used["collector"] = collector.cpu_s()
    return used


def cpu_per_alarm_us(before: dict[str, float], after: dict[str, float], alarms: int,
                      unit: str = "alarm") -> dict:  # fmt: skip
    return {f"{name}_cpu_us_per_{unit}": (used - before.get(name, 0.0)) * 1e6 / max(alarms, 1)
            for name, used in after.items()}  # fmt: skip


def _delivery_figures(arrivals, rows, created: int) -> dict:  # type: ignore[no-untyped-def]
    lateness = [a.received_ms - a.target_ms for a in arrivals]
    received = summarize(lateness)
    step = max(1, len(lateness) // 20_000)
    published = summarize([rung - target for _, target, rung, status in rows if rung is not None])
    rung_at = {alarm_id: rung for alarm_id, _, rung, _ in rows if rung is not None}
    # the broker's and the consumer's share: from the server's publish to the consumer
    transit = summarize([a.received_ms - rung_at[a.alarm_id] for a in arrivals
                         if a.alarm_id in rung_at])  # fmt: skip
    distinct = {a.alarm_id for a in arrivals}
    statuses: dict[str, int] = {}
    for row in rows:
        statuses[row[3]] = statuses.get(row[3], 0) + 1
    # Still due in the table and never received when the run stopped waiting: late beyond
    # the harness's patience, not lost.
    unrung = sum(1 for alarm_id, _, _, status in rows
                 if status == "pending" and alarm_id not in distinct)  # fmt: skip
    return {
        "received_lateness_ms": received,
        "published_lateness_ms": published,
        "transit_ms": transit,
        "delivered": len(distinct),
        "duplicates": len(arrivals) - len(distinct),
        "lost": created - len(distinct) - unrung,
        "unrung_at_end": unrung,
        "early": received["early"] + published["early"],
        "statuses": statuses,
        "received_sample": lateness[::step],
    }


def burst(
    workdir: Path, count: int, insert_rate_guess: float = 8_000, **server_settings: str
) -> dict:
    """Scenario 2: `count` alarms due in the same second, inserted beforehand via the batch API."""
    application = f"burst{uuid.uuid4().hex[:6]}"
    with BenchServer(workdir, **server_settings) as server:
        collector = Collector(server.exchange, application, workdir).start()
        insert, target_ms, late_insert_ms = _created_beforehand(
            server, application, count, insert_rate_guess
        )
        cpu_before = cpu_snapshot(server, collector)  # the drain's, not the inserts' aftermath
        deadline = time.monotonic() + count / 2_000 + 30
        while collector.count() < insert["created"] and time.monotonic() < deadline:
            time.sleep(0.5)
        cpu_used = cpu_per_alarm_us(cpu_before, cpu_snapshot(server, collector), insert["created"])
        arrivals = collector.stop()
        memory = server.memory_mb()
        rows = server.rung_rows(application)
    rung_at = [rung for _, _, rung, _ in rows if rung is not None]
    start_ms = max(target_ms, target_ms + late_insert_ms)  # ringing cannot start before inserts end
    drain_ms = max(rung_at) - target_ms if rung_at else float("nan")
    received_ms = max(a.received_ms for a in arrivals) - target_ms if arrivals else float("nan")
    return {
        "count": count,
        "insert": insert,
        "inserts_finished_before_target": late_insert_ms < 0,
        "ring_drain_s": drain_ms / 1000,
        "ring_rate_per_s": len(rung_at) / (drain_ms / 1000) if rung_at else 0.0,
        "receive_drain_s": received_ms / 1000,
        "first_ring_after_start_ms": min(rung_at) - start_ms if rung_at else None,
        **_delivery_figures(arrivals, rows, insert["created"]),
        **cpu_used,
        **memory,
    }


def fill_far_future(server: BenchServer, rows: int) -> dict:
    """`rows` pending alarms a year away, inserted by SQL, then the write-back waited out."""
    started = time.monotonic()
    far = int(time.time() * 1000) + 365 * 86_400_000
    # Small transactions: one statement inserting a million rows while the engine's claim
    # query runs made a stock MariaDB (128 MiB buffer pool) abort with its buffer pool
    # "occupied by lock heaps".
    step = 50_000
    for first in range(0, rows, step):
        count = min(step, rows - first)
        server.execute(
            "INSERT INTO clock (application, business_id, payload, target_ring_at, "
            "next_try_time, retry_times, status, version, create_time, update_time) "
            f"SELECT 'far', CONCAT('f', seq), REPEAT('x', 64), {far} + seq, {far} + seq, "
            f"0, 'pending', 0, {far}, {far} FROM seq_{first + 1}_to_{first + count}"
        )
    fill_s = time.monotonic() - started
    return {"pending_rows": rows, "fill_s": fill_s, "settle_s": _settle(server)}


def _settle(server: BenchServer, timeout_s: float = 120.0) -> float:
    """Wait until MariaDB has flushed what the fill left dirty; the seconds it took.

    Right after a 10,000,000-row fill the stock server (innodb_io_capacity 200) spends about
    15 s writing dirty pages back: that is the fill's aftermath, not a cost of the pending
    rows, and a steady run started at once would measure it too.
    """
    started = time.monotonic()
    previous = server.dirty_pages()
    while time.monotonic() - started < timeout_s:
        time.sleep(2.0)
        current = server.dirty_pages()
        if current >= previous:  # no longer going down: what is left stays dirty at rest
            break
        previous = current
    return time.monotonic() - started


def create(workdir: Path, duration_s: int, batch_alarms: int, **server_settings: str) -> dict:
    """Scenario 4: single creates with wrk (64 connections), then alarms/s through the batch API;
    first the same wrk against the HTTP stack alone, for the share the web stack takes."""
    http_alone = http_alone_rate(duration_s, int(server_settings.get("web_processes", 2)))
    return {**creates(workdir, duration_s, batch_alarms, **server_settings),
            "http_alone": http_alone}  # fmt: skip


def creates(workdir: Path, duration_s: int, batch_alarms: int, **server_settings: str) -> dict:
    """Single creates with wrk (64 connections), then alarms/s through the batch API."""
    with BenchServer(workdir, **server_settings) as server:
        cpu_before = cpu_snapshot(server)
        single = WrkCreate(server.base_url, "wrkcreate", duration_s).start().result()
        single |= cpu_per_alarm_us(cpu_before, cpu_snapshot(server), single["requests"], "request")
        far = int(time.time() * 1000) + 86_400_000
        batch = bulk_create(server.base_url, f"batch{uuid.uuid4().hex[:6]}", batch_alarms, far)
        memory = server.memory_mb()
    return {"single": single, "batch": batch, **memory}


def clients(workdir: Path, connections: int, duration_s: int, **server_settings: str) -> dict:
    """`connections` concurrent keep-alive clients creating alarms due 1-10 s later as fast as
    they can: server errors, alarms lost, and the lateness the engine kept meanwhile."""
    application = f"clients{uuid.uuid4().hex[:6]}"
    with BenchServer(workdir, **server_settings) as server:
        collector = Collector(server.exchange, application, workdir).start()
        wrk = WrkCreate(server.base_url, application, duration_s, connections=connections,
                        delay_ms=(1_000, 10_000)).start().result()  # fmt: skip
        time.sleep(2.0)  # requests in flight when wrk stopped still finish on the server
        created = len(server.rung_rows(application))  # also those whose answer wrk cut off
        deadline = time.monotonic() + 10 + SETTLE_S
        while collector.count() < created and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1.0)
        arrivals = collector.stop()
        memory = server.memory_mb()
        rows = server.rung_rows(application)
        preload = server.preload_counters()
    return {"connections": connections, "duration_s": duration_s, "api": wrk,
            "stored": len(rows), **_delivery_figures(arrivals, rows, len(rows)), **memory,
            "preload": preload, "late_by_second_due": _late_by_second(rows)}  # fmt: skip


def _late_by_second(rows, late_ms: int = 500) -> dict[int, list[int]]:  # type: ignore[no-untyped-def]
    """Of the alarms rung over `late_ms` late, by the second they were due (from the first
    alarm's): how many, and the most late (ms). A stall makes lateness from 0 up to its
    length over consecutive seconds; an alarm found late by a later reading, a step."""
    targets = [target for _, target, _, _ in rows]
    if not targets:
        return {}
    start = min(targets)
    late: dict[int, list[int]] = {}
    for _, target, rung, _ in rows:
        if rung is not None and rung - target > late_ms:
            count, worst = late.get((target - start) // 1000, [0, 0])
            late[(target - start) // 1000] = [count + 1, max(worst, rung - target)]
    return dict(sorted(late.items()))
