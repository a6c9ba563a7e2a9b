"""Building what the API's request handlers use (`Services`) on an open store. Nothing starts
here."""

from __future__ import annotations

from clock_server.api.admission import Admission
from clock_server.api.long_polls import LongPollSlots
from clock_server.api.services import DueNotifier, HealthSource, LoopSource, Services
from clock_server.api.tokens import LiveTokens, TokenTable
from clock_server.errors import Unavailable
from clock_server.metrics import Metrics
from clock_server.settings import Settings
from clock_server.store.alarms import AlarmStore
from clock_server.store.applications import CachedPolicies, SqlApplicationRegistry
from clock_server.store.counts import AlarmCounts
from clock_server.store.engine_registry import SqlEngineRegistry
from clock_server.store.group_commit import GroupCommit
from clock_server.store.history import AlarmHistory
from clock_server.store.interventions import AlarmInterventions
from clock_server.store.pull_backlog import SqlPullBacklog
from clock_server.store.rate_buckets import SharedRateLimiter, SqlTokenBuckets
from clock_server.store.secret_box import SecretBox
from clock_server.timesource import Clock


def build_services(
    settings: Settings,
    store: AlarmStore,
    clock: Clock,
    metrics: Metrics | None = None,
    engine: DueNotifier | None = None,
    publisher: HealthSource | None = None,
    tokens: TokenTable | LiveTokens | None = None,
    loops: LoopSource | None = None,
    process_kind: str = "server",
) -> Services:
    """The API's services on `store`: `engine` is told of alarms falling due (None: no
    engine in this process), `publisher` says whether the broker is reachable, `loops` how
    the engine's loops are (None: /livez answers for this process alone); no `tokens`:
    authentication is off. `process_kind` names this process in clock_process_*."""
    metrics = metrics or Metrics()
    applications = SqlApplicationRegistry(store, SecretBox.from_setting(settings.secret_keys))
    refresh_ms = int(settings.application_refresh_s * 1000)
    policies = CachedPolicies(applications.all, clock.now_ms, refresh_ms)
    limiter = SharedRateLimiter(SqlTokenBuckets(store))
    admission = Admission(settings, store, applications, policies, limiter, clock, metrics)
    single_creates: GroupCommit = GroupCommit(
        store.create_each,
        lambda request: store.create(*request),
        shared_errors=(Unavailable,),
    )
    return Services(
        settings,
        store,
        clock,
        metrics,
        single_creates=single_creates,
        history=AlarmHistory(store),
        interventions=AlarmInterventions(store),
        counts=AlarmCounts(store),
        applications=applications,
        policies=policies,
        limiter=limiter,
        admission=admission,
        engines=SqlEngineRegistry(store),
        long_polls=LongPollSlots(settings.http_threads),
        pull_backlog=SqlPullBacklog(store),
        engine=engine,
        publisher=publisher,
        tokens=tokens if tokens is not None else TokenTable(),
        loops=loops,
        process_kind=process_kind,
    )
