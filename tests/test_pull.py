"""The pull channel end to end: alarms handed off by the engine (on the fake clock), leased
and acked through the API and the store. On SQLite and MariaDB."""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any

import orjson
import pytest
from sqlalchemy import delete

from clock_server.api.long_polls import LongPollSlots
from clock_server.engine.maintenance import Maintenance
from clock_server.errors import RateLimited
from clock_server.minute_stats import minute_of
from clock_server.model import ApplicationPolicy, NewAlarm
from clock_server.store.alarms import AlarmStore
from clock_server.store.dead_letters import SqlDeadLetterOutbox
from clock_server.store.pull_requeue import SqlPullRequeue
from clock_server.store.pulls import NOT_ACKED, RetryLimits, SqlPullQueue
from clock_server.store.schema import dead_letter_table
from clock_server.testing import SettableClock
from tests.api_support import NOW
from tests.pull_harness import ACK, ADMIN, APP, JOBS, JOBS_READ, OTHER, PULL, VISIBILITY_MS, Harness
from tests.support import eventually, unique


@pytest.fixture
def harness(store: AlarmStore, fake_clock: SettableClock) -> Harness:
    return Harness(store, fake_clock)


def test_a_message_is_never_handed_out_before_its_target(harness: Harness):
    h = harness
    alarm_id = h.create("a", NOW + 5_000)
    h.clock.set(NOW + 4_999)
    h.step()
    assert h.pulled() == []
    assert h.alarm("a")["status"] == "pending"

    h.clock.set(NOW + 5_000)
    h.step()
    assert h.alarm("a")["status"] == "delivering"
    h.clock.set(NOW + 5_010)
    [message] = h.pulled(max=5)
    assert message == {
        "id": str(alarm_id),
        "attempt": 1,
        "leased_until": NOW + 5_010 + VISIBILITY_MS,
        "message": {"id": alarm_id, "application": APP, "business_id": "a", "payload": "p-a",
                    "target_ring_at": NOW + 5_000, "attempt": 1, "published_at": NOW + 5_010},
    }  # fmt: skip
    alarm = h.alarm("a")
    assert (alarm["status"], alarm["next_try_time"]) == ("delivering", message["leased_until"])
    assert (alarm["retry_times"], alarm["rung_at"]) == (1, None)
    assert h.publisher.published == []  # never to RabbitMQ
    assert h.metric("clock_pull_messages_leased_total") == 1


def test_a_lease_hides_a_message_from_other_pulls(harness: Harness):
    h = harness
    first, second = h.create("a", NOW + 1_000), h.create("b", NOW + 2_000)
    h.clock.set(NOW + 2_000)
    h.step()
    assert [m["id"] for m in h.pulled(max=1)] == [str(first)]  # earliest ready first
    assert [m["id"] for m in h.pulled(max=10)] == [str(second)]
    assert h.pulled(max=10) == []
    h.clock.set(NOW + 2_000 + VISIBILITY_MS - 1)
    assert h.pulled(max=10) == []


def test_an_unacked_message_comes_back_after_its_lease_with_the_next_attempt(harness: Harness):
    h = harness
    alarm_id = h.create("a", NOW + 1_000)
    h.clock.set(NOW + 1_000)
    h.step()
    [first] = h.pulled()
    h.clock.set(first["leased_until"])
    [again] = h.pulled()
    assert (again["id"], again["attempt"], again["message"]["attempt"]) == (str(alarm_id), 2, 2)
    assert again["leased_until"] == first["leased_until"] + VISIBILITY_MS
    assert h.alarm("a")["retry_times"] == 2
    assert h.events("a")[1:] == [
        {"at": first["leased_until"], "kind": "attempt_failed", "actor": "clock",
         "detail": {"attempt": 1, "error": NOT_ACKED, "retry_at": first["leased_until"]}},
    ]  # fmt: skip


def test_a_message_unacked_past_its_retries_is_dead_with_a_dead_letter(harness: Harness):
    h = harness  # retry_max 2: three leases
    key = unique("dead-")
    alarm_id = h.create(key, NOW + 1_000)
    h.clock.set(NOW + 1_000)
    h.step()
    ends = []
    for attempt in (1, 2, 3):
        [message] = h.pulled()
        assert message["attempt"] == attempt
        ends.append(message["leased_until"])
        h.clock.set(message["leased_until"])
    assert h.pulled() == []
    alarm = h.alarm(key)
    assert (alarm["status"], alarm["next_try_time"], alarm["retry_times"]) == ("dead", ends[2], 3)
    assert [(e["kind"], e["detail"]) for e in h.events(key)[1:]] == [
        ("attempt_failed", {"attempt": 1, "error": NOT_ACKED, "retry_at": ends[0]}),
        ("attempt_failed", {"attempt": 2, "error": NOT_ACKED, "retry_at": ends[1]}),
        ("attempt_failed", {"attempt": 3, "error": NOT_ACKED}),
        ("dead", {"attempts": 3, "error": NOT_ACKED}),
    ]
    letters = [
        letter
        for letter in SqlDeadLetterOutbox(h.store).next_letters(10_000)
        if (letter.application, letter.business_id) == (APP, key)
    ]
    assert [(d.alarm_id, d.attempts, d.error, d.died_at) for d in letters] == [
        (alarm_id, 3, NOT_ACKED, ends[2])
    ]
    assert h.metric("clock_alarms_dead_total") == 1
    # The per-minute statistics: handed to pullers once (rung); each lease that ended
    # unacked is a failed attempt in the minute a pull found it, the last one dead.
    counted = h.metrics.minutes.take()
    assert counted[minute_of(NOW + 1_000), APP].rung == 1
    assert sum(counts.failed for counts in counted.values()) == 3
    for end in ends:
        failed = sum(1 for at in ends if minute_of(at) == minute_of(end))
        assert counted[minute_of(end), APP].failed == failed
    with h.store.db.begin() as conn:
        conn.execute(delete(dead_letter_table).where(dead_letter_table.c.business_id == key))


def test_a_message_is_never_handed_out_after_its_cutoff(harness: Harness):
    h = harness
    h.create("late", NOW + 1_000, latest_ring_at=NOW + 1_000 + VISIBILITY_MS)
    h.create("never", NOW + 1_000, latest_ring_at=NOW + 1_500)
    h.clock.set(NOW + 1_000)
    h.step()
    [message] = h.pulled(max=1)  # "late": its lease ends past its cutoff
    assert message["message"]["business_id"] == "late"
    h.clock.set(message["leased_until"] + 1)
    assert h.pulled() == []
    for key, cutoff, attempts in (("late", NOW + 1_000 + VISIBILITY_MS, 1),
                                  ("never", NOW + 1_500, 0)):  # fmt: skip
        alarm = h.alarm(key)
        assert (alarm["status"], alarm["next_try_time"]) == ("expired", message["leased_until"] + 1)
        assert [(e["kind"], e["detail"]) for e in h.events(key)[1:]] == [
            ("expired", {"latest_ring_at": cutoff, "attempts": attempts})
        ]
    assert h.metric("clock_alarms_expired_total") == 2


def test_an_ack_makes_the_alarm_rung_once(harness: Harness):
    h = harness
    alarm_id = h.create("a", NOW + 1_000)
    h.clock.set(NOW + 1_000)
    h.step()
    [message] = h.pulled()
    h.clock.set(NOW + 1_200)
    answer = h.ack([message["id"], "999999999999", "9999999999999999999", message["id"]])
    assert answer.status_code == 200
    assert answer.get_json() == {
        "acked": [str(alarm_id)],
        "not_acked": ["999999999999", "9999999999999999999"],
    }
    alarm = h.alarm("a")
    assert (alarm["status"], alarm["rung_at"], alarm["next_try_time"]) == (
        "rung", NOW + 1_200, NOW + 1_200,
    )  # fmt: skip
    assert alarm["retry_times"] == 0  # as after a ring on the first attempt
    assert h.events("a")[-1] == {"at": NOW + 1_200, "kind": "rung", "actor": "clock",
                                 "detail": {"attempt": 1}}  # fmt: skip
    assert h.ack([message["id"]]).get_json() == {"acked": [], "not_acked": [str(alarm_id)]}
    assert h.metric("clock_alarms_rung_total") == 1
    h.clock.set(message["leased_until"])
    assert h.pulled() == []


def test_a_late_ack_still_counts_and_the_attempt_is_the_lease_acked(harness: Harness):
    h = harness
    h.create("a", NOW + 1_000)
    h.clock.set(NOW + 1_000)
    h.step()
    [first] = h.pulled()
    h.clock.set(first["leased_until"])
    [second] = h.pulled()
    h.clock.set(second["leased_until"] + 1)  # this lease has ended too, unacked
    assert h.ack([second["id"]]).get_json()["acked"] == [second["id"]]
    alarm = h.alarm("a")
    assert (alarm["status"], alarm["retry_times"]) == ("rung", 1)
    assert h.events("a")[-1]["detail"] == {"attempt": 2}


def test_an_ack_leaves_other_alarms_alone(harness: Harness):
    h = harness
    pending = h.create("pending", NOW + 60_000)
    other = h.call("POST", "/v1/alarms", OTHER, json={
        "application": "other", "business_id": "x", "payload": "p", "target_ring_at": NOW + 1_000,
    })  # fmt: skip
    h.clock.set(NOW + 1_000)
    h.step()
    other_id = other.get_json()["id"]
    assert h.ack([str(pending), str(other_id)]).get_json()["acked"] == []
    assert h.alarm("pending")["status"] == "pending"
    assert h.call("GET", "/v1/alarms/other/x", OTHER).get_json()["status"] == "rung"


def test_a_count_triggered_alarm_says_what_made_it_ring(harness: Harness):
    h = harness
    h.create("c", NOW + 60_000, ring_after_count=2)
    response = h.call("POST", f"/v1/alarms/{APP}/c/count", json={"by": 2})
    assert response.get_json()["reached"] is True
    h.step()
    [message] = h.pulled()
    assert (message["message"]["trigger"], message["message"]["count"]) == ("count", 2)


def test_messages_left_by_a_move_to_another_channel_ring_there(harness: Harness):
    h = harness
    leased_id = h.create("leased", NOW + 1_000)
    ready_id = h.create("ready", NOW + 1_005)
    waiting_id = h.create("waiting", NOW + 30_000)
    h.clock.set(NOW + 1_000)
    h.step()
    [leased] = h.pulled()
    h.clock.set(NOW + 1_005)
    h.step()
    assert h.alarm("ready")["status"] == "delivering"

    moved = h.call("PATCH", f"/v1/applications/{APP}", ADMIN, json={"channel": "amqp"})
    assert moved.status_code == 200, moved.get_json()
    assert h.pull().status_code == 409
    h.clock.set(NOW + 2_000)
    maintenance = Maintenance(h.store, h.clock, h.metrics, requeue=SqlPullRequeue(h.store))
    assert maintenance.requeue_left_pull() == {APP: 2}
    assert maintenance.requeue_left_pull() == {}
    ready, late = h.alarm("ready"), h.alarm("leased")
    assert (ready["status"], ready["next_try_time"], ready["retry_times"]) == (
        "pending", NOW + 2_000, 0,
    )  # fmt: skip
    # The lease still running keeps its puller's time; its attempt counts as failed.
    assert (late["status"], late["next_try_time"], late["retry_times"]) == (
        "pending", leased["leased_until"], 1,
    )  # fmt: skip
    assert h.events("ready")[-1] == {
        "at": NOW + 2_000, "kind": "requeued", "actor": "clock",
        "detail": {"from_channel": "pull", "due_at": NOW + 2_000},
    }  # fmt: skip
    assert h.ack([leased["id"]]).get_json()["acked"] == []

    h.engine = h.make_engine()  # reads the registry as it is now
    h.step()
    assert [m.message_id for m in h.publisher.published] == [str(ready_id)]
    h.clock.set(leased["leased_until"] - 1)
    h.step()
    assert len(h.publisher.published) == 1
    h.clock.set(leased["leased_until"])
    h.step()
    published = {m.message_id: orjson.loads(m.body) for m in h.publisher.published}
    assert list(published) == [str(ready_id), str(leased_id)]
    assert published[str(leased_id)]["attempt"] == 2
    assert (h.alarm("ready")["status"], h.alarm("leased")["status"]) == ("rung", "rung")
    assert h.alarm("waiting")["status"] == "pending"  # never handed to pullers: untouched
    assert waiting_id not in {int(m.message_id) for m in h.publisher.published}


def test_long_polls_wait_a_few_at_a_time_and_the_next_is_told_to_come_back(
    harness: Harness,
):
    h = harness
    # As with CLOCK_HTTP_THREADS=8: two wait at once, one of each application.
    slots = h.app.extensions["clock"].long_polls = LongPollSlots(8)
    h.registry.put(ApplicationPolicy(name="other", channel="pull"), h.clock.now_ms())
    answers: list[Any] = []
    first = h.app.test_client()
    headers = {"Authorization": f"Bearer {JOBS}"}
    url = f"/v1/applications/{APP}/pull"
    waiter = threading.Thread(
        target=lambda: answers.append(first.post(url, json={"wait_s": 1.5}, headers=headers))
    )
    waiter.start()
    eventually(lambda: slots.in_use, message="the first pull never waited")

    refused = h.pull(wait_s=1)
    assert refused.status_code == 429 and refused.headers["Retry-After"] == "1"
    error = refused.get_json()["error"]
    assert (error["code"], error["field"]) == ("rate_limited", "wait_s")
    assert h.pull(wait_s=0).status_code == 200  # a pull that does not wait is never refused
    other = h.pull(token=OTHER, application="other", wait_s=0.05)
    assert other.status_code == 200 and other.get_json() == {"messages": []}

    waiter.join(5)
    assert [a.status_code for a in answers] == [200] and slots.in_use == 0
    assert h.pull(wait_s=0.05).status_code == 200


def test_pull_needs_the_pull_channel(harness: Harness):
    h = harness
    response = h.pull(application="other")
    assert response.status_code == 403  # the jobs token does not cover it
    response = h.pull(token=OTHER, application="other")
    assert response.status_code == 409
    error = response.get_json()["error"]
    assert (error["code"], error["status"]) == ("conflict", "amqp")
    assert "amqp channel" in error["message"]


def test_a_token_of_another_application_or_one_that_may_only_read_is_refused(harness: Harness):
    h = harness
    alarm_id = h.create("a", NOW + 1_000)
    h.clock.set(NOW + 1_000)
    h.step()
    for token in (OTHER, JOBS_READ):
        assert h.pull(token=token).status_code == 403
        assert h.ack([str(alarm_id)], token=token).status_code == 403
    assert h.pull(token=None).status_code == 401
    assert h.alarm("a")["retry_times"] == 0
    assert [m["id"] for m in h.pulled(token=ADMIN)] == [str(alarm_id)]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"max": 0}, "max"),
        ({"max": 101}, "max"),
        ({"max": "5"}, "max"),
        ({"max": True}, "max"),
        ({"max": 2.5}, "max"),
        ({"wait_s": -1}, "wait_s"),
        ({"wait_s": 20.5}, "wait_s"),
        ({"wait_s": "1"}, "wait_s"),
        ({"limit": 5}, "limit"),
    ],
)
def test_a_bad_pull_is_a_400_naming_the_field(harness: Harness, body: dict[str, Any], field: str):
    response = harness.pull(**body)
    assert response.status_code == 400
    assert response.get_json()["error"]["field"] == field
    with pytest.raises(AssertionError):
        harness.check.request(PULL, "POST", body)


@pytest.mark.parametrize(
    ("ids", "field"),
    [
        ([], "ids"),
        (["1"] * 1_001, "ids"),
        (["12a"], "ids.0"),
        (["1", ""], "ids.1"),
        (["1", 2], "ids.1"),
        (["12345678901234567890"], "ids.0"),
        (["١٢"], "ids.0"),
        ("1", "ids"),
        (None, "ids"),
    ],
)
def test_a_bad_ack_is_a_400_naming_the_field(harness: Harness, ids: Any, field: str):
    response = harness.ack(ids)
    assert response.status_code == 400
    assert response.get_json()["error"]["field"] == field
    with pytest.raises(AssertionError):
        harness.check.request(ACK, "POST", {"ids": ids})


def test_the_document_takes_the_bodies_the_routes_take(harness: Harness):
    for body in ({}, {"max": 1, "wait_s": 0}, {"max": 100, "wait_s": 20}, {"wait_s": 0.5}):
        harness.check.request(PULL, "POST", body)
        assert harness.pull(**body | {"wait_s": 0}).status_code == 200
    for ids in (["1"], ["9" * 19] * 1_000):
        harness.check.request(ACK, "POST", {"ids": ids})
        assert harness.ack(ids).status_code == 200
    response = harness.call(
        "POST", f"/v1/applications/{APP}/pull", data=b"not json", content_type="application/json"
    )
    assert (response.status_code, response.get_json()["error"]["code"]) == (400, "validation_error")
    assert harness.call("POST", f"/v1/applications/{APP}/pull").status_code == 200  # no body
    assert harness.call("POST", "/v1/applications/bad%20app/pull").status_code == 400


def test_a_long_poll_answers_as_soon_as_a_message_is_ready(harness: Harness):
    h = harness
    alarm_id = h.create("a", NOW + 1_000)
    h.step()

    def ring_soon() -> None:
        eventually(lambda: h.app.extensions["clock"].long_polls.in_use, message="no pull waits")
        h.clock.set(NOW + 1_000)
        h.step()

    ringer = threading.Thread(target=ring_soon)
    started = time.monotonic()
    ringer.start()
    try:
        messages = h.pulled(wait_s=5)
    finally:
        ringer.join(10)
    waited = time.monotonic() - started
    assert [m["id"] for m in messages] == [str(alarm_id)]
    assert waited < 2.5  # well before its wait of 5 s ends


def test_a_long_poll_answers_empty_once_its_wait_has_passed(harness: Harness):
    started = time.monotonic()
    assert harness.pulled(wait_s=0.3) == []
    # The lower bound is the promise: the wait is in real time, as long as the pull asked.
    assert 0.3 <= time.monotonic() - started < 2.0


@pytest.mark.mariadb
def test_concurrent_pullers_never_lease_the_same_message(
    mariadb_store: AlarmStore, fake_clock: SettableClock
):
    h = Harness(mariadb_store, fake_clock)
    alarms = [NewAlarm(APP, f"m{i}", "p", NOW + 1_000, None) for i in range(200)]
    mariadb_store.create_many(alarms, NOW)
    h.clock.set(NOW + 1_000)
    h.step()
    queue = SqlPullQueue(mariadb_store, dead_letters=False)
    rounds = 200 // 14 + 2  # each round both lease 7 at once, in lockstep: they overlap
    in_step = threading.Barrier(2)
    got: list[list[int]] = [[], []]

    def puller(mine: list[int]) -> None:
        for _ in range(rounds):
            in_step.wait()
            leased = queue.lease(APP, 7, NOW + 1_000, VISIBILITY_MS, RetryLimits(2)).messages
            mine.extend(message.alarm_id for message in leased)

    threads = [threading.Thread(target=puller, args=(mine,)) for mine in got]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    every = got[0] + got[1]
    assert len(every) == len(set(every)) == 200
    assert got[0] and got[1]


def test_with_the_broker_out_of_reach_pull_alarms_still_ring_and_amqp_ones_wait(
    harness: Harness,
):
    """One batch with both channels' alarms: the broker's outage holds the AMQP alarm, pending
    with no attempt spent, and hands the pull alarm to pullers at its moment as usual."""
    h = harness
    h.publisher.healthy = False
    pulled_id = h.create("by-pull", NOW + 1_000)
    body = {"application": "orders", "business_id": "by-amqp", "payload": "p",
            "target_ring_at": NOW + 1_000}  # fmt: skip
    created = h.call("POST", "/v1/alarms", ADMIN, json=body)
    assert created.status_code == 201, created.get_json()
    h.clock.set(NOW + 1_000)
    h.step()
    assert [m["id"] for m in h.pulled()] == [str(pulled_id)]
    waiting = h.call("GET", "/v1/alarms/orders/by-amqp", ADMIN).get_json()
    assert (waiting["status"], waiting["retry_times"]) == ("pending", 0)
    assert h.publisher.published == []
    h.publisher.healthy = True
    h.clock.set(NOW + 2_000)
    h.step()
    assert [orjson.loads(m.body)["attempt"] for m in h.publisher.published] == [1]
    rung = h.call("GET", "/v1/alarms/orders/by-amqp", ADMIN).get_json()
    assert (rung["status"], rung["retry_times"]) == ("rung", 0)


def test_two_applications_cannot_take_every_waiting_slot():
    """With 32 threads 8 pulls may wait: at most 2 of one application, and the last 2 free
    slots only for an application with none waiting. Before, two applications took all 8."""
    slots = LongPollSlots(32)
    held = contextlib.ExitStack()
    taken: dict[str, int] = {}
    with held:
        for application in ("greedy-1", "greedy-2", "greedy-3", "late-1", "late-2", "late-3"):
            taken[application] = 0
            for _ in range(8):
                try:
                    held.enter_context(slots.waiting(application))
                except RateLimited as refused:
                    assert refused.retry_after_s == 1
                    break
                taken[application] += 1
        assert taken == {"greedy-1": 2, "greedy-2": 2, "greedy-3": 2, "late-1": 1, "late-2": 1,
                         "late-3": 0}  # fmt: skip
        assert slots.in_use == slots.total == 8
    assert slots.in_use == 0
    with slots.waiting("greedy-1"):  # every slot was given back
        assert slots.in_use == 1


def test_a_pull_leases_only_what_fits_the_byte_cap_and_leaves_the_rest_ready(harness: Harness):
    """A pull of 100 messages with 64 KiB payloads of control characters was a 38 MiB
    answer. It now leases what fits CLOCK_PAGE_MAX_BYTES; the rest stay ready, unleased."""
    h = harness
    ids = {h.create(f"big-{i}", NOW + 1_000, payload="\x01" * 65_536) for i in range(25)}
    h.clock.set(NOW + 1_000)
    h.step()
    got: list[str] = []
    sizes: list[int] = []
    while len(got) < len(ids):
        response = h.pull(max=100)
        assert response.status_code == 200
        sizes.append(len(response.get_data()))
        messages = response.get_json()["messages"]
        assert messages and all(m["attempt"] == 1 for m in messages)
        got += [m["id"] for m in messages]
    assert sorted(got) == sorted(str(i) for i in ids)  # each once, on its first lease
    assert max(sizes) <= h.settings.page_max_bytes and len(sizes) == 3  # 10, 10 and 5
