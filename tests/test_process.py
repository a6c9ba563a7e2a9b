"""Whole clock-server processes on real MariaDB and RabbitMQ: on time, shared, killed, stopped."""

from __future__ import annotations

import subprocess
import time

import pytest
import requests

from tests.support import Cluster, ServerProcess, TcpProxy, eventually, running

pytestmark = [pytest.mark.process, pytest.mark.mariadb, pytest.mark.rabbitmq]


def assert_rang_on_time(cluster: Cluster, ids: list[int]) -> None:
    by_id = {row.id: row for row in cluster.wait_all_rung()}
    for delivery in cluster.collector.deliveries:
        target = delivery.body["target_ring_at"]
        assert delivery.received_ms >= target, "rang early"
        assert by_id[delivery.body["id"]].rung_at >= target
        assert delivery.message_id == str(delivery.body["id"])
    assert {by_id[i].status for i in ids} == {"rung"}


@pytest.mark.parametrize("web_processes", ["1", "2"])
def test_an_alarm_created_over_http_arrives_on_time(cluster: Cluster, web_processes: str):
    server = cluster.server(
        "solo",
        CLOCK_PRELOAD_INTERVAL_S="5",
        CLOCK_PRELOAD_WINDOW_S="10",
        CLOCK_LEASE_S="30",
        CLOCK_WEB_PROCESSES=web_processes,
    ).start()
    target = int(time.time() * 1000) + 300
    response = requests.post(
        server.base_url + "/v1/alarms",
        timeout=5,
        json={
            "application": cluster.application,
            "business_id": "order-1",
            "payload": "close it",
            "target_ring_at": target,
        },
    )
    assert response.status_code == 201
    cluster.collector.wait_for(1, 3)
    delivery = cluster.collector.deliveries[0]
    assert delivery.body["payload"] == "close it" and delivery.body["attempt"] == 1
    (row,) = cluster.wait_all_rung()
    rung_at = row.rung_at
    # With a 5 s preload interval, only the wake-up on create makes this on time (and the
    # lower bound is the promise never to ring early).
    assert target <= rung_at < target + 200
    assert delivery.received_ms >= target


@pytest.mark.parametrize("web_processes", ["1", "2"])
def test_a_schedule_rings_each_occurrence_once_whichever_process_plans_it(
    cluster: Cluster, web_processes: str
):
    # One process: its maintenance plans. Web workers: they do, and the engine's process
    # does not (runtime/planner_thread.py); their pipe wakes the engine for what they make.
    server = cluster.server("planned", CLOCK_WEB_PROCESSES=web_processes).start()
    response = requests.put(
        f"{server.base_url}/v1/schedules/{cluster.application}/tick",
        json={"every_s": 1, "payload": "tick"},
        timeout=5,
    )
    assert response.status_code == 201, response.text
    cluster.collector.wait_for(3, 15)
    deliveries = cluster.collector.snapshot()
    keys = [delivery.body["business_id"] for delivery in deliveries]
    assert len(set(keys)) == len(keys), "an occurrence rang twice"
    assert all(key.startswith("~schedule/tick/") for key in keys)
    for delivery in deliveries:
        assert delivery.body["payload"] == "tick"
        assert delivery.received_ms >= delivery.body["target_ring_at"], "rang early"


@pytest.mark.parametrize("web_processes", ["1", "2"])
def test_the_probes_see_the_engines_loops_from_every_process(cluster: Cluster, web_processes: str):
    server = cluster.server("probed", CLOCK_WEB_PROCESSES=web_processes).start()
    loops = {"clock-preload", "clock-ring", "clock-liveness", "clock-dead-letters"}
    loops |= {"clock-webhook-answers"} | ({"engine-status"} if web_processes == "2" else set())
    for _ in range(4):  # connections spread over the web processes
        live = requests.get(server.base_url + "/livez", timeout=5)
        assert live.status_code == 200, live.text
        assert live.json()["loops"] == dict.fromkeys(loops, "ok")
        ready = requests.get(server.base_url + "/readyz", timeout=5)
        assert ready.json() == {"status": "ok", "database": "ok"}


def test_two_servers_share_the_work_without_double_rings(cluster: Cluster):
    a, b = cluster.server("a").start(), cluster.server("b").start()
    ids = cluster.create_batch(a, 2_000, spread_ms=1_500, offset_ms=500)
    cluster.collector.wait_for(2_000, 10)
    time.sleep(0.3)  # a late duplicate would show up here
    delivered = cluster.collector.ids()
    assert sorted(delivered) == sorted(ids)
    assert_rang_on_time(cluster, ids)
    rung_by = {server: rung_count(server) for server in (a, b)}
    assert sum(rung_by.values()) == 2_000
    assert all(count > 0 for count in rung_by.values()), f"one server did nothing: {rung_by}"


def rung_count(server: ServerProcess) -> int:
    """What the server's own /metrics says it rang, every application's together."""
    return metric_sum(server, "clock_alarms_rung_total")


def metric_sum(server: ServerProcess, name: str) -> int:
    """A counter of the server's own /metrics, every application's together."""
    text = requests.get(server.base_url + "/metrics", timeout=5).text
    values = [line.split()[-1] for line in text.splitlines() if line.startswith(name + "{")]
    return int(sum(float(value) for value in values))


def heap_size(server: ServerProcess) -> float:
    """`clock_heap_size` in the server's /metrics: the alarms its engine holds."""
    text = requests.get(server.base_url + "/metrics", timeout=5).text
    return next(
        float(line.split()[1]) for line in text.splitlines() if line.startswith("clock_heap_size ")
    )


@pytest.mark.parametrize("web_processes", ["1", "2"])
def test_sigterm_leaves_every_alarm_as_it_was(cluster: Cluster, web_processes: str):
    server = cluster.server(
        "leaving",
        CLOCK_PRELOAD_WINDOW_S="10",
        CLOCK_LEASE_S="30",
        CLOCK_WEB_PROCESSES=web_processes,
    ).start()
    cluster.create_batch(server, 300, spread_ms=1_000, offset_ms=8_000)
    # read into the engine's heap, which writes nothing to them
    eventually(lambda: heap_size(server) == 300, 5, 0.05, "the engine did not read the alarms")
    assert server.process is not None
    children = subprocess.run(
        ["pgrep", "-P", str(server.process.pid)], capture_output=True, text=True
    )
    workers = [int(pid) for pid in children.stdout.split()]
    assert len(workers) == (0 if web_processes == "1" else 2)
    started = time.monotonic()
    assert server.terminate(timeout_s=15) == 0
    assert time.monotonic() - started < 10
    assert not any(running(pid) for pid in workers)  # none outlives the server
    rows = cluster.rows()
    assert all(row.next_try_time == row.target_ring_at for row in rows)
    assert all((row.status, row.version, row.claimed_by) == ("pending", 0, 0) for row in rows)


def test_web_workers_stop_when_their_supervisor_is_killed(cluster: Cluster):
    server = cluster.server("brief", CLOCK_WEB_PROCESSES="2").start()
    assert server.process is not None
    children = subprocess.run(
        ["pgrep", "-P", str(server.process.pid)], capture_output=True, text=True
    )
    workers = [int(pid) for pid in children.stdout.split()]
    assert len(workers) == 2
    server.kill()
    eventually(
        lambda: not any(running(pid) for pid in workers),
        5,
        0.05,
        "web workers outlived their supervisor",
    )


def test_a_broker_outage_delays_alarms_but_loses_none(cluster: Cluster):
    proxy = TcpProxy(5672).start()
    try:
        _outage(cluster, proxy)
    finally:
        proxy.cut()


def _outage(cluster: Cluster, proxy: TcpProxy) -> None:
    server = cluster.server("patient", amqp_url=proxy.amqp_url).start()
    proxy.cut()
    ids = cluster.create_batch(server, 200, spread_ms=200, offset_ms=300)
    # The server's own broker being away spends no attempt: the alarms wait, pending.
    eventually(
        lambda: metric_sum(server, "clock_alarms_held_total") >= 200,
        5,
        0.05,
        "the alarms were not held while the broker was away",
    )
    rows = cluster.rows()
    assert {(row.status, row.retry_times) for row in rows} == {("pending", 0)}
    assert cluster.collector.ids() == []
    proxy.start()
    cluster.collector.wait_for(200, 10)
    assert sorted(cluster.collector.ids()) == sorted(ids)
    rows = cluster.wait_all_rung()
    assert {(row.status, row.retry_times) for row in rows} == {("rung", 0)}


@pytest.mark.parametrize("lanes", ["1", "4"])
def test_a_broker_falling_behind_its_confirms_gets_each_alarm_once(cluster: Cluster, lanes: str):
    """The broker's answers come later and later, up to 2.5 s, past the publish timeout of
    2 s, while it is still there (its confirms and heartbeats, asked for every second, keep
    coming): the server waits for the confirms instead of publishing the late ones again, so
    each alarm arrives once, none early, none with an attempt spent. With one lane each batch
    waits alone."""
    proxy = TcpProxy(5672).start()
    try:
        server = cluster.server(
            "behind",
            amqp_url=proxy.amqp_url,
            CLOCK_PUBLISH_TIMEOUT_S="2",
            CLOCK_RING_LANES=lanes,
        ).start()
        ids = cluster.create_batch(server, 400, spread_ms=6_000, offset_ms=300)
        time.sleep(0.5)  # the first alarms are rung and confirmed at once
        for _ in range(25):  # a broker falling behind, to 2.5 s
            proxy.lag_s += 0.1
            time.sleep(0.1)
        cluster.collector.wait_for(400, 20)
        time.sleep(3.0)  # a second publish of a late one would be here by now
        assert sorted(cluster.collector.ids()) == sorted(ids)
        assert_rang_on_time(cluster, ids)
        assert {row.retry_times for row in cluster.rows()} == {0}
    finally:
        proxy.cut()


@pytest.mark.parametrize("web_processes", ["1", "2"])
def test_sigterm_exits_by_the_shutdown_timeout_while_the_broker_stopped_answering(
    cluster: Cluster, web_processes: str
):
    """Ring lanes wait for confirms that never come (publish timeout 60 s): the one shutdown
    deadline still ends the process in time, and the unconfirmed alarms stay pending."""
    proxy = TcpProxy(5672).start()
    try:
        server = cluster.server(
            "stuck",
            amqp_url=proxy.amqp_url,
            CLOCK_WEB_PROCESSES=web_processes,
            CLOCK_SHUTDOWN_TIMEOUT_S="3",
            CLOCK_PUBLISH_TIMEOUT_S="60",
        ).start()
        assert server.process is not None
        workers = subprocess.run(
            ["pgrep", "-P", str(server.process.pid)], capture_output=True, text=True
        ).stdout.split()
        proxy.freeze()
        all_due_ms = int(time.time() * 1000) + 200 + 100
        ids = cluster.create_batch(server, 200, spread_ms=100, offset_ms=200)
        # Every alarm is due, and the first lane's queue declaration is sent, never answered.
        eventually(
            lambda: time.time() * 1000 > all_due_ms and proxy.held_bytes > 0,
            5,
            0.05,
            "nothing was sent to the frozen broker",
        )
        started = time.monotonic()
        assert server.terminate(timeout_s=15) == 0
        took_s = time.monotonic() - started
        assert took_s < 3 + 1.0, f"SIGTERM to exit took {took_s:.1f} s"
        assert not any(running(int(pid)) for pid in workers)
        rows = cluster.rows()
        assert sorted(row.id for row in rows) == sorted(ids)
        assert {row.status for row in rows} == {"pending"}
    finally:
        proxy.cut()
