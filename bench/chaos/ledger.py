"""The checker's ledger: for each alarm, everything clients were told about it and every
message consumers received of it, read from the run's records alone."""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

Key = tuple[str, str]  # (application, business_id)


@dataclass
class Move:
    """A PATCH of the target: `ok` True (answered 200), None (no answer: it may have been
    applied, then or later), False (refused: changed nothing)."""

    sent_ms: int
    answered_ms: int
    target: int
    ok: bool | None


@dataclass
class Told:
    key: Key
    id: int | None = None
    accepted: bool = False
    target: int = 0
    latest: int | None = None
    ring_after_count: int | None = None
    cancel_sent: bool = False
    cancel_ok_ms: int | None = None  # when the first DELETE answered 200 reached the client
    moves: list[Move] = field(default_factory=list)
    increments: dict[str, int] = field(default_factory=dict)  # increment_id -> first sent
    final_status: str = "unread"

    @property
    def cancelled(self) -> bool:
        """Cancelled as a client was told: a DELETE answered 200, or one sent whose answer was
        lost and the final GET says cancelled."""
        return self.cancel_ok_ms is not None or (
            self.cancel_sent and self.final_status == "cancelled"
        )

    def floor_at(self, published_ms: int, message: dict[str, Any]) -> int:
        """The earliest a copy published at `published_ms` may be published: the target in
        force then as clients were told (the last PATCH answered 200 before it, or any
        PATCH then still unanswered), or, for a ring by count, the moment the count that
        reached ring_after_count was first sent."""
        if message.get("trigger") == "count" and self.ring_after_count is not None:
            sent = sorted(self.increments.values())
            if len(sent) >= self.ring_after_count:
                return sent[self.ring_after_count - 1]
        in_force = self.target
        possible = []
        for move in sorted(self.moves, key=lambda m: m.sent_ms):
            if move.ok and move.answered_ms <= published_ms:
                in_force = move.target
            elif move.sent_ms <= published_ms and move.ok is not False:
                possible.append(move.target)  # answered after, or never
        return min([in_force, *possible])


@dataclass
class Ledger:
    alarms: dict[Key, Told]
    deliveries: dict[Key, list[dict[str, Any]]]
    strangers: list[dict[str, Any]]
    requests: dict[str, dict[str, int]]
    never_answered: int


def build_ledger(told: list[dict[str, Any]], received: list[dict[str, Any]]) -> Ledger:
    alarms: dict[Key, Told] = {}

    def of(key: Key) -> Told:
        return alarms.setdefault(key, Told(key))

    outcomes: dict[str, Counter[str]] = defaultdict(Counter)
    answered: set[Key] = set()
    for record in told:
        status = record["status"]
        outcomes[record["op"]][str(status)] += 1
        op = record["op"]
        if op == "create":
            key = (record["request"]["application"], record["request"]["business_id"])
            of(key)
            if status is not None and status < 500:
                answered.add(key)
            if status in (200, 201):
                _accept(of(key), record["body"])
        elif op == "batch":
            for item in record["request"]["alarms"]:
                of((item["application"], item["business_id"]))
            if status == 200:
                items = record["request"]["alarms"]
                answered.update((item["application"], item["business_id"]) for item in items)
                for result in record["body"]["results"]:
                    if result["status"] in (200, 201):
                        alarm = result["alarm"]
                        _accept(of((alarm["application"], alarm["business_id"])), alarm)
        else:
            _follow_up(of(_key_of(record["path"])), record)
    never = sum(1 for key, t in alarms.items() if not t.accepted and key not in answered)
    deliveries, strangers = _deliveries(received, alarms)
    requests = {op: dict(counts) for op, counts in sorted(outcomes.items())}
    return Ledger(alarms, deliveries, strangers, requests, never)


def _accept(told: Told, alarm: dict[str, Any]) -> None:
    told.accepted = True
    told.id = alarm["id"]
    if not told.target:
        told.target = alarm["target_ring_at"]
        told.latest = alarm["latest_ring_at"]
        told.ring_after_count = alarm.get("ring_after_count")


def _follow_up(told: Told, record: dict[str, Any]) -> None:
    status, op = record["status"], record["op"]
    unknown = status is None or status >= 500
    if op == "patch":
        ok = True if status == 200 else None if unknown else False
        move = Move(
            record["sent_ms"], record["answered_ms"], record["request"]["target_ring_at"], ok
        )
        told.moves.append(move)
    elif op == "cancel":
        told.cancel_sent = True
        if status == 200 and told.cancel_ok_ms is None:
            told.cancel_ok_ms = record["answered_ms"]
    elif op == "count":
        told.increments.setdefault(record["request"]["increment_id"], record["sent_ms"])
    elif op == "final" and not unknown:
        told.final_status = record["body"]["status"] if status == 200 else f"http {status}"


def _key_of(path: str) -> Key:
    parts = path.split("/")  # "", "v1", "alarms", application, business_id[, "count"]
    return parts[3], unquote(parts[4])


def _deliveries(
    received: list[dict[str, Any]], alarms: dict[Key, Told]
) -> tuple[dict[Key, list[dict[str, Any]]], list[dict[str, Any]]]:
    by_key: dict[Key, list[dict[str, Any]]] = defaultdict(list)
    strangers = []
    for record in received:
        message = record.get("message")
        if not isinstance(message, dict) or "business_id" not in message:
            strangers.append(record)
            continue
        key = (message["application"], message["business_id"])
        if key not in alarms:
            strangers.append(record)
            continue
        delivered_id = (
            record.get("message_id") or record.get("webhook_id") or record.get("lease_id")
        )
        by_key[key].append(
            {**record, "delivered_id": None if delivered_id is None else str(delivered_id)}
        )
    return dict(by_key), strangers
