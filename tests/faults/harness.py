"""Break things for real: stop MariaDB and RabbitMQ, load the API, judge every alarm by id.

The services are stopped and started with the machine's own commands; every outage is a
context manager that brings its service back even when the test inside it fails, so one
failing case cannot take the rest of the suite down with it.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
import requests

from clock_server.settings import Settings
from tests.support import Delivery, ServerProcess, eventually

# Every fault case runs real servers against the real MariaDB and RabbitMQ.
FAULT_MARKS = [
    pytest.mark.fault,
    pytest.mark.process,
    pytest.mark.mariadb,
    pytest.mark.rabbitmq,
    pytest.mark.timeout(180),
]


def default_timing() -> dict[str, str]:
    """The settings of a server whose lease, window, interval and heartbeat are the defaults
    (tests.support.Cluster.server shortens them otherwise)."""
    names = ("lease_s", "preload_window_s", "preload_interval_s", "heartbeat_s")
    return {
        f"CLOCK_{name.upper()}": str(getattr(Settings(), name))
        for name in (*names, "engine_dead_after_s")
    }


def _succeeds(*command: str) -> bool:
    return subprocess.run(command, capture_output=True, timeout=30).returncode == 0


START_MARIADB = [
    "start-stop-daemon",
    "--start",
    "--oknodo",
    "--background",
    "--exec",
    "/usr/sbin/mariadbd",
]


class Service:
    """A server of the machine that a case stops and starts again."""

    def stop(self) -> None:
        raise NotImplementedError

    def start(self) -> None:
        raise NotImplementedError

    @contextmanager
    def down(self) -> Iterator[None]:
        """Stopped for the block, started again however the block ends."""
        self.stop()
        try:
            yield
        finally:
            self.start()


class MariaDB(Service):
    """The machine's MariaDB server, stopped with `mariadb-admin shutdown`."""

    ping = ("mariadb-admin", "-uroot", "-h127.0.0.1", "ping")

    def is_up(self) -> bool:
        return _succeeds(*self.ping)

    def stop(self) -> None:
        subprocess.run(
            ["mariadb-admin", "-uroot", "-h127.0.0.1", "shutdown"], capture_output=True, timeout=60
        )
        # start-stop-daemon would take a server still shutting down for a running one.
        eventually(lambda: not self.is_up() and not self._running(), 60, 0.1, "MariaDB still runs")

    def start(self) -> None:
        if not self.is_up():
            subprocess.run(
                START_MARIADB,
                check=True,
                timeout=30,
            )
        eventually(self.is_up, 60, 0.1, "MariaDB did not start")

    @staticmethod
    def _running() -> bool:
        states = subprocess.run(
            ["ps", "-C", "mariadbd", "-o", "stat="], capture_output=True, text=True
        ).stdout.split()
        return any(not state.startswith("Z") for state in states)


class RabbitMQ(Service):
    """The machine's RabbitMQ node, its application stopped with `rabbitmqctl stop_app`."""

    def is_up(self) -> bool:
        return _succeeds("rabbitmq-diagnostics", "-q", "check_port_connectivity")

    def stop(self) -> None:
        subprocess.run(["rabbitmqctl", "-q", "stop_app"], check=True, capture_output=True)

    def start(self) -> None:
        if not self.is_up():
            subprocess.run(["rabbitmqctl", "-q", "start_app"], check=True, capture_output=True)
            eventually(self.is_up, 60, 0.1, "RabbitMQ did not start")


@dataclass
class Verdict:
    """What happened to each alarm of a case, from the database and every delivery."""

    alarms: int
    statuses: Counter[str]
    delivered: int  # alarms delivered at least once
    duplicates: int  # extra publishes of an alarm (another published_at)
    redeliveries: int  # the same publish delivered again by the broker
    duplicated_ids: list[int]
    early: list[int]
    past_cutoff: list[int]
    undelivered: list[int]  # rung in the database, never seen by the consumer
    unsettled: list[int]  # still pending
    strangers: list[int]  # delivered, but not one of the case's alarms
    first_received: dict[int, int] = field(repr=False, default_factory=dict)
    last_received: dict[int, int] = field(repr=False, default_factory=dict)

    def problems(self, max_duplicates: int) -> list[str]:
        found = []
        for name in ("early", "past_cutoff", "undelivered", "unsettled", "strangers"):
            ids = getattr(self, name)
            if ids:
                found.append(f"{len(ids)} {name}: {sorted(ids)[:10]}")
        if self.duplicates > max_duplicates:
            found.append(f"{self.duplicates} duplicates, more than {max_duplicates}")
        return found

    def assert_sound(self, max_duplicates: int = 0) -> None:
        problems = self.problems(max_duplicates)
        assert not problems, f"{'; '.join(problems)} ({self.summary()})"

    def summary(self) -> str:
        statuses = ", ".join(f"{n} {s}" for s, n in sorted(self.statuses.items()))
        return (
            f"{self.alarms} alarms: {statuses}; {self.delivered} delivered, "
            f"{self.duplicates} duplicate publishes, {self.redeliveries} broker redeliveries"
        )


def judge(ids: Iterable[int], rows: Sequence[Any], deliveries: Sequence[Delivery]) -> Verdict:
    """Every alarm by id: rung and delivered, expired by its cutoff, never early or late past it.

    A delivery is early if it was published or received before its target; past its cutoff
    if it was published after latest_ring_at. Another publish of the same alarm (another
    `published_at`) is a duplicate; the same publish seen twice is the broker redelivering.
    """
    wanted = set(ids)
    by_id = {row.id: row for row in rows if row.id in wanted}
    publishes: dict[int, set[int]] = defaultdict(set)
    seen: Counter[int] = Counter()
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    early: set[int] = set()
    past_cutoff: set[int] = set()
    strangers: set[int] = set()
    for delivery in deliveries:
        alarm_id = delivery.body["id"]
        row = by_id.get(alarm_id)
        if row is None:
            strangers.add(alarm_id)
            continue
        seen[alarm_id] += 1
        published_at = delivery.body["published_at"]
        publishes[alarm_id].add(published_at)
        first[alarm_id] = min(first.get(alarm_id, delivery.received_ms), delivery.received_ms)
        last[alarm_id] = max(last.get(alarm_id, 0), delivery.received_ms)
        if min(published_at, delivery.received_ms) < row.target_ring_at:
            early.add(alarm_id)
        if row.latest_ring_at is not None and published_at > row.latest_ring_at:
            past_cutoff.add(alarm_id)
    undelivered, unsettled = [], []
    for alarm_id in wanted:
        row = by_id.get(alarm_id)
        if row is None or row.status == "pending":
            unsettled.append(alarm_id)
            continue
        if row.status == "rung":
            if alarm_id not in publishes:
                undelivered.append(alarm_id)
            if row.rung_at < row.target_ring_at:
                early.add(alarm_id)
            if row.latest_ring_at is not None and row.rung_at > row.latest_ring_at:
                past_cutoff.add(alarm_id)
    duplicated = sorted(i for i, times in publishes.items() if len(times) > 1)
    extra_publishes = sum(len(times) - 1 for times in publishes.values())
    return Verdict(
        alarms=len(wanted),
        statuses=Counter(row.status for row in by_id.values()),
        delivered=len(publishes),
        duplicates=extra_publishes,
        redeliveries=sum(seen.values()) - sum(len(times) for times in publishes.values()),
        duplicated_ids=duplicated,
        early=sorted(early),
        past_cutoff=sorted(past_cutoff),
        undelivered=sorted(undelivered),
        unsettled=sorted(unsettled),
        strangers=sorted(strangers),
        first_received=first,
        last_received=last,
    )


@dataclass
class Answer:
    business_id: str
    status: int | None  # None: no HTTP answer at all
    body: dict[str, Any] | None
    at_ms: int


class Writer:
    """Clients creating alarms one request at a time, remembering every answer.

    Each alarm is due `delay_ms` after it is sent. Used to prove that a 2xx means stored:
    every alarm acknowledged must later be found and rung, whatever broke meanwhile.
    """

    def __init__(
        self, server: ServerProcess, application: str, clients: int = 4, delay_ms: int = 1_500
    ) -> None:
        self.server = server
        self.application = application
        self.delay_ms = delay_ms
        self.answers: list[Answer] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(n,), daemon=True) for n in range(clients)
        ]

    def __enter__(self) -> Writer:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def _run(self, client: int) -> None:
        session = requests.Session()
        n = 0
        while not self._stop.is_set():
            business_id = f"w{client}-{n}"
            n += 1
            now = int(time.time() * 1000)
            try:
                response = session.post(
                    self.server.base_url + "/v1/alarms",
                    json={
                        "application": self.application,
                        "business_id": business_id,
                        "payload": business_id,
                        "target_ring_at": now + self.delay_ms,
                    },
                    timeout=10,
                )
                answer = Answer(business_id, response.status_code, response.json(), now)
            except (requests.RequestException, ValueError):
                answer = Answer(business_id, None, None, now)
            with self._lock:
                self.answers.append(answer)
            if answer.status == 503:
                self._stop.wait(0.02)  # as a client backing off would; keeps the log readable

    def stored_ids(self) -> list[int]:
        with self._lock:
            return [a.body["id"] for a in self.answers if a.status == 201 and a.body is not None]

    def statuses(self) -> Counter[int | None]:
        with self._lock:
            return Counter(a.status for a in self.answers)

    def refused(self) -> list[Answer]:
        with self._lock:
            return [a for a in self.answers if a.status != 201]
