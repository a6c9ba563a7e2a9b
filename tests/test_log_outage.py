"""The log of a broker outage, read as an operator reads it: a running clock-server's JSON
log, every line JSON with an action, access lines with request ids, and a broker that closes
its connections told once per change of state, naming the connection, the node and the
reason; a publisher whose broker is away for a while, told the same, without pika's errors."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import time
import urllib.parse
from typing import Any

import pytest
import requests

from clock_server.broker.amqp_publisher import AmqpPublisher
from clock_server.runtime.logs import log_handler
from tests.support import AMQP_URL, Cluster, ServerProcess, TcpProxy, eventually, unique

pytestmark = pytest.mark.rabbitmq

CONNECTIONS = ("clock-publisher", "clock-publisher-express")
STATES = ("broker_connected", "broker_disconnected", "broker_reconnected")
BROKER = urllib.parse.urlsplit(AMQP_URL)


def _connections(marker: str) -> dict[str, str]:
    """The broker's connections whose client properties hold `marker`: name -> pid."""
    listing = subprocess.run(
        ["rabbitmqctl", "-q", "list_connections", "pid", "client_properties", "--no-table-headers"],
        capture_output=True,
        text=True,
        check=True,
        timeout=20,
    ).stdout
    found = {}
    for line in listing.splitlines():
        if marker in line:
            pid, properties = line.split("\t", 1)
            name = next(name for name in CONNECTIONS[::-1] if f'"{name}"' in properties)
            found[name] = pid
    return found


def _lines(server: ServerProcess) -> list[dict[str, Any]]:
    text = server.log_path.read_text()
    lines = [json.loads(line) for line in text.splitlines()]
    assert all(isinstance(line, dict) and line.get("action") for line in lines), text
    return lines


@pytest.mark.process
@pytest.mark.mariadb
@pytest.mark.parametrize("web_processes", ["1", "2"])
def test_a_json_log_of_a_server_whose_broker_closes_its_connections(
    cluster: Cluster, web_processes: str
) -> None:
    marker = unique("logs")
    # A property of our own beside each connection's name, to find this server's connections
    # among those of every other server on the broker.
    properties = urllib.parse.quote(str({"clock_test": marker}))
    server = cluster.server(
        "logs",
        amqp_url=f"{AMQP_URL}?client_properties={properties}",
        CLOCK_LOG_FORMAT="json",
        CLOCK_WEB_PROCESSES=web_processes,
    ).start()
    sent_id = unique("trace-")
    created = requests.post(
        server.base_url + "/v1/alarms",
        json={
            "application": cluster.application,
            "business_id": "b1",
            "payload": "p",
            "target_ring_at": int(time.time() * 1000) + 3_600_000,
        },
        headers={"X-Request-Id": sent_id},
        timeout=5,
    )
    assert created.status_code == 201 and created.headers["X-Request-Id"] == sent_id
    pids = eventually(
        lambda: (found := _connections(marker)) and len(found) == 2 and found, 20, 0.5
    )

    for name in CONNECTIONS:
        subprocess.run(
            ["rabbitmqctl", "-q", "close_connection", pids[name], "closed by the test"],
            check=True,
            timeout=20,
        )

    def reconnected() -> bool:
        done = {line.get("connection") for line in _lines(server)
                if line["action"] == "broker_reconnected"}  # fmt: skip
        return done >= set(CONNECTIONS)

    eventually(reconnected, 15, 0.1, lambda: server.log_path.read_text()[-3000:])
    fetched = requests.get(f"{server.base_url}/v1/alarms/{cluster.application}/b1", timeout=5)
    assert fetched.status_code == 200
    assert server.terminate() == 0
    lines = _lines(server)

    access = {line["request_id"]: line for line in lines if line["action"] == "http_request"}
    assert {key: access[sent_id][key] for key in ("method", "route", "status", "application")} == {
        "method": "POST", "route": "/v1/alarms", "status": 201,
        "application": cluster.application}  # fmt: skip
    got = access[fetched.headers["X-Request-Id"]]
    assert (got["route"], got["status"]) == ("/v1/alarms/<application>/<path:business_id>", 200)

    for name in CONNECTIONS:
        states = [line for line in lines
                  if line["action"] in STATES and line.get("connection") == name]  # fmt: skip
        assert [line["action"] for line in states] == list(STATES), states
        assert {line["node"] for line in states} == {f"{BROKER.hostname}:{BROKER.port or 5672}"}
        lost = states[1]
        assert lost["level"] == "WARNING"
        assert lost["reason"].startswith("ConnectionClosedByBroker: (320")
        assert "closed by the test" in lost["reason"]
    engine = {line["process"] for line in lines if line["action"] in STATES}
    served_by = {line["process"] for line in access.values()}
    assert len(engine) == 1 and (served_by == engine) == (web_processes == "1")
    loud_pika = [line for line in lines if line["logger"].startswith("pika")
                 and line["level"] not in ("DEBUG", "INFO")]  # fmt: skip
    assert loud_pika == []
    assert {"server_ready", "server_stopped"} <= {line["action"] for line in lines}


def _count(stream: io.StringIO, action: str) -> int:
    return sum(json.loads(line)["action"] == action for line in stream.getvalue().splitlines())


def test_a_broker_away_for_a_while_is_one_line_when_lost_and_one_when_back() -> None:
    stream = io.StringIO()
    handler = log_handler("INFO", "json", stream)
    root, states = logging.getLogger(), logging.getLogger("clock_server.broker.connection_log")
    old_levels = root.level, states.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    states.setLevel(logging.DEBUG)  # the attempts between, to know when some have failed
    proxy = TcpProxy(5672).start()
    back = TcpProxy(5672)
    back.port = proxy.port  # the same node, when it comes back
    node = f"127.0.0.1:{proxy.port}"
    publisher = AmqpPublisher(proxy.amqp_url, exchange=unique("clock_test_"), name="alarms-test")
    try:
        publisher.start()
        assert publisher.wait_healthy(10)
        proxy.cut()  # the open connection drops, and new ones are refused
        eventually(lambda: _count(stream, "broker_connect_failed") >= 2, 15, 0.05)
        back.start()
        assert publisher.wait_healthy(15)
    finally:
        publisher.close()
        back.cut()
        root.removeHandler(handler)
        root.setLevel(old_levels[0])
        states.setLevel(old_levels[1])
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert all(line.get("action") for line in lines)
    said = [line for line in lines if line["level"] != "DEBUG"]
    assert [(line["level"], line["action"]) for line in said] == [
        ("INFO", "broker_connected"),
        ("WARNING", "broker_disconnected"),
        ("INFO", "broker_reconnected"),
    ], lines
    assert {(line["connection"], line["node"]) for line in said} == {("alarms-test", node)}
    assert said[1]["reason"].startswith("StreamLostError: ")
    assert said[2]["failed_attempts"] >= 2 and said[2]["down_s"] > 0
    assert not any(line["logger"].startswith("pika") for line in lines)
