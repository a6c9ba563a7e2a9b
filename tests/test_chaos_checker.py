"""The chaos run's checker finds each broken promise in records made by hand, and passes a
run that broke none."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import orjson
import pytest

from bench.chaos.checker import MUST_BE_ZERO, check
from bench.chaos.records import FAULTS, RECEIVED, RUN, TOLD

T = 1_800_000_000_000  # an alarm's target
CHAOS = Path(__file__).resolve().parent.parent / "bench" / "chaos"


def alarm(business_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "id": int(business_id[1:]),
        "application": "a",
        "business_id": business_id,
        "target_ring_at": T,
        "latest_ring_at": None,
        "ring_after_count": None,
        **fields,
    }


def told(op: str, status: int | None, at: int, path: str = "", **record: Any) -> dict[str, Any]:
    return {
        "who": "client-0",
        "op": op,
        "method": "",
        "path": path,
        "server": 0,
        "sent_ms": at,
        "answered_ms": at + 5,
        "status": status,
        **record,
    }


def created(body: dict[str, Any]) -> dict[str, Any]:
    item = {k: body[k] for k in ("application", "business_id", "target_ring_at")}
    return told("create", 201, T - 5_000, request=item, body=body)


def final(business_id: str, status: str) -> dict[str, Any]:
    return told(
        "final",
        200,
        T + 60_000,
        f"/v1/alarms/a/{business_id}",
        request=None,
        body={"status": status},
    )


def delivery(business_id: str, published: int, attempt: int = 1, **message: Any) -> dict[str, Any]:
    body = {
        "id": int(business_id[1:]),
        "application": "a",
        "business_id": business_id,
        "target_ring_at": T,
        "attempt": attempt,
        "published_at": published,
        **message,
    }
    return {
        "channel": "amqp",
        "application": "a",
        "received_ms": published + 2,
        "message_id": str(body["id"]),
        "accepted": True,
        "message": body,
    }


def judge(tmp_path: Path, told_records: list[dict], received: list[dict]) -> dict[str, Any]:
    parameters = {
        "seed": 1,
        "minutes": 1,
        "servers": 3,
        "ring_lanes": 4,
        "ring_batch": 50,
        "webhook_in_flight": 4,
        "webhook_timeout_s": 2,
        "pullers": 2,
        "pull_max": 10,
    }
    (tmp_path / RUN).write_bytes(orjson.dumps(parameters))
    (tmp_path / FAULTS).write_bytes(b"")
    for name, records in ((TOLD, told_records), (RECEIVED, received)):
        (tmp_path / name).write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return check(tmp_path)


def test_a_sound_run_passes(tmp_path: Path) -> None:
    records = [created(alarm("b1")), final("b1", "rung")]
    figures = judge(tmp_path, records, [delivery("b1", T + 3)])
    assert figures["failed"] == [] and figures["accepted"] == 1 and figures["received"] == 1


@pytest.mark.parametrize(
    ("broken", "records", "received"),
    [
        ("lost", [created(alarm("b1")), final("b1", "rung")], []),
        ("early", [created(alarm("b1")), final("b1", "rung")], [delivery("b1", T - 1)]),
        (
            "past_cutoff",
            [created(alarm("b1", latest_ring_at=T + 100)), final("b1", "expired")],
            [delivery("b1", T + 101)],
        ),
        (
            "rung_after_cancel",
            [
                created(alarm("b1")),
                told("cancel", 200, T - 10, "/v1/alarms/a/b1"),
                final("b1", "cancelled"),
            ],
            [delivery("b1", T)],
        ),
        (
            "count_rung_twice,duplicates_over_bound",  # two rings are also two publishes
            [created(alarm("b1", ring_after_count=2)), final("b1", "rung")],
            [
                delivery("b1", T, trigger="time", count=1),
                delivery("b1", T + 9, trigger="time", count=2),
            ],
        ),
        (
            "early",  # rang by its count before the count that reached it was sent
            [
                created(alarm("b1", ring_after_count=1)),
                told(
                    "count", 200, T - 1_000, "/v1/alarms/a/b1/count", request={"increment_id": "i1"}
                ),
                final("b1", "rung"),
            ],
            [delivery("b1", T - 2_000, trigger="count", count=1)],
        ),
        (
            "early",  # a PATCH answered 200 moved it later; published at the old time
            [
                created(alarm("b1")),
                told(
                    "patch",
                    200,
                    T - 3_000,
                    "/v1/alarms/a/b1",
                    request={"target_ring_at": T + 5_000},
                ),
                final("b1", "rung"),
            ],
            [delivery("b1", T + 1)],
        ),
        (
            "message_id_unstable",
            [created(alarm("b1")), final("b1", "rung")],
            [{**delivery("b1", T), "message_id": "2"}],
        ),
        (
            "duplicates_over_bound",  # no fault: no copy is allowed
            [created(alarm("b1")), final("b1", "rung")],
            [delivery("b1", T), delivery("b1", T + 50, attempt=2)],
        ),
    ],
)
def test_each_broken_promise_is_found(
    tmp_path: Path, broken: str, records: list[dict], received: list[dict]
) -> None:
    figures = judge(tmp_path, records, received)
    assert figures["failed"] == broken.split(","), {name: figures[name] for name in MUST_BE_ZERO}


def test_what_may_happen_is_not_a_broken_promise(tmp_path: Path) -> None:
    """A PATCH that got no answer may move the alarm earlier; a count that reached its number
    rings before the target; an expired or dead alarm that never arrived is not lost; a copy
    published before the cancel's answer does not break the cancel."""
    records = [
        created(alarm("b1")),
        told("patch", None, T - 3_000, "/v1/alarms/a/b1", request={"target_ring_at": T - 1_000}),
        final("b1", "rung"),
        created(alarm("b2", ring_after_count=1)),
        told("count", 200, T - 2_500, "/v1/alarms/a/b2/count", request={"increment_id": "i1"}),
        final("b2", "rung"),
        created(alarm("b3")),
        final("b3", "expired"),
        created(alarm("b4")),
        told("cancel", 200, T + 10, "/v1/alarms/a/b4"),
        final("b4", "cancelled"),
    ]
    received = [
        delivery("b1", T - 1_000, target_ring_at=T - 1_000),
        delivery("b2", T - 2_000, trigger="count", count=1),
        delivery("b4", T + 1),
    ]
    figures = judge(tmp_path, records, received)
    assert figures["failed"] == [], {name: figures[name] for name in MUST_BE_ZERO}
    assert figures["cancelled_received_before_the_answer"] == 1


def test_a_refused_attempt_that_differs_from_the_ring_is_no_second_ring(tmp_path: Path) -> None:
    """A webhook answered 500 at the deadline; a count reached N before the retry, which rang
    by count: one ring taken, the attempts differing."""
    records = [
        created(alarm("b1", ring_after_count=1)),
        told("count", 200, T + 100, "/v1/alarms/a/b1/count", request={"increment_id": "i1"}),
        final("b1", "rung"),
    ]
    refused = {**delivery("b1", T, trigger="time", count=0), "accepted": False}
    received = [refused, delivery("b1", T + 200, attempt=2, trigger="count", count=1)]
    figures = judge(tmp_path, records, received)
    assert figures["failed"] == [], {name: figures[name] for name in MUST_BE_ZERO}
    assert figures["count_attempts_that_differ"] == 1 and figures["duplicates"] == 0


def test_the_checker_imports_nothing_of_clock_server() -> None:
    """It judges what clients and consumers saw, not what the service says of itself."""
    imported = set()
    for module in ("checker", "ledger", "records", "report"):
        tree = ast.parse((CHAOS / f"{module}.py").read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
    assert {name for name in imported if name.split(".")[0] == "clock_server"} == set()
    assert {name for name in imported if name.startswith("bench.")} <= {
        f"bench.chaos.{module}" for module in ("checker", "ledger", "records", "report")
    }
