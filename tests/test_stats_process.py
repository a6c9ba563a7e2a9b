"""A real server with two web processes: the alarms created through either and rung by the
engine process show in GET /v1/stats, the same whichever process answers."""

from __future__ import annotations

import time
from typing import Any

import requests

from tests.support import Cluster, eventually

# Each process writes its counts every 5 s; the engine's rings come after the creates.
WRITTEN_S = 20


def test_every_web_process_answers_the_same_statistics(cluster: Cluster):
    server = cluster.server("stats", CLOCK_WEB_PROCESSES="2").start()
    cluster.create_batch(server, 30, spread_ms=200, offset_ms=300)
    for n in range(5):  # single creates, each on a connection of its own
        response = requests.post(
            server.base_url + "/v1/alarms",
            json={
                "application": cluster.application,
                "business_id": f"single-{n}",
                "payload": "p",
                "target_ring_at": int(time.time() * 1000),  # due at once
            },
            timeout=5,
        )
        assert response.status_code == 201, response.text
    cluster.collector.wait_for(35, 10)
    url = f"{server.base_url}/v1/stats?minutes=3&application={cluster.application}"

    def totals() -> tuple[int, int, int]:
        body = requests.get(url, timeout=5).json()
        entries: list[dict[str, Any]] = body["series"]["*"]
        assert len(entries) == 3 and body["applications"] == [cluster.application]
        assert entries == body["series"][cluster.application]
        found = tuple(sum(e[name] for e in entries) for name in ("created", "rung", "failed"))
        assert found == (35, 35, 0), found
        return found  # type: ignore[return-value]

    eventually(totals, WRITTEN_S, 0.5)
    answers = set()
    for _ in range(10):  # new connections, taken by either web process
        body = requests.get(url, timeout=5, headers={"Connection": "close"}).json()
        # The minutes that counted something: the window moves on at a minute's end.
        answers.add(repr([e for e in body["series"]["*"] if e["created"] or e["rung"]]))
    assert len(answers) == 1
    rang = [e for e in body["series"]["*"] if e["rung"]]
    assert rang and all(e["lateness_p50_ms"] is not None for e in rang)
