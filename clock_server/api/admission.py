"""What happens to a create, single or batch, per application before anything is written.

Each item, in order:

1. **Registration.** An application the registry does not know is registered with no limits
   by its first create (one `INSERT IGNORE`; later creates find it in the policy cache). With
   `CLOCK_REQUIRE_REGISTERED_APPLICATIONS=true` it is refused instead: `403 forbidden`, and
   nothing is written. Before refusing, the registry itself is read, so an application an
   admin has just registered through another process is taken at once.
2. **Default cutoff.** Without a `latest_ring_at`, an application with `default_cutoff_ms`
   gets `latest_ring_at = target_ring_at + default_cutoff_ms`.
3. **Capacity** (`max_pending`). A create that would take the application past its pending
   alarms is refused, `429 capacity_exceeded`, unless its key already exists: that is an
   idempotent repeat, answered `200` with the stored alarm as always.
4. **Creation rate** (`create_rate_per_s`, `create_burst`). Tokens come from the bucket
   shared by every process (`store.rate_buckets`); an item without one is refused,
   `429 rate_limited` with `Retry-After`. A repeat of an existing key counts like any create
   here, as the key is not looked up on this path.

Capacity goes before the rate so that a create refused for capacity spends no token. A batch
is decided item by item: the items refused get their own result and the others are written
together, in one transaction, as before. A key repeated within a batch follows its first
occurrence. Nothing is written for a refused item.

How pending alarms are counted. Counting an application's pending alarms on each create
would cost a query per create (and a long one for a large application). Instead each process
keeps, per application with a `max_pending`, the count it read last, read again at most
every `CLOCK_APPLICATION_REFRESH_S` by the first create to find it older than that, plus what
this process has created since and what it has admitted and is still writing. This process's
own creates are never missed (one committed while the count is read may be counted twice,
until the next read: a refusal a little early, never late), and alarms that ring or are
cancelled free room at the next read. What a process cannot see are the creates of the other
processes since its last read, so with P processes serving an application the pending alarms
can exceed `max_pending` by at most what the other P - 1 processes admit within one refresh
interval: at most (P - 1) * `max_pending`, and with a creation rate set, at most
`create_rate_per_s * CLOCK_APPLICATION_REFRESH_S + create_burst` (all processes share the
one bucket).
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from clock_server.errors import (
    CapacityExceeded,
    ClockError,
    Forbidden,
    NotFound,
    RateLimited,
    Unavailable,
)
from clock_server.metrics import Metrics
from clock_server.model import MAX_EPOCH_MS, Alarm, ApplicationPolicy, NewAlarm, burst_of
from clock_server.settings import Settings
from clock_server.store.alarms import AlarmStore
from clock_server.store.applications import CachedPolicies, SqlApplicationRegistry
from clock_server.store.ports import RateLimiter
from clock_server.timesource import Clock

CREATE = "create"  # the kind of the creation buckets in clock_rate_bucket
CHANGE = "change"  # of the buckets of PATCH and count, at the same rate in a bucket of their own

# Per item: the alarm to write (its cutoff filled in), the stored alarm to answer with (at
# capacity, but the key exists), or why it is refused.
Outcome = NewAlarm | Alarm | ClockError

_UNREGISTERED = "unregistered"  # the metric's code for a 403 of an unregistered application


@dataclass
class Admitted:
    """The outcome of each item, in order. Tell it which writes inserted a row (`record`);
    leaving the `admit` block settles the room the items took."""

    outcomes: list[Outcome]
    reserved: dict[str, int] = field(default_factory=dict)  # capacity taken, by application
    created: Counter[str] = field(default_factory=Counter)

    def record(self, application: str, created: bool) -> None:
        """A write of this admission is done; `created` when it inserted the row."""
        if created:
            self.created[application] += 1


@dataclass
class _Pending:
    base: int = 0  # the application's pending alarms in the database at the last read
    since: int = 0  # this process's creates committed since that read began
    in_flight: int = 0  # admitted by this process and not written yet
    read_at_ms: int | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)
    reading: threading.Lock = field(default_factory=threading.Lock)  # one reader at a time


class PendingCounts:
    """Per application, an estimate of its pending alarms that never misses this process's
    own creates and lags the others' by at most `refresh_ms` (see the module docstring)."""

    def __init__(self, count: Callable[[str], int], now_ms: Callable[[], int], refresh_ms: int):
        self._count = count
        self._now_ms = now_ms
        self.refresh_ms = refresh_ms
        self._states: dict[str, _Pending] = {}
        self._lock = threading.Lock()

    def estimate(self, application: str) -> int:
        """What this process believes the application has pending, room it holds included."""
        state = self._state(application)
        self._read_if_old(application, state)
        with state.lock:
            return state.base + state.since + state.in_flight

    def reserve(self, application: str, limit: int, wanted: int) -> int:
        """Take room for up to `wanted` new alarms under `limit`; how many it took."""
        state = self._state(application)
        self._read_if_old(application, state)
        with state.lock:
            room = max(limit - (state.base + state.since + state.in_flight), 0)
            taken = min(wanted, room)
            state.in_flight += taken
            return taken

    def settle(self, application: str, reserved: int, created: int) -> None:
        """`reserved` room is given back, and `created` alarms were written meanwhile."""
        state = self._state(application)
        with state.lock:
            state.in_flight -= reserved
            state.since += created

    def _state(self, application: str) -> _Pending:
        with self._lock:
            state = self._states.get(application)
            if state is None:
                state = self._states[application] = _Pending()
            return state

    def _read_if_old(self, application: str, state: _Pending) -> None:
        now_ms = self._now_ms()
        read_at = state.read_at_ms
        if read_at is not None and now_ms - read_at < self.refresh_ms:
            return
        first = read_at is None
        # The first read is waited for; later, while one thread counts, the others go on
        # with the last count.
        if not state.reading.acquire(blocking=first):
            return
        try:
            read_at = state.read_at_ms
            if read_at is not None and now_ms - read_at < self.refresh_ms:
                return
            with state.lock:
                since_before = state.since
            try:
                count: int | None = self._count(application)
            except Unavailable:
                if first:
                    raise
                count = None  # keep the last count; read again after another interval
            with state.lock:
                if count is not None:
                    state.base = count
                    state.since -= since_before
                state.read_at_ms = now_ms
        finally:
            state.reading.release()


class Admission:
    """Decides each create of a request (see the module docstring); thread-safe, one per
    process."""

    def __init__(
        self,
        settings: Settings,
        store: AlarmStore,
        applications: SqlApplicationRegistry,
        policies: CachedPolicies,
        limiter: RateLimiter,
        clock: Clock,
        metrics: Metrics,
    ) -> None:
        self.settings = settings
        self.store = store
        self.applications = applications
        self.policies = policies
        self.limiter = limiter
        self.metrics = metrics
        self.pending = PendingCounts(
            applications.count_pending,
            clock.now_ms,
            int(settings.application_refresh_s * 1000),
        )

    @contextmanager
    def admit(self, items: Sequence[NewAlarm], now_ms: int) -> Iterator[Admitted]:
        """The outcome of each item; write the NewAlarm ones inside the block."""
        admitted = self._decide(items, now_ms)
        try:
            yield admitted
        finally:
            for application, reserved in admitted.reserved.items():
                self.pending.settle(application, reserved, admitted.created[application])
            self.metrics.count(self.metrics.created, admitted.created)
            self.metrics.minutes.created(now_ms, admitted.created)

    def admit_change(self, application: str, now_ms: int) -> None:
        """A PATCH or a count of `application`'s alarm: RateLimited (429, Retry-After) when
        its application has a `create_rate_per_s` and has used it up for changes. Changes
        take tokens at that rate (and burst) from a bucket of their own, so that neither
        kind of call starves the other."""
        policy = self.policies.policy(application)
        rate_per_s = policy.create_rate_per_s
        if rate_per_s is None:
            return
        burst = burst_of(rate_per_s, policy.create_burst)
        if rate_per_s > 0:
            grant = self.limiter.acquire(application, CHANGE, rate_per_s, burst, 1, now_ms)
            if grant.granted:
                return
            retry_after_ms = grant.retry_after_ms
        else:
            retry_after_ms = self.pending.refresh_ms
        retry_after_s = max(1, math.ceil(retry_after_ms / 1000))
        raise RateLimited(
            f"application {application!r} is over its rate of {rate_per_s:g} changes/s "
            f"(PATCH and count take create_rate_per_s, burst {burst}); retry in "
            f"{retry_after_s} s",
            retry_after_s=retry_after_s,
        )

    def _decide(self, items: Sequence[NewAlarm], now_ms: int) -> Admitted:
        outcomes: list[Outcome | None] = [None] * len(items)
        policies: dict[str, ApplicationPolicy | ClockError] = {}
        first_of: dict[tuple[str, str], int] = {}  # each key's first item
        fresh: dict[str, list[int]] = {}  # by application, the first items of their keys
        for index, item in enumerate(items):
            name = item.application
            if name not in policies:
                policies[name] = self._policy(name, now_ms)
            policy = policies[name]
            key = (name, item.business_id)
            if key in first_of:
                continue  # a repeat within the request follows its first occurrence
            first_of[key] = index
            if isinstance(policy, ClockError):
                outcomes[index] = policy
            else:
                outcomes[index] = _with_cutoff(item, policy)
                fresh.setdefault(name, []).append(index)
        reserved: dict[str, int] = {}
        try:
            for name, indices in fresh.items():
                policy = policies[name]
                assert isinstance(policy, ApplicationPolicy)
                if policy.max_pending is not None:
                    taken = self.pending.reserve(name, policy.max_pending, len(indices))
                    reserved[name] = taken
                    self._refuse_over_capacity(policy.max_pending, items, indices[taken:], outcomes)
                    indices = indices[:taken]
                if policy.create_rate_per_s is not None and indices:
                    granted = self._rate(policy, indices, outcomes, now_ms)
                    if name in reserved and granted < len(indices):
                        reserved[name] -= len(indices) - granted
                        self.pending.settle(name, len(indices) - granted, 0)
        except BaseException:
            for name, taken in reserved.items():
                self.pending.settle(name, taken, 0)
            raise
        final: list[Outcome] = []
        for item, outcome in zip(items, outcomes, strict=True):
            if outcome is None:
                outcome = outcomes[first_of[(item.application, item.business_id)]]
                assert outcome is not None
            final.append(outcome)
            if isinstance(outcome, ClockError):
                code = _UNREGISTERED if isinstance(outcome, Forbidden) else outcome.code
                self.metrics.creates_rejected.labels(item.application, code).inc()
        return Admitted(final, reserved)

    def _policy(self, name: str, now_ms: int) -> ApplicationPolicy | ClockError:
        """The application's policy, registering it first when it is new (or the 403)."""
        if self.policies.known(name):
            return self.policies.policy(name)
        if self.settings.require_registered_applications:
            try:  # registered since this process last read the registry?
                policy = self.applications.get(name)
            except NotFound:
                return Forbidden(
                    f"application {name!r} is not registered: an admin must "
                    f"PUT /v1/applications/{name} before it can create alarms",
                    field="application",
                )
        elif self.applications.register(name, now_ms):
            policy = ApplicationPolicy(name, created_at=now_ms, updated_at=now_ms)
        else:  # another process registered it meanwhile, perhaps with limits
            try:
                policy = self.applications.get(name)
            except NotFound:  # and an admin removed it again
                policy = ApplicationPolicy(name)
        self.policies.remember(policy)
        return policy

    def _refuse_over_capacity(
        self,
        limit: int,
        items: Sequence[NewAlarm],
        over: Sequence[int],
        outcomes: list[Outcome | None],
    ) -> None:
        """Items with no room: an existing key is answered with its alarm, others refused."""
        if not over:
            return
        name = items[over[0]].application
        stored = self.store.find({(name, items[index].business_id) for index in over})
        error = CapacityExceeded(
            f"application {name!r} is at its limit of {limit} pending alarms (max_pending); "
            "room is made as its alarms ring or are cancelled"
        )
        for index in over:
            outcomes[index] = stored.get((name, items[index].business_id), error)

    def _rate(
        self,
        policy: ApplicationPolicy,
        indices: Sequence[int],
        outcomes: list[Outcome | None],
        now_ms: int,
    ) -> int:
        """Take a token for each item; those without one are refused. How many got one."""
        rate_per_s = policy.create_rate_per_s
        assert rate_per_s is not None
        burst = burst_of(rate_per_s, policy.create_burst)
        if rate_per_s > 0:
            grant = self.limiter.acquire(
                policy.name, CREATE, rate_per_s, burst, len(indices), now_ms
            )
            granted, retry_after_ms = grant.granted, grant.retry_after_ms
        else:  # no creates at all until the policy changes
            granted, retry_after_ms = 0, self.pending.refresh_ms
        if granted < len(indices):
            retry_after_s = max(1, math.ceil(retry_after_ms / 1000))
            error = RateLimited(
                f"application {policy.name!r} is over its creation rate of "
                f"{rate_per_s:g} alarms/s (create_rate_per_s, burst {burst}); "
                f"retry in {retry_after_s} s",
                retry_after_s=retry_after_s,
            )
            for index in indices[granted:]:
                outcomes[index] = error
        return granted


def _with_cutoff(item: NewAlarm, policy: ApplicationPolicy) -> NewAlarm:
    """The item with the application's default cutoff when it gave none."""
    if item.latest_ring_at is not None or policy.default_cutoff_ms is None:
        return item
    latest = min(item.target_ring_at + policy.default_cutoff_ms, MAX_EPOCH_MS)
    return replace(item, latest_ring_at=latest)
