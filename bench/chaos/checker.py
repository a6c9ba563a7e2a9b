"""The checker: judges a chaos run from what clients were told and what consumers received.

It reads the run's records and nothing else: no database, and no code of clock_server. An
alarm is its key (application, business_id); a client knows it was accepted from a 2xx
answer, and its final status from its GET after the quiet period. A delivery is a message a
consumer received; `accepted` ones were taken (acked, answered 2xx, leased), and only those
count as the alarm having reached its application.

    python -m bench.chaos.checker <work directory>     # judges a run's records again
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from bench.chaos.ledger import Ledger, Told, build_ledger
from bench.chaos.records import FAULTS, RECEIVED, RUN, TOLD, read

MUST_BE_ZERO = (
    "lost",
    "early",
    "past_cutoff",
    "rung_after_cancel",
    "count_rung_twice",
    "count_short",
    "message_id_unstable",
    "duplicates_over_bound",
)


def check(workdir: Path) -> dict[str, Any]:
    """Every figure of the run in `workdir`, with up to 10 example keys of each must-be-0."""
    parameters = dict(orjson.loads((workdir / RUN).read_bytes()))
    ledger = build_ledger(read(workdir / TOLD), read(workdir / RECEIVED))
    faults = read(workdir / FAULTS)
    found: dict[str, list[str]] = {name: [] for name in MUST_BE_ZERO[:-1]}
    for key, told in ledger.alarms.items():
        for name, broken in _judge(told, ledger).items():
            if broken:
                found[name].append(f"{key[0]}/{key[1]}")
    duplicates, redeliveries, duplicated = _duplicates(ledger)
    bound = duplicate_bound(parameters, faults)
    figures: dict[str, Any] = {
        "seed": parameters["seed"],
        "minutes": parameters["minutes"],
        "faults": dict(Counter(fault["kind"] for fault in faults)),
        "fault_errors": [
            f"{f['kind']} at {f['at_s']} s: {f['error']}" for f in faults if f["error"]
        ],
        "requests": ledger.requests,
        "accepted": sum(1 for t in ledger.alarms.values() if t.accepted),
        "never_answered": ledger.never_answered,
        "final": dict(Counter(t.final_status for t in ledger.alarms.values() if t.accepted)),
        "received": sum(1 for t in ledger.alarms.values() if t.accepted and _got(t, ledger)),
        "received_not_rung": _received_not_rung(ledger),
        "cancelled_received_before_the_answer": _cancelled_received(ledger),
        "count_attempts_that_differ": _count_attempts_that_differ(ledger),
        "duplicates": duplicates,
        "duplicated_alarms": duplicated,
        "duplicate_bound": bound,
        "broker_redeliveries": redeliveries,
        "unknown_deliveries": len(ledger.strangers),
        "lateness_ms": _lateness(ledger),
    }
    for name, keys in found.items():
        figures[name] = len(keys)
        figures[f"{name}_examples"] = sorted(keys)[:10]
    figures["duplicates_over_bound"] = max(duplicates - bound, 0)
    figures["failed"] = [name for name in MUST_BE_ZERO if figures[name]]
    return figures


def _judge(told: Told, ledger: Ledger) -> dict[str, bool]:
    deliveries = ledger.deliveries.get(told.key, [])
    verdict = dict.fromkeys(MUST_BE_ZERO[:-1], False)
    if told.accepted and not told.cancelled and told.final_status not in ("expired", "dead"):
        verdict["lost"] = not _got(told, ledger)
    rings = set()
    for delivery in deliveries:
        message = delivery["message"]
        published, received = message["published_at"], delivery["received_ms"]
        floor = told.floor_at(published, message)
        if min(published, received) < max(floor, _own_floor(message)):
            verdict["early"] = True
        if told.latest is not None and published > told.latest:
            verdict["past_cutoff"] = True
        if told.cancel_ok_ms is not None and published > told.cancel_ok_ms:
            verdict["rung_after_cancel"] = True
        if told.id is not None and (
            message["id"] != told.id or delivery["delivered_id"] not in (None, str(told.id))
        ):
            verdict["message_id_unstable"] = True
        if told.ring_after_count is not None:
            if delivery["accepted"]:  # a copy the receiver refused is no ring
                rings.add((message.get("trigger"), message.get("count")))
            if (
                message.get("trigger") == "count"
                and message.get("count", 0) < told.ring_after_count
            ):
                verdict["count_short"] = True
    verdict["count_rung_twice"] = len(rings) > 1
    return verdict


def _own_floor(message: dict[str, Any]) -> int:
    """The message's own target, which a count that reached its number may come before."""
    return 0 if message.get("trigger") == "count" else int(message["target_ring_at"])


def _got(told: Told, ledger: Ledger) -> bool:
    return any(d["accepted"] for d in ledger.deliveries.get(told.key, []))


def _duplicates(ledger: Ledger) -> tuple[int, int, int]:
    """(extra publishes taken, the same publish taken again, alarms taken more than once)."""
    extra = again = duplicated = 0
    for deliveries in ledger.deliveries.values():
        taken = [d for d in deliveries if d["accepted"]]
        publishes = {(d["message"]["published_at"], d["message"]["attempt"]) for d in taken}
        extra += max(len(publishes) - 1, 0)
        again += len(taken) - len(publishes)
        duplicated += len(publishes) > 1
    return extra, again, duplicated


def duplicate_bound(parameters: dict[str, Any], faults: list[dict[str, Any]]) -> int:
    """What the faults could have caught in flight, each copy a duplicate at most once: a
    server's ring lanes, its webhook calls and the pullers' leases for a server killed or
    stalled; every server's for the database; every server's ring lanes for a RabbitMQ node;
    every server's webhook calls for each timeout a hanging receiver makes them wait."""
    servers = parameters["servers"]
    lanes = parameters["ring_lanes"] * parameters["ring_batch"]
    hooks = parameters["webhook_in_flight"]
    leases = parameters["pullers"] * parameters["pull_max"]
    total = 0
    for fault in faults:
        kind = fault["kind"]
        if kind in ("kill", "stall"):
            total += lanes + hooks + leases
        elif kind == "database":
            total += servers * (lanes + hooks) + leases
        elif kind == "node":
            total += servers * lanes
        elif kind == "webhook_hang":
            waits = int(fault["duration_s"] // parameters["webhook_timeout_s"]) + 2
            total += servers * hooks * waits
        elif kind == "webhook_slow":
            total += servers * hooks
    return total


def _received_not_rung(ledger: Ledger) -> dict[str, int]:
    statuses = Counter(
        t.final_status
        for t in ledger.alarms.values()
        if _got(t, ledger) and t.final_status != "rung"
    )
    return dict(statuses)


def _cancelled_received(ledger: Ledger) -> int:
    return sum(1 for t in ledger.alarms.values() if t.cancel_ok_ms is not None and _got(t, ledger))


def _count_attempts_that_differ(ledger: Ledger) -> int:
    """Count alarms whose copies, taken or refused, differ in what made them ring: a count
    reached while a failed attempt waited for its retry changes the next one's message."""
    differ = 0
    for told in ledger.alarms.values():
        if told.ring_after_count is not None:
            deliveries = ledger.deliveries.get(told.key, [])
            rings = {(d["message"].get("trigger"), d["message"].get("count")) for d in deliveries}
            differ += len(rings) > 1
    return differ


def _lateness(ledger: Ledger) -> dict[str, int]:
    """First taken delivery minus target, of alarms rung by their time, nearest rank."""
    late = []
    for told in ledger.alarms.values():
        taken = [d for d in ledger.deliveries.get(told.key, []) if d["accepted"]]
        if taken and told.ring_after_count is None and not told.moves:
            late.append(min(d["received_ms"] for d in taken) - told.target)
    if not late:
        return {}
    late.sort()
    rank = {"p50": 50, "p99": 99, "p999": 99.9}
    out = {name: late[min(len(late) - 1, int(len(late) * q / 100))] for name, q in rank.items()}
    return {**out, "max": late[-1], "alarms": len(late)}


if __name__ == "__main__":
    from bench.chaos.report import readable

    result = check(Path(sys.argv[1]))
    print(readable(result))
    sys.exit(1 if result["failed"] else 0)
