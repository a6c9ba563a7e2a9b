"""Everything a chaos run stands on, brought up in order and taken down whatever happens: the
side MariaDB, the RabbitMQ cluster, the webhook receiver, three clock servers, the
applications registered with their channels, and the consumers."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from bench.chaos.clients import APPLICATIONS
from bench.chaos.cluster import RabbitCluster
from bench.chaos.consumers import AmqpConsumer, PullConsumer
from bench.chaos.receiver import WebhookReceiver
from bench.chaos.records import RECEIVED, Recorder
from bench.chaos.servers import ClockServer, code_of, server_env
from bench.chaos.sidedb import SideMariaDB

SERVERS = 3
PULLERS = 2
# Webhook and pull alarms may fail while the receiver fails or a server stalls: their
# retry budget (40 retries at most 1 s apart) outlasts every fault of the schedule.
RETRIES = {"retry_max": 40, "retry_base_s": 0.2, "retry_cap_s": 1}
WEBHOOK_TIMEOUT_S, WEBHOOK_IN_FLIGHT = 2, 4
PULL_VISIBILITY_S = 3


@dataclass
class Stage:
    database: SideMariaDB
    cluster: RabbitCluster
    receiver: WebhookReceiver
    servers: list[ClockServer]
    received: Recorder
    consumers: list[AmqpConsumer | PullConsumer] = field(default_factory=list)

    @property
    def base_urls(self) -> list[str]:
        return [server.base_url for server in self.servers]

    def settings(self) -> dict[str, dict[str, Any]]:
        """Each application's settings, as registered."""
        webhook: dict[str, Any] = {
            "channel": "webhook",
            "webhook_url": self.receiver.url,
            "webhook_timeout_s": WEBHOOK_TIMEOUT_S,
            "webhook_max_in_flight": WEBHOOK_IN_FLIGHT,
            **RETRIES,
        }
        pull: dict[str, Any] = {
            "channel": "pull",
            "pull_visibility_s": PULL_VISIBILITY_S,
            **RETRIES,
        }
        by_channel = {"amqp": {"channel": "amqp"}, "webhook": webhook, "pull": pull}
        return {name: by_channel[channel] for name, channel in APPLICATIONS.items()}

    def register(self) -> None:
        for name, settings in self.settings().items():
            url = f"{self.base_urls[0]}/v1/applications/{name}"
            response = requests.put(url, json=settings, timeout=10)
            if response.status_code not in (200, 201):
                raise RuntimeError(f"registering {name}: {response.status_code} {response.text}")
        time.sleep(2.5)  # CLOCK_APPLICATION_REFRESH_S: every process has read them

    def start_consumers(self) -> None:
        amqp = [name for name, channel in APPLICATIONS.items() if channel == "amqp"]
        pull = [name for name, channel in APPLICATIONS.items() if channel == "pull"]
        for n, name in enumerate(amqp):
            consumer = AmqpConsumer(name, self.cluster.urls, n + 1, self.received)
            self.consumers.append(consumer.start())
        for name in pull:
            for n in range(PULLERS):
                puller = PullConsumer(name, self.base_urls, n, self.received)
                self.consumers.append(puller.start())

    def stop_consumers(self) -> None:
        for consumer in self.consumers:
            consumer.stop()


@contextlib.contextmanager
def staged(workdir: Path, log: Path) -> Iterator[Stage]:
    """The stage, up; everything it started is stopped and its directories removed on exit."""
    with contextlib.ExitStack() as stack:
        database = SideMariaDB()
        stack.callback(database.stop)
        cluster = RabbitCluster(size=3)
        stack.callback(cluster.stop)
        received = Recorder(workdir / RECEIVED)
        stack.callback(received.close)
        receiver = WebhookReceiver("chaos-webhook", received)
        say(log, f"side MariaDB on {database.port}; starting it and three RabbitMQ nodes")
        database.start()
        cluster.start()
        receiver.start()
        stack.callback(receiver.stop)
        servers = []
        for index in range(SERVERS):
            env = server_env(database.url, cluster.urls, index)
            if index == 0:
                say(log, f"clock servers run the code at {code_of(env)}")
            server = ClockServer(index, env, workdir)
            stack.callback(server.stop)
            server.start()
            servers.append(server)
        stage = Stage(database, cluster, receiver, servers, received)
        stage.register()
        stage.start_consumers()
        stack.callback(stage.stop_consumers)
        yield stage


def say(log: Path, line: str) -> None:
    stamped = f"{time.strftime('%H:%M:%S')} {line}"
    print(stamped, flush=True)
    with log.open("a") as out:
        out.write(stamped + "\n")
