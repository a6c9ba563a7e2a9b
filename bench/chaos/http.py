"""A careful client's HTTP: a request that gets no answer, or a 5xx, is sent again, the same
request under the same key, to the next server, until one answers or time runs out.

Every exchange is recorded as it happened (what was sent, to which server, when, and the
status and body the client was told, or the error when it was told nothing), so the checker
judges from what clients actually saw.
"""

from __future__ import annotations

import time
from typing import Any

import requests

from bench.chaos.records import Recorder, now_ms

TIMEOUT_S = (1.0, 4.0)  # connect, read: a stalled server is left after 4 s
GIVE_UP_S = 30.0


class CarefulHttp:
    def __init__(self, base_urls: list[str], first: int, recorder: Recorder, who: str) -> None:
        self.base_urls = base_urls
        self.server = first % len(base_urls)
        self.recorder = recorder
        self.who = who
        self.session = requests.Session()

    def call(
        self, op: str, method: str, path: str, body: dict[str, Any] | None = None
    ) -> tuple[int | None, Any]:
        """The final answer (status, JSON body), or (None, None) when no server answered
        without a 5xx within GIVE_UP_S. A 4xx is an answer: it is not sent again."""
        deadline = time.monotonic() + GIVE_UP_S
        while True:
            status, answer = self._once(op, method, path, body)
            if status is not None and status < 500:
                return status, answer
            if time.monotonic() > deadline:
                return None, None
            self.server = (self.server + 1) % len(self.base_urls)
            time.sleep(0.1)

    def _once(
        self, op: str, method: str, path: str, body: dict[str, Any] | None
    ) -> tuple[int | None, Any]:
        record: dict[str, Any] = {
            "who": self.who,
            "op": op,
            "method": method,
            "path": path,
            "request": body,
            "server": self.server,
            "sent_ms": now_ms(),
        }
        try:
            response = self.session.request(
                method, self.base_urls[self.server] + path, json=body, timeout=TIMEOUT_S
            )
            record["status"] = response.status_code
            try:
                record["body"] = response.json()
            except ValueError:
                record["body"] = response.text[:500]
        except requests.RequestException as error:
            record["status"] = None
            record["error"] = type(error).__name__
            self.session.close()  # a connection left in a bad state is not reused
            self.session = requests.Session()
        record["answered_ms"] = now_ms()
        self.recorder.write(record)
        return record["status"], record.get("body")
