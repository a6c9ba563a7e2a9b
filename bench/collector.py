"""A RabbitMQ consumer in its own process that records when each alarm arrived."""

from __future__ import annotations

import json
import multiprocessing
import time
from dataclasses import dataclass
from pathlib import Path

import pika

from bench.clockserver import process_cpu_s

AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/%2F"


@dataclass(frozen=True)
class Arrival:
    alarm_id: int
    target_ms: int
    # To the microsecond: at a p99 of a few milliseconds, whole milliseconds would make a
    # difference of one look like 20 or 30 %.
    received_ms: float


def _consume(
    amqp_url: str,
    exchange: str,
    application: str,
    out: str,
    ready,
    stop,  # type: ignore[no-untyped-def]
) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    channel = connection.channel()
    channel.exchange_declare(exchange, "direct", durable=True)
    queue = f"clock.{application}"
    channel.queue_declare(queue, durable=True)
    channel.queue_bind(queue, exchange, routing_key=application)
    channel.basic_qos(prefetch_count=2_000)
    ready.set()
    unacked = last_tag = 0
    with open(out, "w") as sink:
        for method, _props, body in channel.consume(queue, inactivity_timeout=0.05):
            if method is None:
                if unacked:
                    channel.basic_ack(last_tag, multiple=True)
                    unacked = 0
                    sink.flush()
                if stop.is_set():
                    break
                continue
            received_us = time.time_ns() // 1_000
            message = json.loads(body)
            sink.write(f"{message['id']},{message['target_ring_at']},{received_us / 1000:.3f}\n")
            unacked += 1
            last_tag = method.delivery_tag
            if unacked >= 500:
                channel.basic_ack(method.delivery_tag, multiple=True)
                unacked = 0
                sink.flush()
    channel.cancel()
    channel.queue_delete(queue)
    connection.close()


class Collector:
    """Start before the load; stop() returns every arrival, in arrival order."""

    def __init__(self, exchange: str, application: str, workdir: Path, amqp_url: str = AMQP_URL):
        self.path = workdir / f"arrivals-{application}.csv"
        context = multiprocessing.get_context("spawn")
        self._ready = context.Event()
        self._stop = context.Event()
        self._process = context.Process(
            target=_consume,
            args=(amqp_url, exchange, application, str(self.path), self._ready, self._stop),
            daemon=True,
        )

    def start(self) -> Collector:
        self._process.start()
        if not self._ready.wait(20):
            raise RuntimeError("the collector could not connect to RabbitMQ")
        return self

    def cpu_s(self) -> float:
        """CPU time the collector's process has used so far."""
        assert self._process.pid is not None
        return process_cpu_s(self._process.pid)

    def count(self) -> int:
        try:
            with open(self.path) as source:
                return sum(1 for _ in source)
        except FileNotFoundError:
            return 0

    def stop(self) -> list[Arrival]:
        self._stop.set()
        self._process.join(30)
        if self._process.is_alive():
            self._process.kill()
        arrivals = []
        with open(self.path) as source:
            for line in source:
                alarm_id, target, received = line.split(",")
                arrivals.append(Arrival(int(alarm_id), int(target), float(received)))
        return arrivals
