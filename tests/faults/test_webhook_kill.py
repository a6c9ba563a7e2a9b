"""A server SIGKILLed while its webhook calls hang: another server sends them again once it
finds the first one silent, and nothing is lost.

The receiver is a real HTTP server in this process. Its first calls hang until the test
ends, so the kill catches them mid-delivery; every call after the kill is answered 200 at
once. Each alarm must be received, with the webhook-id of its first call on every later
one, and end rung.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import orjson
import requests

from tests.faults.harness import FAULT_MARKS
from tests.support import Cluster
from tests.webhook_receiver import Answer, Received, receiving

pytestmark = FAULT_MARKS

ALARMS = 200
HANGING = 4  # calls caught in flight by the kill: all the application may make at once


def test_sigkill_mid_delivery_loses_no_webhook_and_repeats_keep_their_id(cluster: Cluster):
    killed = threading.Event()
    hung: list[str] = []

    def answer(received: Received) -> Answer:
        if not killed.is_set() and len(hung) < HANGING:
            hung.append(received.webhook_id)
            return Answer(200, sleep_s=60)  # until the receiver is stopped
        return Answer(204)

    with receiving(answer) as receiver:
        env = {"CLOCK_WEBHOOK_ALLOW_PRIVATE": "true", "CLOCK_WEBHOOK_MAX_IN_FLIGHT": "4"}
        first = cluster.server("first", **env).start()
        settings = {"channel": "webhook", "webhook_url": receiver.url()}
        url = f"{first.base_url}/v1/applications/{cluster.application}"
        assert requests.put(url, json=settings, timeout=10).status_code in (200, 201)
        ids = cluster.create_batch(first, ALARMS, spread_ms=1_000, offset_ms=1_000)
        receiver.wait_for(HANGING, timeout_s=15)
        killed.set()
        first.kill()
        killed_at = time.time()
        cluster.server("second", **env).start()
        rows = cluster.wait_all_rung(timeout_s=30)
        calls = list(receiver.received)

    assert {row.status for row in rows} == {"rung"}, sorted({row.status for row in rows})
    bodies: dict[str, set[int]] = defaultdict(set)
    for call in calls:
        bodies[call.webhook_id].add(orjson.loads(call.body)["id"])
    assert set(bodies) == {str(i) for i in ids}  # every alarm received, under its own id
    assert all(ids_seen == {int(webhook_id)} for webhook_id, ids_seen in bodies.items())
    again = [c for c in calls if c.webhook_id in hung and c.at_s > killed_at]
    assert {c.webhook_id for c in again} == set(hung)  # each call cut off was sent again
    assert all(c.attempt == 1 for c in again)  # a takeover repeats the attempt it cut off
