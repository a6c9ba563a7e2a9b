"""The clients of a chaos run: threads that create (one at a time and in batches), reschedule,
cancel and count alarms of every application, all the time, each with keys of its own.

Alarms fall due 2 to 9 s after they are made; some have a cutoff 0.3 to 3 s after their
target, so that a fault makes some expire; some ring after 2 or 3 counts or at their
deadline, whichever comes first. What each request was told is recorded by CarefulHttp.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from bench.chaos.http import CarefulHttp
from bench.chaos.records import Recorder, now_ms

# application -> channel; a client picks an application by these weights
APPLICATIONS = {
    "chaos-amqp-1": "amqp",
    "chaos-amqp-2": "amqp",
    "chaos-webhook": "webhook",
    "chaos-pull": "pull",
}
APPLICATION_WEIGHTS = (3, 3, 2, 2)
ACTIONS = ("create", "batch", "patch", "cancel", "count")
ACTION_WEIGHTS = (4, 1, 2, 1.5, 2)
PAUSE_S = (0.1, 0.4)  # between a client's requests


@dataclass
class Mine:
    """What a client remembers of an alarm it made."""

    application: str
    business_id: str
    target: int
    movable: bool  # no cutoff and no count: a PATCH may move it anywhere
    ring_after_count: int | None = None
    counts_planned: int = 0
    counts_sent: int = 0


class Client:
    def __init__(self, index: int, seed: int, base_urls: list[str], recorder: Recorder) -> None:
        self.index = index
        self.rng = random.Random(seed * 1_000 + index)
        self.http = CarefulHttp(base_urls, index, recorder, who=f"client-{index}")
        self.mine: list[Mine] = []
        self.made = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=f"client-{index}")

    def start(self) -> Client:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def join(self) -> None:
        self._thread.join(60)

    def _run(self) -> None:
        while not self._stop.is_set():
            action = self.rng.choices(ACTIONS, ACTION_WEIGHTS)[0]
            getattr(self, f"_{action}")()
            self._stop.wait(self.rng.uniform(*PAUSE_S))

    def _new_alarm(self) -> dict[str, Any]:
        application = self.rng.choices(list(APPLICATIONS), APPLICATION_WEIGHTS)[0]
        self.made += 1
        business_id = f"c{self.index}-{self.made}"
        now = now_ms()
        kind = self.rng.random()
        item: dict[str, Any] = {
            "application": application,
            "business_id": business_id,
            "payload": f"{business_id} of client {self.index}",
        }
        if kind < 0.2:  # rings after its counts, or at its deadline
            item["target_ring_at"] = now + self.rng.randint(5_000, 9_000)
            item["ring_after_count"] = self.rng.choice((2, 3))
        else:
            item["target_ring_at"] = now + self.rng.randint(2_000, 6_000)
            if kind < 0.5:
                item["latest_ring_at"] = item["target_ring_at"] + self.rng.randint(300, 3_000)
        return item

    def _remember(self, item: dict[str, Any]) -> None:
        count = item.get("ring_after_count")
        self.mine.append(
            Mine(
                item["application"],
                item["business_id"],
                item["target_ring_at"],
                movable=count is None and "latest_ring_at" not in item,
                ring_after_count=count,
                counts_planned=0 if count is None else self.rng.choice((count - 1, count)),
            )
        )

    def _create(self) -> None:
        item = self._new_alarm()
        status, _ = self.http.call("create", "POST", "/v1/alarms", item)
        if status in (200, 201):
            self._remember(item)

    def _batch(self) -> None:
        items = [self._new_alarm() for _ in range(self.rng.randint(5, 20))]
        status, answer = self.http.call("batch", "POST", "/v1/alarms/batch", {"alarms": items})
        if status == 200:
            for item, result in zip(items, answer["results"], strict=True):
                if result["status"] in (200, 201):
                    self._remember(item)

    def _pick(self, fits: Any) -> Mine | None:
        now = now_ms()
        self.mine = [m for m in self.mine if m.target > now - 2_000]
        candidates = [m for m in self.mine if fits(m, now)]
        return self.rng.choice(candidates) if candidates else None

    def _patch(self) -> None:
        alarm = self._pick(lambda m, now: m.movable and m.target > now + 300)
        if alarm is None:
            return
        target = now_ms() + self.rng.randint(500, 6_000)
        status, _ = self.http.call("patch", "PATCH", _path(alarm), {"target_ring_at": target})
        if status == 200:
            alarm.target = target

    def _cancel(self) -> None:
        alarm = self._pick(lambda m, now: m.target > now - 500)
        if alarm is not None:
            self.http.call("cancel", "DELETE", _path(alarm))
            self.mine.remove(alarm)

    def _count(self) -> None:
        alarm = self._pick(lambda m, now: m.counts_sent < m.counts_planned)
        if alarm is None:
            return
        alarm.counts_sent += 1
        body = {"increment_id": f"{alarm.business_id}-i{alarm.counts_sent}"}
        self.http.call("count", "POST", _path(alarm) + "/count", body)


def _path(alarm: Mine) -> str:
    return f"/v1/alarms/{alarm.application}/{quote(alarm.business_id, safe='')}"
