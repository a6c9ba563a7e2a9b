"""The noisy neighbour without clock: how late RabbitMQ and a consumer deliver B's few messages
while A's flood goes through the same broker on the same machine.

    python -m bench.transit_floor                        # 100,000 of A's, B every 10 ms
    python -m bench.transit_floor --flood 50000 --runs 3

A's messages are published as clock's ring lanes publish them (four threads, batches of
1,000 through clock's AmqpPublisher, pipelined confirms, persistent); B's one at a time on a
connection of their own every 10 ms, as an express lane does, each stamped with the moment
it was handed to the publisher. Both are received by the benchmark's collectors, each in its
own process. B's lateness here is the broker's and the consumer's share alone: no database,
no engine. Where its p99 is above the noisy neighbour's target, the machine cannot meet the
target whatever clock does.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pika

from bench.clockserver import AMQP_URL
from bench.collector import Collector
from bench.stats import summarize
from clock_server.broker.amqp_publisher import AmqpPublisher
from clock_server.model import OutgoingMessage

LANES = 4
BATCH = 1_000
QUIET_EVERY_S = 0.010


def _message(alarm_id: int, application: str) -> OutgoingMessage:
    now_ms = int(time.time() * 1000)
    body = json.dumps({"id": alarm_id, "target_ring_at": now_ms, "payload": "x" * 64})
    return OutgoingMessage(str(alarm_id), application, body.encode())


def _publisher(exchange: str, name: str) -> AmqpPublisher:
    publisher = AmqpPublisher(AMQP_URL, exchange=exchange, name=name)
    publisher.start()
    if not publisher.wait_healthy(10.0):
        raise SystemExit(f"cannot connect to {AMQP_URL}")
    return publisher


def run_once(workdir: Path, flood: int) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:6]
    exchange, noisy, quiet = f"floor_{tag}", f"noisy{tag}", f"quiet{tag}"
    collectors = {app: Collector(exchange, app, workdir).start() for app in (noisy, quiet)}
    lanes, express = _publisher(exchange, "floor-lanes"), _publisher(exchange, "floor-express")
    flooding = threading.Event()
    flooding.set()
    unconfirmed: list[str] = []  # a thread's SystemExit would end only that thread

    def lane(first: int) -> None:
        for start in range(first, flood, BATCH * LANES):
            ids = range(start, min(start + BATCH, flood))
            if not all(lanes.publish_batch([_message(i, noisy) for i in ids], 30.0)):
                unconfirmed.append(noisy)

    def quiet_lane() -> None:
        alarm_id = 0
        while flooding.is_set():
            if not all(express.publish_batch([_message(alarm_id, quiet)], 30.0)):
                unconfirmed.append(quiet)
            alarm_id += 1
            time.sleep(QUIET_EVERY_S)

    quiet_thread = threading.Thread(target=quiet_lane)
    quiet_thread.start()
    time.sleep(1.0)  # some of B's before the flood, as in the noisy neighbour
    started = time.time() * 1000
    threads = [threading.Thread(target=lane, args=(i * BATCH,)) for i in range(LANES)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ended = time.time() * 1000
    deadline = time.monotonic() + 60
    while collectors[noisy].count() < flood and time.monotonic() < deadline:
        time.sleep(0.2)
    received_end = time.time() * 1000
    flooding.clear()
    quiet_thread.join()
    lanes.close()
    express.close()
    arrivals = {app: collector.stop() for app, collector in collectors.items()}
    connection = pika.BlockingConnection(pika.URLParameters(AMQP_URL))
    connection.channel().exchange_delete(exchange)
    connection.close()
    if unconfirmed:
        raise SystemExit(f"{len(unconfirmed)} publishes were not confirmed")
    during = [
        a.received_ms - a.target_ms
        for a in arrivals[quiet]
        if started <= a.target_ms <= received_end
    ]
    before = [a.received_ms - a.target_ms for a in arrivals[quiet] if a.target_ms < started]  # fmt: skip
    return {
        "flood": flood,
        "flood_received": len(arrivals[noisy]),
        "flood_publish_rate_per_s": flood / ((ended - started) / 1000),
        "quiet_before_ms": summarize(before),
        "quiet_during_ms": summarize(during),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--flood", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        for run in range(args.runs):
            result = run_once(Path(work), args.flood)
            during = result["quiet_during_ms"]
            print(f"[floor] run {run + 1}: A published {result['flood_publish_rate_per_s']:,.0f}/s; "
                  f"B during the flood p50 {during['p50']} p99 {during['p99']} max {during['max']} ms "
                  f"(before: p99 {result['quiet_before_ms']['p99']} ms)", flush=True)  # fmt: skip
            print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
