"""Persistent publishes/s: AmqpPublisher (pipelined confirms) vs BlockingConnection (one by one).

Run from the repository root: ``python -m bench.publish_rate [--url URL]``. Uses a throwaway
exchange and queue, deleted at the end.
"""

from __future__ import annotations

import argparse
import resource
import time
from uuid import uuid4

import pika

from clock_server.broker.amqp_publisher import AmqpPublisher
from clock_server.model import OutgoingMessage

BODY = b'{"application": "bench", "business_id": "b-1", "payload": {"n": 1}}'


def pipelined_rate(
    url: str,
    exchange: str,
    application: str,
    total: int,
    batch: int,
    queue_prefix: str | None = None,
    body: bytes = BODY,
) -> float:
    """Messages/s through AmqpPublisher with ``total`` messages in batches of ``batch``."""
    prefix = f"{exchange}." if queue_prefix is None else queue_prefix
    publisher = AmqpPublisher(url, exchange=exchange, queue_prefix=prefix)
    publisher.start()
    try:
        if not publisher.wait_healthy(10.0):
            raise SystemExit(f"cannot connect to {url}")
        publisher.publish_batch([OutgoingMessage("warmup", application, body)], 10.0)
        started = time.perf_counter()
        for first in range(0, total, batch):
            messages = [
                OutgoingMessage(f"p-{i}", application, body)
                for i in range(first, min(first + batch, total))
            ]
            if not all(publisher.publish_batch(messages, timeout_s=30.0)):
                raise SystemExit("a pipelined publish was not confirmed")
        return total / (time.perf_counter() - started)
    finally:
        publisher.close()


def one_by_one_rate(url: str, exchange: str, application: str, total: int) -> float:
    """Messages/s through a BlockingConnection in confirm mode, waiting for each ack."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        started = time.perf_counter()
        for i in range(total):
            properties = pika.BasicProperties(
                delivery_mode=2, message_id=f"b-{i}", content_type="application/json"
            )
            channel.basic_publish(exchange, application, BODY, properties, mandatory=True)
        return total / (time.perf_counter() - started)
    finally:
        connection.close()


def cleanup(url: str, exchange: str, queue: str) -> None:
    """Delete the benchmark's queue and exchange."""
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    channel.queue_delete(queue)
    channel.exchange_delete(exchange)
    connection.close()


def main() -> None:
    """Run both measurements and print the rates and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default="amqp://guest:guest@127.0.0.1:5672/%2F")
    parser.add_argument("--pipelined", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--one-by-one", type=int, default=2_000)
    args = parser.parse_args()
    exchange, application = f"clock_bench_{uuid4().hex[:8]}", "bench"
    try:
        before = resource.getrusage(resource.RUSAGE_SELF)
        fast = pipelined_rate(args.url, exchange, application, args.pipelined, args.batch)
        after = resource.getrusage(resource.RUSAGE_SELF)
        slow = one_by_one_rate(args.url, exchange, application, args.one_by_one)
    finally:
        cleanup(args.url, exchange, f"{exchange}.{application}")
    per_message_us = {
        kind: (getattr(after, field) - getattr(before, field)) / args.pipelined * 1e6
        for kind, field in (("user", "ru_utime"), ("system", "ru_stime"))
    }
    print(f"AmqpPublisher, batches of {args.batch}: {fast:,.0f} msgs/s ({args.pipelined:,} msgs)")
    print("  process CPU per message: {user:.1f} us user + {system:.1f} us system".format(
        **per_message_us))  # fmt: skip
    print(f"BlockingConnection, confirm each:   {slow:,.0f} msgs/s ({args.one_by_one:,} msgs)")
    print(f"ratio: {fast / slow:.1f}x")


if __name__ == "__main__":
    main()
