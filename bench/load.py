"""Load generators that run in their own processes, so they do not share the server's GIL."""

from __future__ import annotations

import multiprocessing
import random
import time
from typing import Any

import requests

from clock_server.settings import Settings

MAX_BATCH = Settings.batch_max_items  # the most the bench's server takes per batch request


def _steady(
    base_url: str,
    application: str,
    rate: float,
    duration_s: float,
    tick_s: float,
    spread_ms: tuple[int, int],
    result,
) -> None:  # type: ignore[no-untyped-def]
    session = requests.Session()
    rng = random.Random(7)
    created = failures = sequence = 0
    total = int(rate * duration_s)
    started = time.monotonic()
    while (now := time.monotonic()) - started < duration_s:
        # Owed: what the rate asks for by the end of this tick. An answer slower than a tick
        # makes the next batch larger, so the offered rate holds instead of sinking to what
        # one connection gets through; the API takes at most MAX_BATCH alarms per request.
        owed = min(total, int(rate * (now - started + tick_s))) - sequence
        now_ms = time.time_ns() // 1_000_000
        items: list[dict[str, Any]] = []
        for _ in range(min(owed, MAX_BATCH)):
            sequence += 1
            items.append({
                "application": application, "business_id": f"s{sequence}", "payload": "x" * 64,
                "target_ring_at": now_ms + rng.randint(*spread_ms),
            })  # fmt: skip
        if items:
            response = session.post(
                f"{base_url}/v1/alarms/batch", json={"alarms": items}, timeout=30
            )
            if response.status_code == 200:
                created += sum(r["status"] == 201 for r in response.json()["results"])
            else:
                failures += len(items)
        time.sleep(tick_s - (time.monotonic() - started) % tick_s)  # to the next tick
    result.put({"created": created, "failed": failures, "elapsed_s": time.monotonic() - started})


class SteadyLoad:
    """Creates alarms at `rate` per second for `duration_s`, each due 1-10 s after creation,
    in small batches every `tick_s` (at 1,000/s: 20 alarms every 20 ms)."""

    def __init__(
        self,
        base_url: str,
        application: str,
        rate: float,
        duration_s: float,
        tick_s: float = 0.02,
        spread_ms: tuple[int, int] = (1_000, 10_000),
    ) -> None:
        context = multiprocessing.get_context("spawn")
        self._result = context.Queue()
        self._process = context.Process(
            target=_steady,
            args=(base_url, application, rate, duration_s, tick_s, spread_ms, self._result),
            daemon=True,
        )

    def start(self) -> SteadyLoad:
        self._process.start()
        return self

    def join(self) -> dict:  # type: ignore[type-arg]
        result = self._result.get(timeout=3_600)
        self._process.join(30)
        return result  # type: ignore[no-any-return]


def _bulk(
    base_url: str,
    application: str,
    first: int,
    last: int,
    target_ms: int,
    batch: int,
    result,
    per_alarm_ms: float | None = None,
) -> None:  # type: ignore[no-untyped-def]
    session = requests.Session()
    created = failed = 0
    for start in range(first, last, batch):
        items: list[dict[str, Any]] = [
            {"application": application, "business_id": f"u{i}", "payload": "x" * 64,
             "target_ring_at": target_ms + (i % 1_000 if per_alarm_ms is None
                                            else int(i * per_alarm_ms))}
            for i in range(start, min(start + batch, last))
        ]  # fmt: skip
        response = session.post(f"{base_url}/v1/alarms/batch", json={"alarms": items}, timeout=120)
        if response.status_code == 200:
            created += sum(r["status"] == 201 for r in response.json()["results"])
        else:
            failed += len(items)
    result.put({"created": created, "failed": failed})


def bulk_create(
    base_url: str,
    application: str,
    count: int,
    target_ms: int,
    processes: int = 4,
    batch: int = 1_000,
    per_alarm_ms: float | None = None,
) -> dict:  # type: ignore[type-arg]
    """Create `count` alarms due within the second starting at `target_ms` (or, with
    `per_alarm_ms`, one every that many ms from `target_ms`), through the batch API from
    `processes` concurrent clients; returns created, failed and alarms per second."""
    context = multiprocessing.get_context("spawn")
    result = context.Queue()
    share = -(-count // processes)
    workers = [
        context.Process(target=_bulk, args=(base_url, application, p * share,
                        min(count, (p + 1) * share), target_ms, batch, result, per_alarm_ms),
                        daemon=True)
        for p in range(processes)
    ]  # fmt: skip
    started = time.monotonic()
    for worker in workers:
        worker.start()
    totals = {"created": 0, "failed": 0}
    for _ in workers:
        for key, value in result.get(timeout=3_600).items():
            totals[key] += value
    elapsed = time.monotonic() - started
    for worker in workers:
        worker.join(30)
    return {**totals, "elapsed_s": elapsed, "alarms_per_s": totals["created"] / elapsed}
