"""What the request handlers use, built once by the entry point and kept on the Flask app."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from clock_server.api.admission import Admission
from clock_server.api.long_polls import LongPollSlots
from clock_server.api.tokens import LiveTokens, TokenTable
from clock_server.metrics import Metrics
from clock_server.model import Alarm, NewAlarm
from clock_server.settings import Settings
from clock_server.store.alarms import AlarmStore
from clock_server.store.applications import CachedPolicies, SqlApplicationRegistry
from clock_server.store.counts import AlarmCounts
from clock_server.store.engine_registry import SqlEngineRegistry
from clock_server.store.group_commit import GroupCommit
from clock_server.store.history import AlarmHistory
from clock_server.store.interventions import AlarmInterventions
from clock_server.store.pull_backlog import SqlPullBacklog
from clock_server.store.rate_buckets import SharedRateLimiter
from clock_server.timesource import Clock


class DueNotifier(Protocol):
    """What the API needs of the engine: to be told an alarm falls due at `due_ms`."""

    def notify_due(self, due_ms: int) -> None: ...


class HealthSource(Protocol):
    """Where /healthz learns whether the broker is reachable."""

    def is_healthy(self) -> bool: ...


class LoopSource(Protocol):
    """Where /livez learns until when each of the engine's loops is known to be well: epoch ms
    by loop name, None for a loop never seen well."""

    def loop_beats(self) -> Mapping[str, int | None]: ...


PENDING_COUNTS_MS = 30_000
PULL_WAITING_MS = 5_000

T = TypeVar("T")


class Recent(Generic[T]):
    """The last value read, read again once it is older than `max_age_ms`."""

    def __init__(self, max_age_ms: int) -> None:
        self.max_age_ms = max_age_ms
        self._value: T | None = None
        self._read_at_ms: int | None = None
        self._lock = threading.Lock()

    def get(self, now_ms: int, read: Callable[[], T]) -> T:
        with self._lock:
            fresh = self._read_at_ms is not None and now_ms - self._read_at_ms < self.max_age_ms
            if not fresh or self._value is None:
                self._value = read()
                self._read_at_ms = now_ms
            return self._value


@dataclass
class Services:
    """Everything a request handler uses, built by `clock_server.runtime.build_api`."""

    settings: Settings
    store: AlarmStore
    clock: Clock
    metrics: Metrics
    single_creates: GroupCommit[tuple[NewAlarm, int], tuple[Alarm, bool]]
    history: AlarmHistory  # each alarm's events
    interventions: AlarmInterventions  # re-drive, bulk actions
    counts: AlarmCounts  # counting on count-triggered alarms
    applications: SqlApplicationRegistry
    policies: CachedPolicies  # the registry as of a few seconds ago
    limiter: SharedRateLimiter  # creation rates, service-wide
    admission: Admission  # registration and limits at creation
    engines: SqlEngineRegistry  # for clock_live_engines
    long_polls: LongPollSlots  # how many long polls wait at once
    pull_backlog: SqlPullBacklog  # for clock_pull_messages_waiting and its oldest's age
    engine: DueNotifier | None = None  # None when this process runs no engine
    publisher: HealthSource | None = None  # the publisher, or its health seen from a worker
    # The tokens, or those in force now where CLOCK_TOKENS_FILE is reloaded; empty: off.
    tokens: TokenTable | LiveTokens = field(default_factory=TokenTable)
    loops: LoopSource | None = None  # the engine's loops, here or in the engine process
    # clock_pending_alarms counts every pending alarm, seconds of work on millions of them:
    # read at most every PENDING_COUNTS_MS by each process, however often it is scraped.
    pending_counts: Recent[dict[str, int]] = field(
        default_factory=lambda: Recent(PENDING_COUNTS_MS)
    )
    # One capped statement per pull application: read at most every PULL_WAITING_MS.
    pull_waiting: Recent[dict[str, tuple[int, float]]] = field(
        default_factory=lambda: Recent(PULL_WAITING_MS)
    )
    process_kind: str = "server"  # this process's, in clock_process_* ("web" in a worker)
