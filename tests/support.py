"""Test helpers that drive real servers: databases, a delivery collector, clock-server processes."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import pika
import requests
from sqlalchemy import create_engine, select, text
from sqlalchemy.pool import NullPool
from waitress import wasyncore
from werkzeug.serving import make_server

from clock_server.metrics import Metrics
from clock_server.store import migrate
from clock_server.store.db import open_database
from clock_server.store.schema import alarm_table, engine_table
from clock_server.testing import InMemoryPublisher, SettableClock

MARIADB_URL = os.environ.get("CLOCK_TEST_MARIADB_URL", "mysql+pymysql://root@127.0.0.1:3306")
AMQP_URL = os.environ.get("CLOCK_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")


T = TypeVar("T")


def unique(prefix: str = "t") -> str:
    return f"{prefix}{uuid.uuid4().hex[:10]}"


def eventually(
    check: Callable[[], T],
    timeout_s: float = 5.0,
    interval_s: float = 0.01,
    message: str | Callable[[], str] = "",
) -> T:
    """Call `check` every `interval_s` until it returns a true value, and return that value. A
    check that raises AssertionError has not come true yet; any other exception ends the wait.
    After `timeout_s` of real time, raise AssertionError with `message` (when a callable,
    called then: it can describe the state at the end) and the last value or failure."""
    deadline = time.monotonic() + timeout_s
    while True:
        failure: AssertionError | None = None
        try:
            value = check()
            if value:
                return value
            last = f"last value {value!r}"
        except AssertionError as exc:
            failure, last = exc, f"last failure: {exc}"
        if time.monotonic() >= deadline:
            what = message() if callable(message) else message
            raise AssertionError(f"{what or 'not true'} within {timeout_s} s ({last})") from failure
        time.sleep(interval_s)


def metric_value(metrics: Metrics, name: str, labels: dict[str, str] | None = None) -> float:
    """The value of the sample `name` (a counter's ends in _total, a histogram's in _count or
    _sum) with `labels`, read through the registry's public API; 0 while no series carries
    those labels. A name that no metric of the registry has is an error, not 0."""
    value = metrics.registry.get_sample_value(name, labels or {})
    if value is not None:
        return value
    families = {family.name for family in metrics.registry.collect()}
    assert any(name == f or name.startswith(f + "_") for f in families), f"no metric {name}"
    return 0.0


@contextmanager
def mariadb_database(prefix: str = "clock_test", revision: str | None = "head") -> Iterator[str]:
    """A fresh MariaDB database, migrated to `revision` (None: left empty), for the duration
    of the block."""
    name = unique(prefix + "_")
    # No pool: a test may restart MariaDB meanwhile, and the DROP needs a live connection.
    admin = create_engine(MARIADB_URL, isolation_level="AUTOCOMMIT", poolclass=NullPool)
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"))
    url = f"{MARIADB_URL}/{name}"
    if revision is not None:
        db = open_database(url, pool_size=2)
        migrate.upgrade(db, revision)
        db.dispose()
    try:
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS `{name}`"))
        admin.dispose()


def running(pid: int) -> bool:
    """True while the process exists and has not exited (an unreaped zombie has exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def claim_as_before_slots(store: Any, ids: list[int], owner: int, lease_until_ms: int) -> None:
    """Claim the pending alarms `ids` as a release before slots did, and as an engine still
    does for a webhook call: the row names its engine and its next_try_time is the lease's
    end, its version moved (a rolling upgrade, or a takeover's input)."""
    id_list = ", ".join(str(int(alarm_id)) for alarm_id in ids)
    with store.db.begin() as conn:
        conn.execute(
            text(
                f"UPDATE clock SET claimed_by = {int(owner)},"
                f" next_try_time = {int(lease_until_ms)}, version = version + 1"
                f" WHERE id IN ({id_list}) AND status = 'pending'"
            )
        )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Delivery:
    body: dict
    message_id: str
    received_ms: int
    redelivered: bool


@dataclass
class Collector:
    """Consumes clock.<application> with a real AMQP connection and keeps every delivery.

    When the broker goes away (stopped, restarted) it reconnects until it is back, so a
    test can stop RabbitMQ under it; `reconnects` counts how often that happened.
    """

    exchange: str
    application: str
    amqp_url: str = AMQP_URL
    queue_type: str = "classic"
    deliveries: list[Delivery] = field(default_factory=list)
    reconnects: int = 0

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Collector:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("collector did not connect to RabbitMQ")
        return self

    @property
    def queue(self) -> str:
        return f"clock.{self.application}"

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._consume()
            except (pika.exceptions.AMQPError, OSError):
                with self._lock:
                    self.reconnects += 1
                self._stop.wait(0.2)

    def _consume(self) -> None:
        connection = pika.BlockingConnection(pika.URLParameters(self.amqp_url))
        try:
            channel = connection.channel()
            channel.exchange_declare(self.exchange, "direct", durable=True)
            arguments = {"x-queue-type": self.queue_type} if self.queue_type != "classic" else None
            channel.queue_declare(self.queue, durable=True, arguments=arguments)
            channel.queue_bind(self.queue, self.exchange, routing_key=self.application)
            channel.basic_qos(prefetch_count=500)
            self._ready.set()
            for method, props, body in channel.consume(self.queue, inactivity_timeout=0.05):
                if self._stop.is_set():
                    break
                if method is None:
                    continue
                received = time.time_ns() // 1_000_000
                with self._lock:
                    self.deliveries.append(
                        Delivery(json.loads(body), props.message_id, received, method.redelivered)
                    )
                channel.basic_ack(method.delivery_tag)
            channel.cancel()
            channel.queue_delete(self.queue)
        finally:
            if connection.is_open:
                connection.close()

    def ids(self) -> list[int]:
        with self._lock:
            return [d.body["id"] for d in self.deliveries]

    def snapshot(self) -> list[Delivery]:
        with self._lock:
            return list(self.deliveries)

    def wait_for(self, count: int, timeout_s: float, message: str = "") -> set[int]:
        """The ids once `count` distinct alarms arrived; AssertionError after `timeout_s`."""
        eventually(
            lambda: len(set(self.ids())) >= count,
            timeout_s,
            0.02,
            lambda: f"{message or 'deliveries'}: {len(set(self.ids()))} of {count} arrived",
        )
        return set(self.ids())

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def delete_exchange(exchange: str, amqp_url: str = AMQP_URL) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    connection.channel().exchange_delete(exchange)
    connection.close()


class ServerProcess:
    """`clock-server` as a real subprocess, configured by CLOCK_* variables; `cwd` (first on
    its sys.path) may hold another tree of clock_server, a release's."""

    def __init__(self, env: dict[str, str], log_path: Path, cwd: Path | None = None) -> None:
        self.port = free_port()
        self.env = {**os.environ, **env, "CLOCK_PORT": str(self.port), "CLOCK_HOST": "127.0.0.1"}
        self.log_path = log_path
        self.cwd = cwd
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30) -> ServerProcess:
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "clock_server.runtime.cli"],
                env=self.env,
                cwd=self.cwd,
                stdout=log,
                stderr=log,
            )
        eventually(
            self._ready,
            timeout_s,
            0.05,
            lambda: f"clock-server did not become healthy: {self.log_path.read_text()[-2000:]}",
        )
        return self

    def _ready(self) -> bool:
        """It takes alarms (/readyz) and, when it runs an engine, has its broker connection
        (/healthz no longer degraded): the tests create alarms due at once."""
        assert self.process is not None
        if self.process.poll() is not None:
            raise RuntimeError(f"clock-server exited: {self.log_path.read_text()[-2000:]}")
        try:
            if requests.get(self.base_url + "/readyz", timeout=1).status_code != 200:
                return False
            health = requests.get(self.base_url + "/healthz", timeout=1).json()
        except (requests.RequestException, ValueError):
            return False
        return bool(health["status"] == "ok")

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(10)

    def terminate(self, timeout_s: float = 15) -> int:
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout_s)

    def ensure_stopped(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)


class TcpProxy:
    """A TCP forwarder on loopback that a test can cut and restore, to take a server away."""

    def __init__(self, target_port: int, target_host: str = "127.0.0.1") -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._listener: socket.socket | None = None
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._flowing = threading.Event()
        self._flowing.set()
        self.held_bytes = 0  # received while frozen, not passed on
        self.lag_s = 0.0  # the server's answers are passed on this much later, in order
        self._cut = threading.Event()  # wakes the answers waiting to be passed on

    @property
    def amqp_url(self) -> str:
        return (
            f"amqp://guest:guest@127.0.0.1:{self.port}/%2F?connection_attempts=1&socket_timeout=2"
        )

    def start(self) -> TcpProxy:
        self._cut.clear()
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def cut(self) -> None:
        """Refuse new connections and drop the open ones."""
        self._cut.set()
        with self._lock:
            if self._listener is not None:
                # shutdown() wakes the thread blocked in accept(); close() alone does not.
                with contextlib.suppress(OSError):
                    self._listener.shutdown(socket.SHUT_RDWR)
                self._listener.close()
                self._listener = None
            for sock in self._sockets:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            self._sockets.clear()

    @property
    def connected(self) -> bool:
        """Whether a connection through this proxy is open."""
        with self._lock:
            return bool(self._sockets)

    def freeze(self) -> None:
        """Keep every connection open but pass nothing on: a server that stopped answering."""
        self._flowing.clear()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            with self._lock:
                if self._listener is not listener:  # cut meanwhile
                    client.close()
                    upstream.close()
                    return
                self._sockets += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()
            late: queue.Queue[tuple[float, bytes]] = queue.Queue()
            threading.Thread(target=self._pipe, args=(upstream, late), daemon=True).start()
            threading.Thread(target=self._pass_late, args=(late, client), daemon=True).start()

    def _pass_late(self, late: queue.Queue[tuple[float, bytes]], sink: socket.socket) -> None:
        """Send on what the server answered, each piece `lag_s` after it came, until cut."""
        try:
            while data := (entry := late.get())[1]:
                if self._cut.wait(max(0.0, entry[0] + self.lag_s - time.monotonic())):
                    return
                sink.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_RDWR)
            sink.close()

    def _pipe(self, source: socket.socket, sink: socket.socket | queue.Queue[Any]) -> None:
        try:
            while data := source.recv(65536):
                if not self._flowing.is_set():
                    with self._lock:
                        self.held_bytes += len(data)
                    self._flowing.wait()
                if isinstance(sink, queue.Queue):
                    sink.put((time.monotonic(), data))
                else:
                    sink.sendall(data)
        except OSError:
            pass
        finally:
            if isinstance(sink, queue.Queue):
                sink.put((0.0, b""))  # the end, after what is still to be passed on
                sink = source
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()


class Cluster:
    """clock-server processes sharing one database and one exchange, and a collector."""

    def __init__(
        self,
        database_url: str,
        log_dir: Path,
        amqp_url: str = AMQP_URL,
        queue_type: str = "classic",
    ) -> None:
        self.database_url = database_url
        self.exchange = unique("clock_test_")
        self.application = unique("app")
        self.log_dir = log_dir
        self.amqp_url = amqp_url
        self.servers: list[ServerProcess] = []
        self.collector = Collector(self.exchange, self.application, amqp_url, queue_type).start()

    def server(self, name: str, amqp_url: str = AMQP_URL, **env: str) -> ServerProcess:
        """A server (not started yet) with short windows and leases, fit for tests."""
        settings = {
            "CLOCK_DATABASE_URL": self.database_url,
            "CLOCK_AMQP_URL": amqp_url,
            "CLOCK_EXCHANGE": self.exchange,
            "CLOCK_INSTANCE_ID": name,
            "CLOCK_PRELOAD_WINDOW_S": "0.5",
            "CLOCK_PRELOAD_INTERVAL_S": "0.1",
            "CLOCK_LEASE_S": "2",
            "CLOCK_HEARTBEAT_S": "0.25",
            "CLOCK_ENGINE_DEAD_AFTER_S": "1",
            "CLOCK_RETRY_BASE_S": "0.2",
            "CLOCK_RETRY_CAP_S": "0.5",
            "CLOCK_SHUTDOWN_TIMEOUT_S": "5",
            **env,
        }
        server = ServerProcess(settings, self.log_dir / f"{name}-{len(self.servers)}.log")
        self.servers.append(server)
        return server

    def create_batch(
        self,
        server: ServerProcess,
        count: int,
        spread_ms: int,
        offset_ms: int,
        *,
        cutoff_every: int = 0,
        cutoff_ms: int = 0,
    ) -> list[int]:
        """`count` alarms due evenly over `spread_ms`, the first `offset_ms` from now.

        With `cutoff_every` n, every n-th alarm gets latest_ring_at = target + `cutoff_ms`.
        """
        now = int(time.time() * 1000)
        items: list[dict[str, Any]] = []
        for i in range(count):
            target = now + offset_ms + (i * spread_ms) // count
            item: dict[str, Any] = {
                "application": self.application,
                "business_id": f"b{i}",
                "payload": f"p{i}",
                "target_ring_at": target,
            }
            if cutoff_every and i % cutoff_every == 0:
                item["latest_ring_at"] = target + cutoff_ms
            items.append(item)
        ids = []
        for start in range(0, count, 1_000):
            response = requests.post(
                server.base_url + "/v1/alarms/batch",
                json={"alarms": items[start : start + 1_000]},
                timeout=30,
            )
            assert response.status_code == 200, response.text
            ids += [r["alarm"]["id"] for r in response.json()["results"] if r["status"] == 201]
        assert len(ids) == count
        return ids

    def rows(self) -> list:
        """The rows of clock."""
        return self._every_row(alarm_table)

    def engines(self) -> list:
        """The rows of clock_engine."""
        return self._every_row(engine_table)

    def _every_row(self, table: Any) -> list:
        db = open_database(self.database_url, pool_size=1)
        try:
            with db.connect() as conn:
                return list(conn.execute(select(table)).all())
        finally:
            db.dispose()

    def engine_id(self, instance_id: str) -> int:
        """The registry id of the engine running as `instance_id` (its rings carry it)."""
        db = open_database(self.database_url, pool_size=1)
        query = select(engine_table.c.id).where(engine_table.c.instance_id == instance_id)
        try:
            with db.connect() as conn:
                return int(conn.execute(query).scalar_one())
        finally:
            db.dispose()

    def wait_all_rung(self, timeout_s: float = 5) -> list:
        """The rows once every one is rung (a delivery can arrive before its row is updated)."""
        return self.wait_rows(lambda row: row.status == "rung", timeout_s)

    def wait_rows(self, settled: Callable[[Any], bool], timeout_s: float) -> list:
        """The rows once `settled` holds for each; AssertionError, naming the statuses of the
        rows it does not hold for, after `timeout_s`."""

        def settled_rows() -> tuple[list]:
            rows = self.rows()
            unsettled = Counter(row.status for row in rows if not settled(row))
            assert not unsettled, f"{sum(unsettled.values())} rows not settled: {unsettled}"
            return (rows,)  # true, even without rows

        return eventually(settled_rows, timeout_s, 0.05)[0]

    def close(self) -> None:
        for server in self.servers:
            server.ensure_stopped()
        self.collector.stop()
        delete_exchange(self.exchange, self.amqp_url)


class StampingPublisher(InMemoryPublisher):
    """Remembers the wall-clock ms at which each message was handed over."""

    def __init__(self) -> None:
        super().__init__()
        self.sent_at: dict[Any, int] = {}

    def start_batch(self, messages):  # type: ignore[no-untyped-def]
        now = time.time_ns() // 1_000_000
        for message in messages:
            self.sent_at[message] = now
        return super().start_batch(messages)


def settle(engine: Any, clock: SettableClock, timeout_s: float = 5.0) -> int | None:
    """Step `engine`'s ring loop until nothing due is left, then wait (in real time) until each
    ring lane has finished or sleeps on `clock` until its alarms' moment (rows locked ahead):
    everything the engine does at this instant of the fake clock is done. Returns when the
    ring loop asked to run again (epoch ms), or None when it went idle."""
    held_before = -1
    while True:
        while True:
            asked_at = clock.now_ms()
            if (wait_s := engine.ringer.run_once()) != 0.0:
                break
        eventually(
            lambda: engine.ringer.in_flight <= clock.sleepers,
            timeout_s,
            0.001,
            lambda: f"{engine.ringer.in_flight} ring batches still in flight",
        )
        held = len(engine.heap)
        lanes_busy = engine.ringer.in_flight >= engine.settings.ring_lanes
        if wait_s is not None:
            return asked_at + max(round(wait_s * 1000), 1)
        # Idle; or what is left waits to be woken (all lanes busy, or webhook calls of its
        # applications to end), and a pass that took nothing will not change that.
        if held == 0 or lanes_busy or held == held_before:
            return None
        held_before = held
        # every lane was busy, and one has come free since: step again


def drive(engine: Any, clock: SettableClock, until_ms: int) -> None:
    """Run `engine`'s ring loop and lanes on `clock` up to `until_ms`, moving the clock each
    time to the next moment something waits for: the ring loop's next step, or a lane that
    locked its rows ahead and sleeps until they are due."""
    while True:
        moments = [settle(engine, clock), clock.next_wake_ms()]
        upcoming = [moment for moment in moments if moment is not None]
        if not upcoming or min(upcoming) > until_ms:
            return
        clock.set(max(min(upcoming), clock.now_ms()))


def serve_wsgi(app: Any) -> Iterator[str]:
    """`app` on a real HTTP server in a thread, for the SDK: its base URL until closed."""
    httpd = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_port}"
    finally:
        httpd.shutdown()
        thread.join(10)


def stop_waitress(server: Any, thread: threading.Thread) -> None:
    """Stop a lone waitress server running in `thread`. Its close() leaves the loop running;
    emptying the loop's map of sockets ends it, and that is done in the loop's own thread
    (through its trigger): closed from here, a socket could vanish under the loop's select()
    and the thread end in EBADF."""
    server.task_dispatcher.shutdown()
    server.trigger.pull_trigger(lambda: wasyncore.close_all(server._map))
    thread.join(10)
    assert not thread.is_alive(), "the HTTP server did not stop"


def named_amqp_url(url: str, name: str) -> str:
    """`url` with a connection name RabbitMQ lists the connection by."""
    joiner = "&" if "?" in url else "?"
    return f"{url}{joiner}client_properties={quote(str({'connection_name': name}))}"


def close_broker_connection(connection_name: str) -> None:
    """Close the named connection as an operator would: `rabbitmqctl close_connection`."""
    listing = subprocess.run(
        ["rabbitmqctl", "-q", "list_connections", "pid", "client_properties", "--no-table-headers"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout
    pids = [line.split("\t")[0] for line in listing.splitlines() if connection_name in line]
    assert len(pids) == 1, listing
    subprocess.run(
        ["rabbitmqctl", "-q", "close_connection", pids[0], "closed by the test"],
        check=True,
        timeout=30,
    )
