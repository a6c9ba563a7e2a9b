"""Per-application delivery limits on the ring path: each application's rate (rings a second,
with a burst), and its own retry policy."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import NamedTuple

from clock_server.engine.backoff import RetryPolicy
from clock_server.errors import Unavailable
from clock_server.metrics import Metrics
from clock_server.model import ApplicationPolicy, Claim, burst_of
from clock_server.store.ports import ApplicationPolicies, RateLimiter

log = logging.getLogger(__name__)

RING = "ring"


class Admitted(NamedTuple):
    go: list[Claim]  # ring these now
    later: list[Claim]  # held back by their application's rate: each due again at due_ms


class DeliveryGate:
    """Lets through what each application's delivery rate allows and holds back the rest.

    The rate is a token bucket shared by every engine (store.rate_buckets). A held claim is
    given a later due time, spaced at the application's rate, so it waits in the heap (or, if
    that is further off than `hold_in_heap_ms`, in the database) and is rung late, never
    dropped; its cutoff (latest_ring_at) still applies when its turn comes. The delay the
    policy caused is counted apart from the engine's own lateness (metrics
    clock_ring_throttled and clock_ring_throttle_delay_seconds).

    When the registry cannot be read and no copy of it is at hand, nothing is held back:
    ringing on time beats keeping a limit.
    """

    def __init__(
        self,
        policies: ApplicationPolicies,
        limiter: RateLimiter,
        default_retry: RetryPolicy,
        metrics: Metrics,
    ) -> None:
        self.policies = policies
        self.limiter = limiter
        self.default_retry = default_retry
        self.metrics = metrics
        self._held_since: dict[int, int] = {}  # alarm id -> due time before it was first held
        self._retries: dict[str, tuple[ApplicationPolicy, RetryPolicy]] = {}

    def admit(self, due: Sequence[Claim], now_ms: int) -> Admitted:
        """Split claims popped for ringing into those that go now and those held back."""
        by_app: dict[str, list[Claim]] = {}
        for claim in due:
            by_app.setdefault(claim.application, []).append(claim)
        go: list[Claim] = []
        later: list[Claim] = []
        for application, claims in by_app.items():
            policy = self._policy(application)
            rate = policy.ring_rate_per_s if policy is not None else None
            if rate is None:
                go.extend(claims)
                continue
            claims.sort()
            burst = burst_of(rate, policy.ring_burst if policy else None)
            grant = self.limiter.acquire(application, RING, rate, burst, len(claims), now_ms)
            go.extend(claims[: grant.granted])
            held = claims[grant.granted :]
            if held:
                later.extend(self._hold(held, now_ms + grant.retry_after_ms, rate))
        return Admitted(go, later)

    def lateness_from(self, alarm_id: int, target_ms: int, due_ms: int) -> int:
        """The moment an alarm due at `due_ms` is late from: its target, or, if its
        application's rate held it, when the rate let it go. Forgets nothing."""
        return max(due_ms, target_ms) if alarm_id in self._held_since else target_ms

    def policy_delay_ms(self, alarm_id: int, target_ms: int, due_ms: int) -> int | None:
        """For an alarm rung now: how long its application's rate held it past its due time
        (None when it was never held). Forgets it."""
        first_due = self._held_since.pop(alarm_id, None)
        if first_due is None:
            return None
        return max(due_ms - max(first_due, target_ms), 0)

    def retry_for(self, application: str) -> RetryPolicy:
        """The application's retry policy: its own fields over the server's defaults."""
        policy = self._policy(application)
        if policy is None or (
            policy.retry_base_s is None and policy.retry_cap_s is None and policy.retry_max is None
        ):
            return self.default_retry
        cached = self._retries.get(application)
        if cached is not None and cached[0] == policy:
            return cached[1]
        base = self.default_retry
        retry = RetryPolicy(
            base_ms=int(policy.retry_base_s * 1000) if policy.retry_base_s else base.base_ms,
            cap_ms=int(policy.retry_cap_s * 1000) if policy.retry_cap_s else base.cap_ms,
            max_retries=policy.retry_max if policy.retry_max is not None else base.max_retries,
        )
        self._retries[application] = (policy, retry)
        return retry

    def forget(self, claims: Sequence[Claim]) -> None:
        """Claims given back: their hold no longer counts here."""
        for claim in claims:
            self._held_since.pop(claim.id, None)

    def _hold(self, held: list[Claim], first_ms: int, rate: float) -> list[Claim]:
        spacing = 1000 / rate
        self.metrics.throttled.labels(held[0].application).inc(len(held))
        out = []
        for position, claim in enumerate(held):
            self._held_since.setdefault(claim.id, claim.due_ms)
            out.append(claim._replace(due_ms=first_ms + int(position * spacing)))
        return out

    def _policy(self, application: str) -> ApplicationPolicy | None:
        try:
            return self.policies.policy(application)
        except Unavailable as error:
            log.warning(
                "cannot read the registry, ringing without delivery limits: %s",
                error,
                extra={"action": "registry_unavailable"},
            )
            return None
