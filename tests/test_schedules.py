"""Recurring schedules through the API and the engine, on SQLite and MariaDB, on the fake
clock: each occurrence rings like an alarm, once, never early; edits touch only occurrences
not yet due; pausing and deleting stop them; missed ones follow `catch_up`; bad input is a
400 that names the field."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import update

from clock_client import ClockClient, ValidationError
from clock_server.api.schedule_validation import schedule_from
from clock_server.occurrences import MISSED_AFTER_MS, Schedule, occurrence_key
from clock_server.store.alarms import AlarmStore
from clock_server.store.schedules import SqlSchedules
from clock_server.store.schema import schedule_table
from clock_server.testing import SettableClock
from tests.harness import ServiceHarness
from tests.support import metric_value

MIN = 60_000
ONE = "/v1/schedules/orders/settle"


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


@pytest.fixture
def service(store: AlarmStore, fake_clock: SettableClock) -> ServiceHarness:
    fake_clock.set(ms("2026-12-01 10:00:00"))
    return ServiceHarness(store, fake_clock, tokens="")


def put(service: ServiceHarness, path: str = ONE, **body: Any) -> Any:
    return service.call("PUT", path, json={"payload": "settle them", **body})


def plan(service: ServiceHarness) -> int:
    planner = service.runtime.maintenance.planner
    assert planner is not None
    done = planner.run()
    assert done is not None
    return done.made


def rung(service: ServiceHarness) -> list[dict[str, Any]]:
    return [json.loads(m.body) for m in service.publisher.published_for("orders")]


def rung_keys(service: ServiceHarness) -> list[str]:
    return [message["business_id"] for message in rung(service)]


def at(service: ServiceHarness, when_ms: int) -> None:
    """Move the clock to `when_ms`: the planner runs, then the engine."""
    service.clock.set(when_ms)
    plan(service)
    service.step()


def occurrence_rows(service: ServiceHarness) -> list[Any]:
    listed = service.call("GET", "/v1/alarms?application=orders&limit=500").get_json()
    return [a for a in listed["alarms"] if a["business_id"].startswith("~schedule/settle/")]


def test_each_occurrence_rings_at_its_time_once_and_never_early(service: ServiceHarness):
    created = put(service, cron="*/5 * * * *")
    assert created.status_code == 201, created.get_json()
    schedule = created.get_json()
    first = ms("2026-12-01 10:05:00")
    assert (schedule["next_at"], schedule["timezone"], schedule["catch_up"]) == (
        first, "UTC", "skip",
    )  # fmt: skip
    assert service.call("GET", ONE).get_json() == schedule

    at(service, first - 20_000)
    assert [a["target_ring_at"] for a in occurrence_rows(service)] == [first]  # made ahead
    at(service, first - 1)
    assert rung_keys(service) == []  # never early
    at(service, first)
    assert rung_keys(service) == [occurrence_key("settle", first)]
    [message] = rung(service)
    assert message["payload"] == "settle them"
    for _ in range(3):  # the planner again and again, as after a restart or a takeover
        plan(service)
    at(service, first + 5 * MIN)
    assert rung_keys(service) == [occurrence_key("settle", first),
                                  occurrence_key("settle", first + 5 * MIN)]  # fmt: skip
    stored = {a["business_id"]: a["status"] for a in occurrence_rows(service)}
    assert list(stored.values()).count("rung") == 2


def test_an_edit_changes_only_the_occurrences_not_yet_due(service: ServiceHarness):
    put(service, every_s=60, start_at=ms("2026-12-01 10:00:00"))
    at(service, ms("2026-12-01 10:00:30"))  # 10:01 is made ahead, not due yet
    assert [a["payload"] for a in occurrence_rows(service)] == ["settle them"]
    changed = service.call("PATCH", ONE, json={"payload": "the new one"})
    assert changed.status_code == 200, changed.get_json()
    at(service, ms("2026-12-01 10:01:00"))
    [message] = rung(service)
    assert message["payload"] == "the new one"
    assert message["business_id"] == occurrence_key("settle", ms("2026-12-01 10:01:00"))


def test_an_edit_while_an_occurrence_is_due_does_not_ring_it_twice(service: ServiceHarness):
    put(service, every_s=60, start_at=ms("2026-12-01 10:00:00"))
    at(service, ms("2026-12-01 10:01:00"))
    assert len(rung_keys(service)) == 1
    # Replaced with a calendar that has 10:01 too: the occurrence rung stays as it was.
    put(service, every_s=30, start_at=ms("2026-12-01 10:00:00"))
    for when in ("10:01:00", "10:01:30", "10:02:00"):
        at(service, ms(f"2026-12-01 {when}"))
    assert rung_keys(service) == [
        occurrence_key("settle", ms(f"2026-12-01 {when}"))
        for when in ("10:01:00", "10:01:30", "10:02:00")
    ]


def test_pause_stops_resume_goes_on_from_now_and_delete_stops(service: ServiceHarness):
    put(service, cron="* * * * *")
    at(service, ms("2026-12-01 10:00:30"))
    paused = service.call("POST", f"{ONE}/pause").get_json()
    assert paused["paused"] and paused["next_at"] is None
    assert occurrence_rows(service) == []  # the one made ahead is gone
    at(service, ms("2026-12-01 10:03:00"))
    assert rung_keys(service) == []
    resumed = service.call("POST", f"{ONE}/resume").get_json()
    # what fell due while it was paused does not ring
    assert resumed["next_at"] == ms("2026-12-01 10:04:00")
    at(service, ms("2026-12-01 10:04:00"))
    assert rung_keys(service) == [occurrence_key("settle", ms("2026-12-01 10:04:00"))]
    at(service, ms("2026-12-01 10:04:30"))
    assert service.call("DELETE", ONE).status_code == 200
    at(service, ms("2026-12-01 10:06:00"))
    assert len(rung_keys(service)) == 1
    assert service.call("GET", ONE).status_code == 404


@pytest.mark.parametrize(
    ("catch_up", "late_keys"),
    [("skip", []), ("latest", ["10:08:00"]), ("all", ["10:06:00", "10:07:00", "10:08:00"])],
)
def test_occurrences_missed_while_clock_was_down_follow_catch_up(
    service: ServiceHarness, catch_up: str, late_keys: list[str]
):
    put(service, cron="* * * * *", catch_up=catch_up, catch_up_max=3)
    at(service, ms("2026-12-01 10:00:00"))  # the planner makes 10:01 (within its look-ahead)
    made_before = {a["business_id"] for a in occurrence_rows(service)}
    down_until = ms("2026-12-01 10:09:00") + MISSED_AFTER_MS // 2
    at(service, down_until)
    made = {a["business_id"] for a in occurrence_rows(service)} - made_before
    expected = {occurrence_key("settle", ms(f"2026-12-01 {t}")) for t in late_keys}
    # 10:09 was due only 30 s ago: made, and rung late, whatever catch_up says.
    expected.add(occurrence_key("settle", ms("2026-12-01 10:09:00")))
    expected.add(occurrence_key("settle", ms("2026-12-01 10:10:00")))  # ahead
    assert made == expected


def test_spring_forward_and_fall_back_in_berlin(service: ServiceHarness):
    service.clock.set(ms("2026-03-28 12:00:00"))
    put(service, cron="30 2 * * *", timezone="Europe/Berlin")
    preview = service.call("GET", f"{ONE}/next?count=2").get_json()["occurrences"]
    assert [(o["utc"], o["local"]) for o in preview] == [
        ("2026-03-29T01:00:00.000Z", "2026-03-29T03:00:00.000+02:00"),  # at the jump
        ("2026-03-30T00:30:00.000Z", "2026-03-30T02:30:00.000+02:00"),
    ]
    at(service, ms("2026-03-29 01:00:00") - 1)
    assert rung_keys(service) == []
    at(service, ms("2026-03-29 01:00:00"))
    assert rung_keys(service) == ["~schedule/settle/2026-03-29T01:00:00.000Z"]
    service.clock.set(ms("2026-10-24 12:00:00"))
    put(service, cron="30 2 * * *", timezone="Europe/Berlin")
    preview = service.call("GET", f"{ONE}/next?count=2").get_json()["occurrences"]
    assert [o["local"] for o in preview] == [  # the repeated hour: once, its first pass
        "2026-10-25T02:30:00.000+02:00", "2026-10-26T02:30:00.000+01:00",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("zone", "cron", "start", "rings"),
    [
        # Berlin skips 02:00-03:00 CET on 2026-03-29: 02:30 rings once, at the jump.
        ("Europe/Berlin", "30 2 * * *", "2026-03-28 12:00:00",
         ["2026-03-29 01:00:00", "2026-03-30 00:30:00"]),
        # and repeats 02:00-03:00 on 2026-10-25: 02:30 rings once, at its first pass (CEST).
        ("Europe/Berlin", "30 2 * * *", "2026-10-24 12:00:00",
         ["2026-10-25 00:30:00", "2026-10-26 01:30:00"]),
        # New York skips 02:00-03:00 EST on 2026-03-08, and repeats 01:00-02:00 on 11-01.
        ("America/New_York", "30 2 * * *", "2026-03-07 12:00:00",
         ["2026-03-08 07:00:00", "2026-03-09 06:30:00"]),
        ("America/New_York", "30 1 * * *", "2026-10-31 12:00:00",
         ["2026-11-01 05:30:00", "2026-11-02 06:30:00"]),
        # Every 30 minutes rings in both passes of a repeated hour: every real half hour.
        ("Europe/Berlin", "*/30 * * * *", "2026-10-25 00:10:00",
         ["2026-10-25 00:30:00", "2026-10-25 01:00:00", "2026-10-25 01:30:00"]),
    ],
)  # fmt: skip
def test_clock_changes_ring_each_occurrence_once_at_its_time(
    service: ServiceHarness, zone: str, cron: str, start: str, rings: list[str]
):
    service.clock.set(ms(start))
    put(service, cron=cron, timezone=zone)
    for when in rings:
        at(service, ms(when) - 1)  # never early
        at(service, ms(when))
    expected = [f"~schedule/settle/{when.replace(' ', 'T')}.000Z" for when in rings]
    assert rung_keys(service) == expected


def test_the_29th_of_february_and_the_last_day_of_the_month(service: ServiceHarness):
    put(service, cron="0 0 29 2 *")
    assert service.call("GET", f"{ONE}/next?count=2").get_json()["occurrences"][1]["utc"] == (
        "2032-02-29T00:00:00.000Z"
    )
    put(service, cron="0 12 L * *")
    shown = service.call("GET", f"{ONE}/next?count=2").get_json()["occurrences"]
    assert [o["utc"] for o in shown] == ["2026-12-31T12:00:00.000Z", "2027-01-31T12:00:00.000Z"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"cron": "0 0 30 2 *"}, "cron"),  # can never fire
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "* * * * *", "every_s": 60}, "cron"),  # both
        ({}, "cron"),  # neither
        ({"cron": "* * * * *", "timezone": "Mars/Olympus"}, "timezone"),
        ({"cron": "* * * * *", "timezone": "../../etc/passwd"}, "timezone"),
        # Files of a machine's zoneinfo folder, not zones of the IANA database: another
        # server may not have them, or read them otherwise.
        ({"cron": "* * * * *", "timezone": "localtime"}, "timezone"),
        ({"cron": "* * * * *", "timezone": "posixrules"}, "timezone"),
        ({"cron": "* * * * *", "timezone": "right/UTC"}, "timezone"),
        ({"cron": "* * * * *", "timezone": "Factory"}, "timezone"),
        ({"every_s": 0}, "every_s"),  # below the minimum of 1 s
        ({"every_s": 1.5}, "every_s"),
        ({"cron": "* * * * *", "start_at": 2_000, "end_at": 1_000}, "end_at"),
        ({"cron": "* * * * *", "catch_up": "some"}, "catch_up"),
        ({"cron": "* * * * *", "catch_up_max": 0}, "catch_up_max"),
        ({"cron": "* * * * *", "cutoff_ms": -1}, "cutoff_ms"),
        ({"cron": "* * * * *", "surprise": 1}, "surprise"),
        ({"cron": "* * * * *", "payload": 7}, "payload"),
    ],
)
def test_bad_input_is_a_400_that_names_the_field_and_changes_nothing(
    service: ServiceHarness, body: dict[str, Any], field: str
):
    answer = service.call("PUT", ONE, json={"payload": "p", **body})
    assert answer.status_code == 400, answer.get_json()
    assert answer.get_json()["error"]["field"] == field, answer.get_json()
    assert service.call("GET", ONE).status_code == 404


def test_bad_keys_queries_and_patches(service: ServiceHarness):
    assert put(service, "/v1/schedules/orders/bad%20id", cron="* * * * *").status_code == 400
    assert service.call("GET", f"{ONE}/next").status_code == 404
    put(service, cron="* * * * *")
    for query in ("count=0", "count=101", "count=x", "count=1&count=2", "other=1"):
        assert service.call("GET", f"{ONE}/next?{query}").status_code == 400, query
    for patch, field in (({"every_s": 0}, "every_s"), ({"timezone": None}, "timezone"),
                         ({"cron": "0 0 31 4 *"}, "cron")):  # fmt: skip
        answer = service.call("PATCH", ONE, json=patch)
        assert (answer.status_code, answer.get_json()["error"]["field"]) == (400, field)
    assert service.call("GET", ONE).get_json()["cron"] == "* * * * *"
    assert service.call("GET", "/v1/schedules?cursor=nonsense").status_code == 400
    refused = service.call(
        "POST", "/v1/alarms",
        json={"application": "orders", "business_id": "~schedule/settle/x", "payload": "p",
              "delay_ms": 1000},
    )  # fmt: skip
    assert (refused.status_code, refused.get_json()["error"]["field"]) == (400, "business_id")


def test_schedules_are_listed_in_keyset_pages(service: ServiceHarness):
    for n in range(5):
        put(service, f"/v1/schedules/orders/s{n}", every_s=3600)
    put(service, "/v1/schedules/billing/s0", every_s=3600)
    first = service.call("GET", "/v1/schedules?application=orders&limit=2").get_json()
    assert [s["schedule_id"] for s in first["schedules"]] == ["s0", "s1"]
    second = service.call(
        "GET", f"/v1/schedules?application=orders&limit=2&cursor={first['next_cursor']}"
    ).get_json()
    assert [s["schedule_id"] for s in second["schedules"]] == ["s2", "s3"]
    every = service.call("GET", "/v1/schedules").get_json()
    assert len(every["schedules"]) == 6 and every["next_cursor"] is None


def test_an_occurrence_s_cutoff_expires_it(service: ServiceHarness):
    put(service, every_s=60, start_at=ms("2026-12-01 10:00:00"), cutoff_ms=5_000)
    service.call("PUT", "/v1/applications/orders", json={})  # registered: its own label
    at(service, ms("2026-12-01 10:00:30"))
    service.clock.set(ms("2026-12-01 10:01:10"))  # the engine was held up past the cutoff
    service.step()
    [row] = occurrence_rows(service)
    assert row["status"] == "expired" and row["latest_ring_at"] == ms("2026-12-01 10:01:05")


def test_the_sdk_makes_reads_previews_pauses_and_deletes_a_schedule(service: ServiceHarness):
    for base_url in service.serve():
        with ClockClient(base_url, retries=0) as clock:
            made = clock.schedule("orders", "weekly", "report", cron="0 9 * * MON",
                                  timezone="Europe/Berlin")  # fmt: skip
            assert (made.cron, made.timezone, made.next_at) == (
                "0 9 * * MON", "Europe/Berlin", ms("2026-12-07 08:00:00"),
            )  # fmt: skip
            assert clock.get_schedule("orders", "weekly") == made
            [first, second] = clock.next_occurrences("orders", "weekly", count=2)
            assert (first.utc, first.local) == (
                "2026-12-07T08:00:00.000Z", "2026-12-07T09:00:00.000+01:00",
            )  # fmt: skip
            assert second.at == ms("2026-12-14 08:00:00")
            assert clock.change_schedule("orders", "weekly", payload="the report").payload == (
                "the report"
            )
            assert clock.pause_schedule("orders", "weekly").paused
            assert not clock.resume_schedule("orders", "weekly").paused
            page = clock.schedules(application="orders")
            assert [s.schedule_id for s in page.schedules] == ["weekly"]
            assert page.next_cursor is None
            with pytest.raises(ValidationError) as refused:
                clock.schedule("orders", "never", "p", cron="0 0 30 2 *")
            assert refused.value.field == "cron"
            assert clock.delete_schedule("orders", "weekly").schedule_id == "weekly"


def test_a_schedule_sent_again_is_unchanged_and_keeps_its_anchor(service: ServiceHarness):
    first = put(service, every_s=10).get_json()
    made_at = first["next_at"]
    at(service, ms("2026-12-01 10:00:05"))
    again = put(service, every_s=10)  # a deploy script applying its schedules once more
    assert again.status_code == 200
    # The same start, and its occurrences made ahead are not made again.
    assert again.get_json() | {"next_at": None} == first | {"next_at": None}
    for second in (10, 20):
        at(service, ms(f"2026-12-01 10:00:{second}"))
    assert rung_keys(service) == [
        occurrence_key("settle", made_at), occurrence_key("settle", made_at + 10_000),
    ]  # fmt: skip
    answer = service.call("PATCH", ONE, json={})
    assert (answer.status_code, answer.get_json()["error"]["message"]) == (
        400, "give at least one field to change",
    )  # fmt: skip


def test_a_schedule_that_cannot_be_planned_does_not_stop_the_others(
    service: ServiceHarness, store: AlarmStore
):
    put(service, cron="* * * * *")
    put(service, "/v1/schedules/orders/broken", cron="* * * * *")
    # A calendar this server cannot read, as if another had stored it.
    with store.db.begin() as conn:
        conn.execute(
            update(schedule_table)
            .where(schedule_table.c.schedule_id == "broken")
            .values(timezone="Nowhere/Atlantis")
        )
    at(service, ms("2026-12-01 10:00:40"))
    at(service, ms("2026-12-01 10:01:00"))
    assert rung_keys(service) == [occurrence_key("settle", ms("2026-12-01 10:01:00"))]
    broken = service.call("GET", "/v1/schedules/orders/broken").get_json()
    assert broken["next_at"] > ms("2026-12-01 10:01:40")  # looked at again a minute later


@pytest.mark.mariadb
def test_two_creates_of_one_new_schedule_at_once_make_one(mariadb_store: AlarmStore):
    """Neither finds the row, both insert: the second becomes a change of the first's."""
    schedules = SqlSchedules(mariadb_store)
    now = ms("2026-12-01 10:00:00")
    wanted = schedule_from("orders", "race", {"cron": "* * * * *", "payload": "p"}, now, 1_000)
    raced = {"once": False}

    def first_insert_meanwhile(stored: Schedule | None) -> Schedule:
        if not raced["once"]:
            raced["once"] = True
            assert stored is None
            schedules_elsewhere = SqlSchedules(mariadb_store)
            with ThreadPoolExecutor(1) as other:  # another request, on its own connection
                other.submit(schedules_elsewhere.change, "orders", "race", now,
                             lambda _: replace(wanted, payload="first")).result()  # fmt: skip
        return wanted

    made, created = schedules.change("orders", "race", now, first_insert_meanwhile)
    assert not created and made.payload == "p" and made.version == 1
    assert schedules.get("orders", "race").payload == "p"


def test_occurrences_count_as_alarms_created(service: ServiceHarness):
    """In clock_alarms_created and the per-minute statistics, as the API's creates do."""
    put(service, cron="*/5 * * * *")
    metrics = service.runtime.maintenance.metrics
    labels = {"application": "orders"}
    before = metric_value(metrics, "clock_alarms_created_total", labels)
    metrics.minutes.take()  # what the API counted so far
    at(service, ms("2026-12-01 10:05:00") - 20_000)
    assert metric_value(metrics, "clock_alarms_created_total", labels) == before + 1
    created = {app: counts.created for (_, app), counts in metrics.minutes.take().items()}
    assert created == {"orders": 1}
