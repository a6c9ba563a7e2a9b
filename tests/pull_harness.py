"""The service harness of the pull channel: `jobs` registered on it, tokens of jobs, another
application and an admin, and each pull and ack checked against the OpenAPI document."""

from __future__ import annotations

from typing import Any

from clock_server.model import ApplicationPolicy
from clock_server.store.alarms import AlarmStore
from clock_server.store.applications import SqlApplicationRegistry
from clock_server.testing import SettableClock
from tests.api_support import OpenApiChecker
from tests.harness import ServiceHarness
from tests.support import metric_value

APP = "jobs"
JOBS = "jobs-token-0123456789abcd"
OTHER = "other-token-0123456789ab"
JOBS_READ = "jobs-read-token-0123456789"
ADMIN = "admin-token-0123456789abc="
TOKENS = f"{JOBS}=jobs; {OTHER}=other; {JOBS_READ}=jobs:read; {ADMIN}=*"
VISIBILITY_MS = 5_000
PULL = "/v1/applications/{application}/pull"
ACK = "/v1/applications/{application}/ack"
POLICIES_FOREVER_MS = 10**12


class Harness(ServiceHarness):
    """The service harness with `jobs` registered on the pull channel (retry_max 2, a
    visibility timeout of VISIBILITY_MS)."""

    def __init__(self, store: AlarmStore, clock: SettableClock, retry_max: int = 2) -> None:
        policy = ApplicationPolicy(
            name=APP, channel="pull", pull_visibility_s=VISIBILITY_MS / 1000, retry_max=retry_max
        )
        SqlApplicationRegistry(store).put(policy, clock.now_ms())
        # No lock-ahead: a ring lane holding SQLite's write lock while it sleeps on the fake
        # clock would block the pulls of the same thread. The engine reads the registry once:
        # as the test configured it before stepping.
        super().__init__(
            store,
            clock,
            TOKENS,
            token=JOBS,
            policies_refresh_ms=POLICIES_FOREVER_MS,
            pull_poll_ms=10,
            ring_lead_ms=0,
            ring_lead_max_ms=0,
        )
        self.check = OpenApiChecker(self.client.get("/openapi.json").get_json())

    def create(self, business_id: str, target: int, **fields: Any) -> int:
        body = {"application": APP, "business_id": business_id, "payload": f"p-{business_id}",
                "target_ring_at": target, **fields}  # fmt: skip
        response = self.call("POST", "/v1/alarms", json=body)
        assert response.status_code == 201, response.get_json()
        return int(response.get_json()["id"])

    def pull(self, token: str | None = JOBS, application: str = APP, **body: Any) -> Any:
        response = self.call("POST", f"/v1/applications/{application}/pull", token, json=body)
        self.check.response(PULL, "POST", response)
        return response

    def pulled(self, **body: Any) -> list[dict[str, Any]]:
        response = self.pull(**body)
        assert response.status_code == 200, response.get_json()
        return response.get_json()["messages"]  # type: ignore[no-any-return]

    def ack(self, ids: Any, token: str | None = JOBS, application: str = APP) -> Any:
        url = f"/v1/applications/{application}/ack"
        response = self.call("POST", url, token, json={"ids": ids})
        self.check.response(ACK, "POST", response)
        return response

    def alarm(self, business_id: str) -> dict[str, Any]:
        response = self.call("GET", f"/v1/alarms/{APP}/{business_id}")
        assert response.status_code == 200
        return response.get_json()  # type: ignore[no-any-return]

    def events(self, business_id: str) -> list[dict[str, Any]]:
        response = self.call("GET", f"/v1/alarms/{APP}/{business_id}/events")
        return response.get_json()["events"]  # type: ignore[no-any-return]

    def metric(self, name: str, application: str = APP) -> float:
        return metric_value(self.metrics, name, {"application": application})
