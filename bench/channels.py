"""Delivery channels side by side: AMQP, webhook and pull, each on a fresh server.

    python -m bench.channels                       # 20,000 alarms at once; 1,000/s for 20 s
    python -m bench.channels --tiny                # a smoke: 2,000 at once; 200/s for 5 s
    python -m bench.channels --channels webhook,pull --alarms 10000

For each channel, one fresh server (MariaDB, default web processes) in one sitting runs:

1. Throughput: `alarms` alarms all due within the same second, created beforehand through
   the batch API; delivered/s from the first delivery to the last.
2. Steady lateness: alarms due evenly at `rate`/s for `seconds`, created beforehand;
   lateness is the receive time minus the message's target_ring_at.

Received means: amqp, consumed by the Collector; webhook, a POST reached this process's
receiver (a ThreadingHTTPServer on HTTP/1.1 keep-alive answering 204); pull, handed out by a
pull answer to one of 4 puller threads, each looping pull(max=100, wait_s=1) then ack(ids).
Lost and duplicated are counted by alarm id.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import requests

from bench.clockserver import BenchServer
from bench.collector import Collector
from bench.load import MAX_BATCH, bulk_create
from bench.stats import summarize

CHANNELS = ("amqp", "webhook", "pull")
PULLERS = 4
PULL_MAX = 100
PULL_WAIT_S = 1.0
QUIET_S = 2.0  # waited after the last expected arrival, for late duplicates
STALL_S = 15.0  # no arrival for this long once all were due: the rest count as lost
MAX_WAIT_S = 300.0  # the longest waited past the last due time


@dataclass(frozen=True)
class Received:
    alarm_id: int
    target_ms: int
    received_ms: float  # the Collector records to the microsecond


@dataclass
class Sink:
    """What one application's alarms did on arrival, in arrival order; thread-safe."""

    arrivals: list[Received] = field(default_factory=list)
    ids: set[int] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, message: dict[str, Any], received_ms: float) -> None:
        with self.lock:
            self.arrivals.append(
                Received(int(message["id"]), int(message["target_ring_at"]), received_ms)
            )
            self.ids.add(int(message["id"]))

    def unique(self) -> int:
        with self.lock:
            return len(self.ids)


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


# --- webhook: a receiver in this process -----------------------------------------------------


class _HookHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: the server's pool reuses its connections
    sinks: ClassVar[dict[str, Sink]] = {}  # each receiver's subclass has its own

    def do_POST(self) -> None:
        received_ms = _now_ms()
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        message = json.loads(body)
        # The alarm id is the webhook-id header's; a body that says otherwise counts as lost.
        message["id"] = self.headers.get("webhook-id", "-1")
        sink = self.sinks.get(self.path.rsplit("/", 1)[-1])
        if sink is not None:
            sink.add(message, received_ms)
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


class HookReceiver:
    """http://127.0.0.1:PORT/hook/<application> records into the application's Sink."""

    def __init__(self) -> None:
        class Handler(_HookHandler):
            sinks: ClassVar[dict[str, Sink]] = {}

        self._sinks = Handler.sinks
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def url_for(self, application: str) -> str:
        self._sinks[application] = Sink()
        return f"http://127.0.0.1:{self._server.server_address[1]}/hook/{application}"

    def sink(self, application: str) -> Sink:
        return self._sinks[application]

    def __enter__(self) -> HookReceiver:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


# --- pull: puller threads --------------------------------------------------------------------


class Pullers:
    """PULLERS threads, each with its own session, looping pull then ack until stopped."""

    def __init__(self, base_url: str, application: str) -> None:
        self.sink = Sink()
        self.errors: list[str] = []
        self._url = f"{base_url}/v1/applications/{application}"
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._loop, daemon=True) for _ in range(PULLERS)]

    def _loop(self) -> None:
        with requests.Session() as session:
            while not self._stop.is_set():
                try:
                    answer = session.post(
                        f"{self._url}/pull",
                        json={"max": PULL_MAX, "wait_s": PULL_WAIT_S},
                        timeout=30,
                    )
                    received_ms = _now_ms()
                    answer.raise_for_status()
                    messages = answer.json()["messages"]
                    if not messages:
                        continue
                    for leased in messages:
                        body = leased["message"]
                        self.sink.add(
                            json.loads(body) if isinstance(body, str) else body, received_ms
                        )
                    acked = session.post(
                        f"{self._url}/ack", json={"ids": [m["id"] for m in messages]}, timeout=30
                    )
                    acked.raise_for_status()
                    if acked.json()["not_acked"]:
                        self.errors.append(f"not acked: {acked.json()['not_acked'][:5]}")
                except (requests.RequestException, ValueError, KeyError) as error:
                    self.errors.append(repr(error)[:200])
                    time.sleep(0.1)

    def start(self) -> Pullers:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(PULL_WAIT_S + 31)


# --- one channel -----------------------------------------------------------------------------


class Channel:
    """One application's receiving end on `channel`: configure, start, count, stop."""

    def __init__(
        self,
        channel: str,
        server: BenchServer,
        workdir: Path,
        receiver: HookReceiver | None,
        application: str,
    ) -> None:
        self.channel = channel
        self.application = application
        self._collector: Collector | None = None
        self._pullers: Pullers | None = None
        self._sink: Sink | None = None
        settings: dict[str, str] = {"channel": channel}
        if channel == "webhook":
            assert receiver is not None
            settings["webhook_url"] = receiver.url_for(application)
            self._sink = receiver.sink(application)
        answer = requests.put(
            f"{server.base_url}/v1/applications/{application}", json=settings, timeout=30
        )
        answer.raise_for_status()
        if channel == "amqp":
            self._collector = Collector(server.exchange, application, workdir).start()
        elif channel == "pull":
            self._pullers = Pullers(server.base_url, application).start()
            self._sink = self._pullers.sink

    def count(self) -> int:
        """Alarms received so far, by unique id (amqp: lines written, duplicates included)."""
        if self._collector is not None:
            return self._collector.count()
        assert self._sink is not None
        return self._sink.unique()

    def stop(self) -> tuple[list[Received], list[str]]:
        """Every arrival in arrival order, and the pullers' errors."""
        if self._collector is not None:
            arrivals = self._collector.stop()
            return [Received(a.alarm_id, a.target_ms, a.received_ms) for a in arrivals], []
        if self._pullers is not None:
            self._pullers.stop()
            return list(self._pullers.sink.arrivals), self._pullers.errors
        assert self._sink is not None
        with self._sink.lock:
            return list(self._sink.arrivals), []


def _wait_for(channel: Channel, expected: int, due_by_s: float) -> None:
    """Until `expected` arrivals, or nothing new arrived for STALL_S once everything was due
    (the wall clock past `due_by_s`), or MAX_WAIT_S past it; then QUIET_S more."""
    seen, last_news = 0, time.time()
    while (count := channel.count()) < expected and time.time() < due_by_s + MAX_WAIT_S:
        if count > seen:
            seen, last_news = count, time.time()
        elif time.time() > max(due_by_s, last_news) + STALL_S:
            break
        time.sleep(0.2)
    time.sleep(QUIET_S)


def _tally(arrivals: list[Received], created: int) -> dict[str, int]:
    unique = {a.alarm_id for a in arrivals}
    return {
        "created": created,
        "received": len(arrivals),
        "lost": created - len(unique),
        "duplicated": len(arrivals) - len(unique),
    }


def _create_steady(base_url: str, application: str, rate: float, first_ms: int, count: int) -> int:
    """`count` alarms due one every 1/rate s from first_ms, in batches from 4 threads."""
    targets = [int(first_ms + i * 1000 / rate) for i in range(count)]

    def post(start: int) -> int:
        items: list[dict[str, Any]] = [
            {"application": application, "business_id": f"s{start + i}", "payload": "x" * 64,
             "target_ring_at": target}
            for i, target in enumerate(targets[start : start + MAX_BATCH])
        ]  # fmt: skip
        answer = requests.post(f"{base_url}/v1/alarms/batch", json={"alarms": items}, timeout=120)
        answer.raise_for_status()
        return sum(r["status"] == 201 for r in answer.json()["results"])

    with ThreadPoolExecutor(4) as pool:
        return sum(pool.map(post, range(0, count, MAX_BATCH)))


def throughput(
    make: Callable[[str], Channel], base_url: str, alarms: int, lead_s: float
) -> dict[str, Any]:
    """`alarms` alarms due within one second, `lead_s` after now."""
    channel = make(f"tp{uuid.uuid4().hex[:6]}")
    target_ms = _now_ms() + int(lead_s * 1000)
    insert = bulk_create(base_url, channel.application, alarms, target_ms)
    created_by_ms = _now_ms()
    _wait_for(channel, insert["created"], target_ms / 1000 + 1)
    arrivals, errors = channel.stop()
    result: dict[str, Any] = {
        **_tally(arrivals, insert["created"]),
        "created_before_due": created_by_ms < target_ms,
    }
    if len(arrivals) >= 2:
        first = min(a.received_ms for a in arrivals)
        last = max(a.received_ms for a in arrivals)
        result["first_after_due_ms"] = first - target_ms
        result["span_s"] = (last - first) / 1000
        result["delivered_per_s"] = len(arrivals) / max((last - first) / 1000, 0.001)
        result["drain_from_due_s"] = (last - target_ms) / 1000
    if errors:
        result["errors"] = errors[:5]
    return result


def steady(
    make: Callable[[str], Channel], base_url: str, rate: float, seconds: float, lead_s: float
) -> dict[str, Any]:
    """Alarms due evenly at `rate`/s for `seconds`, the first `lead_s` after now."""
    channel = make(f"st{uuid.uuid4().hex[:6]}")
    count = int(rate * seconds)
    first_ms = _now_ms() + int(lead_s * 1000)
    created = _create_steady(base_url, channel.application, rate, first_ms, count)
    created_by_ms = _now_ms()
    _wait_for(channel, created, first_ms / 1000 + seconds)
    arrivals, errors = channel.stop()
    result: dict[str, Any] = {
        **_tally(arrivals, created),
        "created_before_due": created_by_ms < first_ms,
        "lateness_ms": summarize([a.received_ms - a.target_ms for a in arrivals]),
    }
    if errors:
        result["errors"] = errors[:5]
    return result


def run_channel(workdir: Path, channel: str, sizes: dict[str, float]) -> dict[str, Any]:
    settings = {"webhook_allow_private": "true"} if channel == "webhook" else {}
    with HookReceiver() as receiver, BenchServer(workdir, **settings) as server:

        def make(application: str) -> Channel:
            return Channel(channel, server, workdir, receiver, application)

        alarms = int(sizes["alarms"])
        result = {
            "channel": channel,
            "throughput": throughput(make, server.base_url, alarms, 8 + alarms / 3_000),
        }
        print(f"[channels] {channel} throughput: {json.dumps(result['throughput'])}", flush=True)
        steady_count = sizes["rate"] * sizes["seconds"]
        result["steady"] = steady(
            make, server.base_url, sizes["rate"], sizes["seconds"], 8 + steady_count / 3_000
        )
        print(f"[channels] {channel} steady: {json.dumps(result['steady'])}", flush=True)
    return result


def table(results: list[dict[str, Any]], sizes: dict[str, float]) -> str:
    rate, seconds = int(sizes["rate"]), int(sizes["seconds"])
    lines = [
        f"| channel | {int(sizes['alarms']):,} at once: delivered/s | steady {rate:,}/s "
        f"for {seconds} s: p50 / p99 / max late (ms) | lost / duplicated (burst; steady) |",
        "| --- | --- | --- | --- |",
    ]
    for r in results:
        tp, st = r["throughput"], r["steady"]
        late = st["lateness_ms"]
        lines.append(
            f"| {r['channel']} | {tp.get('delivered_per_s', float('nan')):,.0f} | "
            f"{late['p50']:.0f} / {late['p99']:.0f} / {late['max']:.0f} | "
            f"{tp['lost']} / {tp['duplicated']}; {st['lost']} / {st['duplicated']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--alarms", type=int, default=20_000, help="throughput: alarms at once")
    parser.add_argument("--rate", type=float, default=1_000, help="steady: alarms due a second")
    parser.add_argument("--seconds", type=float, default=20, help="steady: for how long")
    parser.add_argument("--channels", default=",".join(CHANNELS))
    parser.add_argument("--tiny", action="store_true", help="2,000 at once; 200/s for 5 s")
    args = parser.parse_args()
    sizes = {"alarms": args.alarms, "rate": args.rate, "seconds": args.seconds}
    if args.tiny:
        sizes = {"alarms": 2_000, "rate": 200, "seconds": 5}
    chosen = [name for name in args.channels.split(",") if name]
    unknown = set(chosen) - set(CHANNELS)
    if unknown:
        parser.error(f"unknown channels: {sorted(unknown)}; pick from {CHANNELS}")
    results = []
    with tempfile.TemporaryDirectory() as work:
        for channel in chosen:
            started = time.monotonic()
            results.append(run_channel(Path(work), channel, sizes))
            print(f"[channels] {channel} took {time.monotonic() - started:.0f} s", flush=True)
    print(json.dumps({"sizes": sizes, "results": results}, indent=1))
    print(table(results, sizes))


if __name__ == "__main__":
    main()
