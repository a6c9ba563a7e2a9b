"""What happens to a create per application: registration, the default cutoff, the creation
rate and the capacity of pending alarms (clock_server/api/admission.py), on SQLite and the
real MariaDB; the shared rate over four processes' limiters through 30 s of fake time, and
over two real servers of two web processes each; the SDK's typed errors for both 429s."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pytest
import requests

from clock_client import CapacityExceeded, ClockClient, RateLimited
from clock_client.errors import error_from_response
from clock_client.models import batch_results_from_json
from clock_server.api import Services, create_app
from clock_server.errors import NotFound
from clock_server.metrics import Metrics
from clock_server.model import ApplicationPolicy
from clock_server.runtime.build_api import build_services
from clock_server.settings import Settings
from clock_server.store.alarms import AlarmStore
from clock_server.store.applications import SqlApplicationRegistry
from clock_server.store.db import open_database
from clock_server.store.rate_buckets import SharedRateLimiter, SqlTokenBuckets
from clock_server.testing import SettableClock
from tests.support import ServerProcess, mariadb_database, metric_value, unique

NOW = 1_700_000_000_000  # SettableClock's start
MINUTE = 60_000


@dataclass
class Server:
    """One process's API on the shared store, driven by the fake clock."""

    client: Any
    services: Services
    store: AlarmStore
    clock: SettableClock

    def create(self, application: str, business_id: str, **extra: Any) -> Any:
        body = {
            "application": application,
            "business_id": business_id,
            "payload": "p",
            "target_ring_at": NOW + MINUTE,
            **extra,
        }
        return self.client.post("/v1/alarms", json=body)

    def batch(self, items: list[tuple[str, str]]) -> list[dict[str, Any]]:
        alarms = [
            {"application": a, "business_id": b, "payload": "p", "target_ring_at": NOW + MINUTE}
            for a, b in items
        ]
        response = self.client.post("/v1/alarms/batch", json={"alarms": alarms})
        assert response.status_code == 200, response.get_data(as_text=True)
        return response.get_json()["results"]  # type: ignore[no-any-return]

    def stored(self, application: str) -> list[str]:
        return [a.business_id for a in self.store.list(application, None, 1_000, None)]

    def rejected(self, application: str, code: str) -> float:
        labels = {"application": application, "code": code}
        return metric_value(self.services.metrics, "clock_creates_rejected_total", labels)


def server(store: AlarmStore, clock: SettableClock, **settings: Any) -> Server:
    services = build_services(Settings(**settings), store, clock, Metrics())
    return Server(create_app(services).test_client(), services, store, clock)


@pytest.fixture
def api(store: AlarmStore, fake_clock: SettableClock) -> Server:
    return server(store, fake_clock)


def register(store: AlarmStore, name: str, **limits: Any) -> None:
    """What an admin's PUT /v1/applications/{name} stores."""
    SqlApplicationRegistry(store).put(ApplicationPolicy(name, **limits), NOW)


def error_of(response: Any) -> dict[str, Any]:
    return response.get_json()["error"]  # type: ignore[no-any-return]


# --- registration --------------------------------------------------------------------------


def test_the_first_create_registers_the_application_with_no_limits(api: Server) -> None:
    name = unique("app")
    with pytest.raises(NotFound):
        api.services.applications.get(name)
    assert api.create(name, "a").status_code == 201
    policy = api.services.applications.get(name)
    assert policy == ApplicationPolicy(name, created_at=NOW, updated_at=NOW)
    assert api.services.policies.known(name)  # later creates find it without the database
    api.clock.advance(10)
    assert api.create(name, "b").status_code == 201
    assert api.services.applications.get(name).created_at == NOW
    assert api.rejected(name, "unregistered") == 0


def test_an_application_registered_elsewhere_keeps_its_limits(api: Server) -> None:
    name = unique("app")
    assert api.services.policies.known("x") is False  # the cache is read now, without `name`
    register(api.store, name, max_pending=1)  # by an admin on another process, meanwhile
    assert api.create(name, "a").status_code == 201
    assert error_of(api.create(name, "b"))["code"] == "capacity_exceeded"


def test_with_registration_required_an_unregistered_application_is_403(
    store: AlarmStore, fake_clock: SettableClock
) -> None:
    api = server(store, fake_clock, require_registered_applications=True)
    name, known = unique("app"), unique("app")
    register(store, known)
    response = api.create(name, "a")
    assert response.status_code == 403
    error = error_of(response)
    assert error["code"] == "forbidden" and error["field"] == "application"
    assert f"application '{name}' is not registered" in error["message"]
    assert f"an admin must PUT /v1/applications/{name}" in error["message"]
    with pytest.raises(NotFound):
        api.services.applications.get(name)  # nothing written
    assert api.stored(name) == []
    results = api.batch([(known, "k1"), (name, "b"), (known, "k2")])
    assert [r["status"] for r in results] == [201, 403, 201]
    assert results[1]["error"]["code"] == "forbidden"
    assert api.stored(name) == [] and sorted(api.stored(known)) == ["k1", "k2"]
    assert api.rejected(name, "unregistered") == 2
    # Registered by an admin through another process: taken at once, not after a refresh.
    register(store, name)
    assert api.create(name, "a").status_code == 201


# --- default cutoff ------------------------------------------------------------------------


def test_the_default_cutoff_fills_in_a_missing_latest_ring_at(api: Server) -> None:
    name = unique("app")
    register(api.store, name, default_cutoff_ms=30_000)
    alarm = api.create(name, "a").get_json()
    assert alarm["latest_ring_at"] == NOW + MINUTE + 30_000
    given = api.create(name, "b", latest_ring_at=NOW + MINUTE + 5).get_json()
    assert given["latest_ring_at"] == NOW + MINUTE + 5
    (item,) = api.batch([(name, "c")])
    assert item["alarm"]["latest_ring_at"] == NOW + MINUTE + 30_000
    other = api.create(unique("app"), "a").get_json()
    assert other["latest_ring_at"] is None


# --- creation rate -------------------------------------------------------------------------


def test_over_the_creation_rate_is_429_with_retry_after(api: Server) -> None:
    name = unique("app")
    register(api.store, name, create_rate_per_s=2, create_burst=2)
    assert [api.create(name, f"a{i}").status_code for i in range(2)] == [201, 201]
    response = api.create(name, "a2")
    assert response.status_code == 429
    assert response.headers["Retry-After"] == "1"
    error = error_of(response)
    assert error["code"] == "rate_limited" and error["retry_after_s"] == 1
    assert "creation rate of 2 alarms/s (create_rate_per_s, burst 2)" in error["message"]
    assert sorted(api.stored(name)) == ["a0", "a1"]  # nothing written for the refused one
    assert api.create(unique("app"), "x").status_code == 201  # others are not limited
    api.clock.advance(500)  # one token at 2/s
    assert api.create(name, "a2").status_code == 201
    assert api.create(name, "a3").status_code == 429
    assert api.rejected(name, "rate_limited") == 2
    metrics = api.client.get("/metrics").get_data(as_text=True)
    assert f'clock_creates_rejected_total{{application="{name}",code="rate_limited"}} 2.0' in (
        metrics
    )


def test_a_batch_over_the_rate_refuses_only_the_items_without_a_token(api: Server) -> None:
    name, free = unique("app"), unique("app")
    register(api.store, name, create_rate_per_s=5, create_burst=5)
    items = [(name, f"a{i}") for i in range(8)]
    items.insert(3, (free, "f"))
    items.append((name, "a0"))  # a repeat within the batch follows its first occurrence
    results = api.batch(items)
    assert [r["status"] for r in results] == [201] * 6 + [429] * 3 + [200]
    for result in results[6:9]:
        assert result["error"]["code"] == "rate_limited"
        assert result["error"]["retry_after_s"] >= 1
        assert "alarm" not in result
    assert sorted(api.stored(name)) == [f"a{i}" for i in range(5)]
    assert api.stored(free) == ["f"]
    assert api.rejected(name, "rate_limited") == 3


# --- capacity ------------------------------------------------------------------------------


def test_over_capacity_is_429_and_a_repeat_is_still_200(api: Server) -> None:
    name, other = unique("app"), unique("app")
    register(api.store, name, max_pending=3)
    first = api.create(name, "a0").get_json()
    assert [api.create(name, f"a{i}").status_code for i in (1, 2)] == [201, 201]
    response = api.create(name, "a3")
    assert response.status_code == 429
    assert "Retry-After" not in response.headers
    error = error_of(response)
    assert error["code"] == "capacity_exceeded"
    assert (
        f"application '{name}' is at its limit of 3 pending alarms (max_pending)"
        in (error["message"])
    )
    assert sorted(api.stored(name)) == ["a0", "a1", "a2"]
    repeat = api.create(name, "a0", target_ring_at=NOW + 2 * MINUTE)
    assert repeat.status_code == 200 and repeat.get_json() == first  # stored, unchanged
    assert api.create(other, "a3").status_code == 201  # another application is untouched
    # A cancel frees room once the count is read again (at most CLOCK_APPLICATION_REFRESH_S).
    assert api.client.delete(f"/v1/alarms/{name}/a1").status_code == 200
    assert api.create(name, "a3").status_code == 429
    api.clock.advance(2_000)
    assert api.create(name, "a3").status_code == 201
    assert api.create(name, "a4").status_code == 429
    assert api.rejected(name, "capacity_exceeded") == 3


def test_a_batch_over_capacity_writes_what_fits(api: Server) -> None:
    name = unique("app")
    register(api.store, name, max_pending=3, create_rate_per_s=100)
    api.create(name, "a")
    results = api.batch([(name, "b"), (name, "c"), (name, "d"), (name, "a"), (name, "e")])
    assert [r["status"] for r in results] == [201, 201, 429, 200, 429]
    assert results[2]["error"]["code"] == "capacity_exceeded"
    assert results[3]["alarm"]["business_id"] == "a"
    assert sorted(api.stored(name)) == ["a", "b", "c"]
    assert api.services.admission.pending.estimate(name) == 3


def test_two_processes_overshoot_by_at_most_what_the_other_admits_in_a_refresh(
    store: AlarmStore, fake_clock: SettableClock
) -> None:
    a, b = server(store, fake_clock), server(store, fake_clock)
    name = unique("app")
    register(store, name, max_pending=4)
    assert b.create(name, "b0").status_code == 201  # b reads the count: 0, then its own 1
    admitted_by_a = [a.create(name, f"a{i}").status_code for i in range(5)]
    assert admitted_by_a == [201, 201, 201, 429, 429]  # a read 1, and fills up to 4
    # b has not read since: it still counts 1, so it admits up to 3 more. The overshoot is
    # what a admitted within b's refresh interval, 3.
    admitted_by_b = [b.create(name, f"b{i}").status_code for i in range(1, 6)]
    assert admitted_by_b == [201, 201, 201, 429, 429]
    assert len(a.stored(name)) == 4 + 3
    fake_clock.advance(2_000)  # both read the count again: 7, and refuse
    assert a.create(name, "late-a").status_code == 429
    assert b.create(name, "late-b").status_code == 429


# --- the SDK -------------------------------------------------------------------------------


def test_the_sdk_maps_both_429s_to_typed_errors() -> None:
    body = (
        b'{"error": {"code": "rate_limited", "message": "slow", "field": null, "retry_after_s": 3}}'
    )
    error = error_from_response(429, body, "Too Many Requests", "2")
    assert isinstance(error, RateLimited) and error.retry_after_s == 2  # the header first
    error = error_from_response(429, body)
    assert isinstance(error, RateLimited) and error.retry_after_s == 3  # then the body
    proxy = error_from_response(429, b"<html>slow down</html>", "Too Many Requests", "7")
    assert isinstance(proxy, RateLimited) and proxy.retry_after_s == 7
    full = b'{"error": {"code": "capacity_exceeded", "message": "full", "field": null}}'
    error = error_from_response(429, full)
    assert isinstance(error, CapacityExceeded) and error.code == "capacity_exceeded"
    assert not isinstance(error, RateLimited)


def test_batch_results_carry_the_typed_errors_per_item(api: Server) -> None:
    name, full = unique("app"), unique("app")
    register(api.store, name, create_rate_per_s=1, create_burst=1)
    register(api.store, full, max_pending=0)
    results = api.batch([(name, "a"), (name, "b"), (full, "c")])
    parsed = batch_results_from_json({"results": results}, 3)
    assert parsed[0].created
    assert isinstance(parsed[1].error, RateLimited) and parsed[1].error.retry_after_s == 1
    assert isinstance(parsed[2].error, CapacityExceeded) and parsed[2].status == 429


# --- service-wide --------------------------------------------------------------------------


@pytest.mark.mariadb
def test_four_processes_limiters_admit_the_rate_within_10_percent_over_30_s(
    mariadb_store: AlarmStore,
) -> None:
    """2 servers of 2 web processes each: four limiters on one database, with uneven demand
    (70/10/10/10 %) at three times the rate, through 30 s of fake time in 50 ms steps. In
    each step every limiter's requests come in a random phase among the others'."""
    rate, burst, seconds, step_ms = 200, 200, 30, 50
    limiters = [SharedRateLimiter(SqlTokenBuckets(mariadb_store)) for _ in range(4)]
    shares = [0.7, 0.1, 0.1, 0.1]
    name = unique("app")
    rng = random.Random(7)
    admitted = [0] * 4
    owed = [0.0] * 4  # demand not sent yet, per limiter
    now = NOW
    for _ in range(seconds * 1000 // step_ms):
        arrivals = []
        for index, share in enumerate(shares):
            owed[index] += 3 * rate * share * step_ms / 1000
            count = int(owed[index])
            owed[index] -= count
            phase = rng.random()
            arrivals += [((k + phase) / count, index) for k in range(count)]
        for _, index in sorted(arrivals):
            grant = limiters[index].acquire(name, "create", rate, burst, 1, now)
            admitted[index] += grant.granted
        now += step_ms
    total, ideal = sum(admitted), rate * seconds
    assert abs(total - ideal) <= 0.1 * ideal, (total, admitted)
    # The bounds of store/rate_buckets.py: at most burst + rate * T, and at least
    # rate * T - P * chunk (a chunk is 50 ms of the rate: 10 tokens).
    assert rate * seconds - 4 * 10 <= total <= burst + rate * seconds, (total, admitted)
    assert all(count > 0 for count in admitted), admitted


def test_concurrent_first_takes_of_a_bucket_create_it_once_without_a_deadlock(
    mariadb_store: AlarmStore,
) -> None:
    """Eight takes released together find no bucket: creating it inside the locking read's
    transaction deadlocked such takes on each other's gap lock (a 503 under a first burst)."""
    buckets = SqlTokenBuckets(mariadb_store)
    threads, rounds = 8, 10
    barrier = threading.Barrier(threads)
    names = [unique("app") for _ in range(rounds)]

    def takes(_thread: int) -> list[int]:
        granted = []
        for name in names:
            barrier.wait(10)
            granted.append(buckets.take(name, "create", 5, 4, 1, NOW).granted)
        return granted

    with ThreadPoolExecutor(threads) as pool:
        per_thread = list(pool.map(takes, range(threads)))
    per_bucket = [sum(granted[i] for granted in per_thread) for i in range(rounds)]
    assert per_bucket == [4] * rounds  # each bucket created full once: its burst, no more


@pytest.mark.process
@pytest.mark.mariadb
def test_two_servers_of_two_web_processes_admit_at_most_burst_plus_rate_times_t(
    tmp_path: Any,
) -> None:
    rate, burst, hammer_s = 20, 20, 3.0
    name = unique("app")
    with mariadb_database() as url:
        db = open_database(url, pool_size=1)
        register(AlarmStore(db), name, create_rate_per_s=rate, create_burst=burst)
        db.dispose()
        env = {
            "CLOCK_DATABASE_URL": url,
            "CLOCK_RUN_ENGINE": "false",
            "CLOCK_WEB_PROCESSES": "2",
            "CLOCK_SHUTDOWN_TIMEOUT_S": "3",
        }
        servers = [ServerProcess(env, tmp_path / f"server-{i}.log") for i in range(2)]
        failures: list[BaseException] = []

        def start(process: ServerProcess) -> None:
            try:
                process.start()
            except BaseException as error:
                failures.append(error)

        starters = [threading.Thread(target=start, args=(s,)) for s in servers]
        try:
            for starter in starters:
                starter.start()
            for starter in starters:
                starter.join(30)
            assert not failures, failures
            statuses: Counter[int] = Counter()
            retry_after: set[str] = set()
            lock = threading.Lock()
            started = time.monotonic()
            deadline = started + hammer_s

            def hammer(worker: int) -> None:
                sent = 0
                while time.monotonic() < deadline:
                    target = servers[(worker + sent) % 2]
                    sent += 1
                    # A new connection each time, so that they spread over the web processes.
                    response = requests.post(
                        target.base_url + "/v1/alarms",
                        json={
                            "application": name,
                            "business_id": f"w{worker}-{sent}",
                            "payload": "p",
                            "delay_ms": 60_000,
                        },
                        timeout=5,
                    )
                    with lock:
                        statuses[response.status_code] += 1
                        if response.status_code == 429:
                            retry_after.add(response.headers["Retry-After"])

            workers = [threading.Thread(target=hammer, args=(i,)) for i in range(8)]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join(10)
            elapsed_s = time.monotonic() - started
            client = ClockClient(servers[0].base_url, retries=0)
            with client, pytest.raises(RateLimited) as refused:
                for i in range(burst + 5):
                    client.create(name, f"sdk-{i}", "p", delay=60)
            assert refused.value.retry_after_s is not None and refused.value.retry_after_s >= 1
        finally:
            for s in servers:
                s.ensure_stopped()
        admitted = statuses[201]
        assert set(statuses) <= {201, 429}, statuses
        assert statuses[429] > admitted, statuses  # the demand was well over the rate
        assert retry_after == {"1"}
        bound = burst + rate * elapsed_s
        print(f"admitted {admitted} in {elapsed_s:.2f} s; bound {bound:.0f}; {dict(statuses)}")
        assert admitted <= bound
        assert admitted >= 0.8 * bound - 4, (admitted, bound)


def test_patch_and_count_are_limited_at_the_creation_rate_in_a_bucket_of_their_own(
    api: Server,
) -> None:
    """Changes were never limited: an application over its rate could still PATCH and count
    without end. They now take create_rate_per_s's tokens from a bucket of their own."""
    name = unique("app")
    register(api.store, name, create_rate_per_s=2, create_burst=3)
    assert api.create(name, "a", ring_after_count=1_000).status_code == 201
    url = f"/v1/alarms/{name}/a"
    answers = [api.client.patch(url, json={"delay_ms": i}).status_code for i in range(1, 3)]
    answers.append(api.client.post(url + "/count", json={}).status_code)
    assert answers == [200, 200, 200]
    before = api.store.get(name, "a")
    for refused in (api.client.patch(url, json={"delay_ms": 9}), api.client.post(url + "/count")):
        assert refused.status_code == 429 and refused.headers["Retry-After"] == "1"
        error = error_of(refused)
        assert error["code"] == "rate_limited" and error["retry_after_s"] == 1
        assert "changes/s" in error["message"] and "create_rate_per_s" in error["message"]
    assert api.store.get(name, "a") == before  # nothing changed by the refused ones
    assert api.create(name, "b").status_code == 201  # creates keep their own bucket
    api.clock.advance(500)
    assert api.client.post(url + "/count", json={}).status_code == 200
    other = unique("app")  # no limits: changes as before
    assert api.create(other, "x").status_code == 201
    for i in range(20):
        assert api.client.patch(f"/v1/alarms/{other}/x", json={"delay_ms": i}).status_code == 200
