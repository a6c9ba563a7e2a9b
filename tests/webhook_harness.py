"""The service harness of the webhook channel, with tokens of an admin and of `hooks`."""

from __future__ import annotations

import time
from typing import Any

from clock_server.deadline import Deadline
from clock_server.store.alarms import AlarmStore
from clock_server.testing import SettableClock
from tests.harness import ServiceHarness
from tests.support import eventually, settle


def real_now_ms() -> int:
    """The fake clock starts at the real time, to the second: a receiver checks that a
    webhook's signed timestamp is within five minutes of its own clock."""
    return int(time.time()) * 1000


ADMIN = "admin-token-0123456789abc="
HOOKS = "hooks-token-0123456789abcd"  # the application "hooks" only
TOKENS = f"{ADMIN}=*; {HOOKS}=hooks"


class Harness(ServiceHarness):
    """The service harness with the webhook channel: the engine reads the applications'
    policies on every look, and may call webhooks on this host."""

    def __init__(self, store: AlarmStore, clock: SettableClock, **settings: Any) -> None:
        defaults = {"retry_base_s": 1, "retry_cap_s": 8, "retry_max": 3}
        super().__init__(
            store,
            clock,
            TOKENS,
            token=ADMIN,
            policies_refresh_ms=0,
            webhook_allow_private=True,
            **{**defaults, **settings},
        )

    def configure(self, name: str, **settings: Any) -> dict[str, Any]:
        response = self.call("PATCH", f"/v1/applications/{name}", json=settings)
        if response.status_code == 404:
            response = self.call("PUT", f"/v1/applications/{name}", json=settings)
        assert response.status_code in (200, 201), response.get_data(as_text=True)
        return response.get_json()  # type: ignore[no-any-return]

    def secret(self, name: str) -> str:
        response = self.call("GET", f"/v1/applications/{name}/webhook-secret")
        return response.get_json()["webhook_secret"]  # type: ignore[no-any-return]

    def create(self, business_id: str, application: str = "hooks", **fields: Any) -> Any:
        body = {"application": application, "business_id": business_id, "payload": "p"}
        response = self.call("POST", "/v1/alarms", json={**body, **fields})
        assert response.status_code == 201, response.get_data(as_text=True)
        return response.get_json()

    def ring_at(self, at_ms: int) -> None:
        """Move the clock to `at_ms`, ring what is due and wait for the webhook calls."""
        self.clock.set(at_ms)
        self.engine.preloader.run_once()
        settle(self.engine, self.clock)
        self.wait_for_calls()

    def wait_for_calls(self, timeout_s: float = 5.0) -> None:
        """Wait for the webhook calls in flight, but those waiting on the clock for their
        moment, then record their answers."""
        assert self.engine.webhooks is not None and self.engine.webhook_recorder is not None
        webhooks = self.engine.webhooks
        eventually(
            lambda: webhooks.in_flight <= self.clock.sleepers,
            timeout_s,
            0.002,
            "webhook calls still in flight",
        )
        while self.engine.webhook_recorder.run_once() == 0.0:
            pass

    def alarm(self, business_id: str, application: str = "hooks") -> dict[str, Any]:
        return self.call("GET", f"/v1/alarms/{application}/{business_id}").get_json()  # type: ignore[no-any-return]

    def close(self) -> None:
        assert self.engine.webhooks is not None
        self.engine.webhooks.close(Deadline(5))
