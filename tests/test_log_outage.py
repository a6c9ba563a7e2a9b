"""A running clock-server's JSON log, read as an operator reads it: every line JSON with an
action, access lines with request ids, and a broker that closes its connections told once
per change of state, naming the connection, the node and the reason."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.parse
from typing import Any

import pytest
import requests

from tests.support import AMQP_URL, Cluster, ServerProcess, eventually, unique

pytestmark = [pytest.mark.process, pytest.mark.mariadb, pytest.mark.rabbitmq]

CONNECTIONS = ("clock-publisher", "clock-publisher-express")
STATES = ("broker_connected", "broker_disconnected", "broker_reconnected")


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


def test_a_json_log_of_a_server_whose_broker_closes_its_connections(cluster: Cluster) -> None:
    marker = unique("logs")
    # A property of our own beside each connection's name, to find this server's connections
    # among those of every other server on the broker.
    properties = urllib.parse.quote(str({"clock_test": marker}))
    server = cluster.server(
        "logs", amqp_url=f"{AMQP_URL}?client_properties={properties}", CLOCK_LOG_FORMAT="json"
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
        assert {line["node"] for line in states} == {"127.0.0.1:5672"}
        lost = states[1]
        assert lost["level"] == "WARNING"
        assert lost["reason"].startswith("ConnectionClosedByBroker: (320")
        assert "closed by the test" in lost["reason"]
    loud_pika = [line for line in lines if line["logger"].startswith("pika")
                 and line["level"] not in ("DEBUG", "INFO")]  # fmt: skip
    assert loud_pika == []
    assert {"server_ready", "server_stopped"} <= {line["action"] for line in lines}
