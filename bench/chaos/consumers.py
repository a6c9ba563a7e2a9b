"""The consumers of a chaos run: AMQP consumers on the RabbitMQ cluster and pull consumers over
HTTP. Each records every message it gets, as it got it, before acking it.

An AMQP consumer reads its application's quorum queue through one node and, when that node
goes away (or anything else breaks its connection), goes on through the next. A pull consumer
leases from one server and moves to the next when that one does not answer; an ack that
fails is tried on the other servers, and one that never succeeds leaves the message to come
back when its lease ends.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import orjson
import pika
import pika.exceptions
import requests

from bench.chaos.records import Recorder, now_ms

EXCHANGE = "clock"
PULL_MAX, PULL_WAIT_S = 10, 2


class _ConsumerThread:
    """A consumer's loop on a thread of its own, `_run` until `stop()`."""

    def __init__(self, name: str) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=name)

    def _run(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)


class AmqpConsumer(_ConsumerThread):
    def __init__(
        self, application: str, node_urls: list[str], first_node: int, recorder: Recorder
    ) -> None:
        super().__init__(f"amqp-{application}")
        self.application = application
        self.nodes = node_urls
        self.node = first_node % len(node_urls)
        self.recorder = recorder
        self.reconnects = 0
        self._ready = threading.Event()

    def start(self) -> AmqpConsumer:
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError(f"the consumer of {self.application} did not connect")
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(pika.exceptions.AMQPError, OSError):
                self._consume(self.nodes[self.node])
            if self._stop.is_set():
                return
            self.reconnects += 1
            self.node = (self.node + 1) % len(self.nodes)
            self._stop.wait(0.2)

    def _consume(self, url: str) -> None:
        parameters = pika.URLParameters(url + "?connection_attempts=1&socket_timeout=3")
        connection = pika.BlockingConnection(parameters)
        try:
            channel = connection.channel()
            channel.exchange_declare(EXCHANGE, "direct", durable=True)
            queue = f"clock.{self.application}"
            channel.queue_declare(queue, durable=True, arguments={"x-queue-type": "quorum"})
            channel.queue_bind(queue, EXCHANGE, routing_key=self.application)
            channel.basic_qos(prefetch_count=100)
            self._ready.set()
            for method, properties, body in channel.consume(queue, inactivity_timeout=0.2):
                if self._stop.is_set():
                    break
                if method is None:
                    continue
                self.recorder.write(
                    {
                        "channel": "amqp",
                        "application": self.application,
                        "received_ms": now_ms(),
                        "message_id": properties.message_id,
                        "redelivered": bool(method.redelivered),
                        "node": self.node,
                        "accepted": True,
                        "message": orjson.loads(body),
                    }
                )
                channel.basic_ack(method.delivery_tag)
        finally:
            if connection.is_open:
                connection.close()


class PullConsumer(_ConsumerThread):
    def __init__(
        self, application: str, base_urls: list[str], first: int, recorder: Recorder
    ) -> None:
        super().__init__(f"pull-{first}")
        self.application = application
        self.base_urls = base_urls
        self.server = first % len(base_urls)
        self.recorder = recorder
        self.failed_acks = 0
        self._session = requests.Session()

    def start(self) -> PullConsumer:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            messages = self._pull()
            if messages is None:
                self.server = (self.server + 1) % len(self.base_urls)
                self._stop.wait(0.2)
                continue
            for item in messages:
                self.recorder.write(
                    {
                        "channel": "pull",
                        "application": self.application,
                        "received_ms": now_ms(),
                        "lease_id": item.get("id"),
                        "leased_until": item.get("leased_until"),
                        "accepted": True,
                        "message": item.get("message"),
                    }
                )
            if messages:
                self._ack([str(item["id"]) for item in messages])

    def _pull(self) -> list[dict[str, Any]] | None:
        """The messages leased, or None when this server gave no answer to use."""
        url = f"{self.base_urls[self.server]}/v1/applications/{self.application}/pull"
        try:
            response = self._session.post(
                url, json={"max": PULL_MAX, "wait_s": PULL_WAIT_S}, timeout=PULL_WAIT_S + 3
            )
        except requests.RequestException:
            return None
        if response.status_code == 429:
            return []
        if response.status_code != 200:
            return None
        return list(response.json()["messages"])

    def _ack(self, ids: list[str]) -> None:
        for step in range(len(self.base_urls) * 2):
            url = self.base_urls[(self.server + step) % len(self.base_urls)]
            try:
                response = self._session.post(
                    f"{url}/v1/applications/{self.application}/ack", json={"ids": ids}, timeout=3
                )
            except requests.RequestException:
                continue
            if response.status_code == 200:
                return
        self.failed_acks += 1
