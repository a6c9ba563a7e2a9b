"""Prometheus metrics for one service instance (a registry of its own, so tests can make many)."""

from __future__ import annotations

import bisect
import os
import resource
from collections import Counter as Tally
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

from clock_server.minute_stats import MinuteTally, RingTally

_LATENESS_BUCKETS_S = (
    0.001,
    0.002,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)

# Confirm latency: a local broker confirms in about a millisecond, a busy one in seconds.
_CONFIRM_BUCKETS_S = (0.0005, *_LATENESS_BUCKETS_S[:13])
# A preload pass: one indexed claim statement, or one per application while sharing a backlog.
_PRELOAD_BUCKETS_S = _LATENESS_BUCKETS_S[:13]


# A webhook call: a local endpoint answers in milliseconds, a slow one takes its timeout.
_CALL_BUCKETS_S = _LATENESS_BUCKETS_S[:14]

EXPOSITION_CONTENT_TYPE = CONTENT_TYPE_LATEST

OTHER = "other"  # the `application` label of every application not in the registry
# The loops and periodic jobs whose caught exceptions clock_loop_errors_total counts.
LOOPS = (
    "preload",
    "ring",
    "ring_batch",
    "liveness",
    "dead_letters",
    "webhook_answers",
    "webhook_call",
    "backlog",
    "pull_requeue",
    "pull_sweep",
    "schedule_planner",
    "purge",
    "stats_purge",
)


def application_label(application: str, registered: Callable[[str], bool] | None) -> str:
    """The `application` label of a metric whose series must stay bounded: a registered
    application's own name, `other` for any other; every name while no registry is known."""
    if registered is None or registered(application):
        return application
    return OTHER


def exposition(registry: CollectorRegistry) -> bytes:
    """The text Prometheus scrapes: this process's registry, or, when the service runs as
    several processes, every live process's values (PROMETHEUS_MULTIPROC_DIR)."""
    if "PROMETHEUS_MULTIPROC_DIR" in os.environ:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    return generate_latest(registry)


def resident_bytes() -> int:
    """This process's resident memory: /proc/self/statm's second field, in pages."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            pages = int(statm.read().split()[1])
    except (OSError, IndexError, ValueError):  # not Linux: the peak, which is all there is
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return pages * os.sysconf("SC_PAGE_SIZE")


def forget_process(pid: int) -> None:
    """Drop the live-only gauges of a process that has exited."""
    if "PROMETHEUS_MULTIPROC_DIR" in os.environ:
        multiprocess.mark_process_dead(pid)


class Metrics:
    """Counters the engine and the API update; served at /metrics.

    The counters of what happened to alarms carry an `application` label. Application names
    are validated (model.APPLICATION_PATTERN) and each one is a row of the registry, so there
    are as many series as applications in the registry, not one per business id or alarm.
    Code that counts many alarms at once groups them by application first (`count`): one
    update per application, not one per alarm.
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        # What this process counted per minute for the shared statistics, not yet written.
        self.minutes = MinuteTally()
        r = self.registry
        self.created = Counter(
            "clock_alarms_created",
            "Alarms stored by the API, and schedules' occurrences made",
            ["application"],
            registry=r,
        )
        self.cancelled = Counter(
            "clock_alarms_cancelled",
            "Pending alarms cancelled (a repeated cancel does not count)",
            ["application"],
            registry=r,
        )
        self.redriven = Counter(
            "clock_alarms_redriven",
            "Dead or expired alarms made pending again",
            ["application"],
            registry=r,
        )
        self.creates_rejected = Counter(
            "clock_creates_rejected",
            "Creates refused by an application's limits, or for an unregistered application",
            ["application", "code"],  # code: rate_limited, capacity_exceeded, unregistered
            registry=r,
        )
        self.rung = Counter(
            "clock_alarms_rung", "Alarms published and confirmed", ["application"], registry=r
        )
        self.publish_failures = Counter(
            "clock_publish_failures",
            "Publishes the broker refused (nacked, or returned as unroutable)",
            registry=r,
        )
        self.held = Counter(
            "clock_alarms_held",
            "Due alarms held back while the broker could not take them (no attempt spent)",
            ["application"],
            registry=r,
        )
        self.webhook_calls = Counter(
            "clock_webhook_calls",
            "Webhook calls by their answer: 2xx (rung), 3xx, 4xx, 5xx; or with no answer: "
            "timeout, refused (the connection or the address), error (any other failure)",
            ["application", "outcome"],
            registry=r,
        )
        self.webhook_call_duration = Histogram(
            "clock_webhook_call_seconds",
            "How long each webhook call took, answered or not",
            ["application"],
            buckets=_CALL_BUCKETS_S,
            registry=r,
        )
        self.webhook_slot_wait = Histogram(
            "clock_webhook_slot_wait_seconds",
            "How long webhook calls past their due time waited for a free call of their "
            "application (all webhook_max_in_flight busy on a slow receiver): not the engine's "
            "lateness",
            ["application"],
            buckets=_CALL_BUCKETS_S,
            registry=r,
        )
        self.pull_waiting = Gauge(
            "clock_pull_messages_waiting",
            "Pull messages ready and not leased, per registered pull application (set when "
            "/metrics is scraped)",
            ["application"],
            registry=r,
            multiprocess_mode="livemostrecent",
        )
        self.pull_oldest = Gauge(
            "clock_pull_oldest_waiting_seconds",
            "How long the oldest pull message ready and not leased has waited, 0 when none "
            "(set when /metrics is scraped)",
            ["application"],
            registry=r,
            multiprocess_mode="livemostrecent",
        )
        self.loop_errors = Counter(
            "clock_loop_errors",
            "Exceptions caught in one of the engine's loops or periodic jobs",
            ["loop"],
            registry=r,
        )
        for loop in LOOPS:
            self.loop_errors.labels(loop)
        # Each process writes its own series. Shared between processes, prometheus_client
        # adds the `pid` label of the file a value comes from ("liveall"); alone, this does.
        self._pid_label = "PROMETHEUS_MULTIPROC_DIR" not in os.environ
        labels = ["kind", "pid"] if self._pid_label else ["kind"]
        self.process_cpu = Gauge(
            "clock_process_cpu_seconds_total",
            "CPU time (user and system) this process has used, by process kind and pid",
            labels,
            registry=r,
            multiprocess_mode="liveall",
        )
        self.process_memory = Gauge(
            "clock_process_resident_memory_bytes",
            "Resident memory of this process, by process kind and pid",
            labels,
            registry=r,
            multiprocess_mode="liveall",
        )
        self.pulled = Counter(
            "clock_pull_messages_leased",
            "Messages leased to pullers (a message leased again after its lease ended counts "
            "again)",
            ["application"],
            registry=r,
        )
        self.expired = Counter(
            "clock_alarms_expired", "Alarms past latest_ring_at", ["application"], registry=r
        )
        self.dead = Counter(
            "clock_alarms_dead", "Alarms whose retries ran out", ["application"], registry=r
        )
        self.dead_letters = Counter(
            "clock_dead_letters_published",
            "Dead alarms published to the dead-letter exchange and confirmed",
            ["application"],
            registry=r,
        )
        self.purged = Counter(
            "clock_alarms_purged", "Finished alarms deleted once past their retention", registry=r
        )
        self.claimed = Counter(
            "clock_alarms_claimed", "Alarms the preloader read into the heap", registry=r
        )
        self.readings_from_start = Counter(
            "clock_preload_readings_from_start",
            "Times the preloader read its slots' window again from the start, by why",
            ["reason"],
            registry=r,
        )
        self.ids_given_up = Counter(
            "clock_preload_ids_given_up",
            "Alarm ids missing below the newest seen that the preloader stopped looking for "
            "by id, by why (a row among them is found by the next reading from the start)",
            ["reason"],
            registry=r,
        )
        self.released = Counter(
            "clock_claims_released",
            "Alarms a delivery limit held back past the window, made due at their turn",
            registry=r,
        )
        self.taken_over = Counter(
            "clock_claims_taken_over",
            "Alarms engines found dead held (webhook calls, or claims of a release before "
            "slots) that this engine gave back, due now",
            registry=r,
        )
        self.engines_dead = Counter(
            "clock_engines_declared_dead",
            "Silent engines this engine declared dead",
            registry=r,
        )
        self.fenced = Counter(
            "clock_engine_fenced",
            "Times this engine found itself declared dead and registered again",
            registry=r,
        )
        self.overdue = Gauge(
            "clock_overdue_alarms",
            "Pending alarms due over 5 s ago that no engine has claimed",
            registry=r,
            multiprocess_mode="livemax",
        )
        self.slots_owned = Gauge(
            "clock_engine_slots",
            "Slots this server's engine owns and claims from, of the 1,024 the engines share "
            "(its share of the work: clock_alarms_rung counts what it rang)",
            registry=r,
            multiprocess_mode="livemax",
        )
        self.heap_size = Gauge(
            "clock_heap_size",
            "Claimed alarms held in memory",
            registry=r,
            multiprocess_mode="livemax",
        )
        self.ring_lead_ms = Gauge(
            "clock_ring_lead_ms",
            "How far ahead of their due time the ring lanes lock rows now (ms)",
            registry=r,
            multiprocess_mode="livemax",
        )
        self.broker_up = Gauge(
            "clock_broker_up",
            "1 while the publisher's channel to the broker is open, else 0; NaN when this "
            "server runs no engine (set when /metrics is scraped)",
            registry=r,
            multiprocess_mode="livemostrecent",
        )
        self.database_up = Gauge(
            "clock_database_up",
            "1 while the database answers, else 0 (set when /metrics is scraped)",
            registry=r,
            multiprocess_mode="livemostrecent",
        )
        self.live_engines = Gauge(
            "clock_live_engines",
            "Engines in clock_engine not declared dead that beat within "
            "CLOCK_ENGINE_DEAD_AFTER_S; NaN while the database is down (set when /metrics "
            "is scraped)",
            registry=r,
            multiprocess_mode="livemostrecent",
        )
        self.throttled = Counter(
            "clock_ring_throttled",
            "Times an alarm was held back by its application's delivery rate",
            ["application"],
            registry=r,
        )
        self.throttle_delay = Histogram(
            "clock_ring_throttle_delay_seconds",
            "How long an application's delivery rate held an alarm past its due time "
            "(not part of clock_ring_lateness_seconds)",
            buckets=_LATENESS_BUCKETS_S,
            registry=r,
        )
        self.lateness = Histogram(
            "clock_ring_lateness_seconds",
            "Publish time (amqp), call start (webhook) or the moment the message is ready "
            "(pull) minus due time",
            ["application", "channel"],
            buckets=_LATENESS_BUCKETS_S,
            registry=r,
        )
        self.confirm_latency = Histogram(
            "clock_publish_confirm_seconds",
            "From handing a batch of messages to the broker to its last confirm, per batch",
            buckets=_CONFIRM_BUCKETS_S,
            registry=r,
        )
        self.preload_duration = Histogram(
            "clock_preload_duration_seconds",
            "How long one preload pass took (claiming included)",
            buckets=_PRELOAD_BUCKETS_S,
            registry=r,
        )
        self.pending = Gauge(
            "clock_pending_alarms",
            "Pending alarms per application, from the registry's live counts (set when "
            "/metrics is scraped)",
            ["application"],
            registry=r,
            multiprocess_mode="livemostrecent",
        )
        self._pending_applications: set[str] = set()
        self._pull_applications: set[str] = set()
        self.registered: Callable[[str], bool] | None = None

    def use_registry(self, registered: Callable[[str], bool]) -> None:
        """Name an application in the bounded labels only when `registered` says it is."""
        self.registered = registered

    def label(self, application: str) -> str:
        """The bounded `application` label (`application_label`)."""
        return application_label(application, self.registered)

    @staticmethod
    def count(counter: Counter, applications: Iterable[str] | Mapping[str, int]) -> None:
        """Add to `counter` one per item of `applications` (names, or name -> count): one
        update per application."""
        tally = applications if isinstance(applications, Mapping) else Tally(applications)
        for application, count in tally.items():
            if count:
                counter.labels(application).inc(count)

    def count_pull_lapses(
        self,
        now_ms: int,
        expired: Mapping[str, int],
        dead: Mapping[str, int],
        retried: Mapping[str, int] | None = None,
    ) -> None:
        """What a pull or the sweep found of the pull channel's messages at `now_ms`, by
        application: expired, dead, and leases ended unacked then leased again (`retried`).
        Each is a failed delivery of the per-minute statistics, in the minute it was found."""
        Metrics.count(self.expired, expired)
        Metrics.count(self.dead, dead)
        failed = Tally(expired) + Tally(dead) + Tally(retried or {})
        if failed:
            self.minutes.rang(now_ms, {name: RingTally(failed=n) for name, n in failed.items()})

    def count_cancelled(self, application: str, count: int = 1) -> None:
        """`count` pending alarms of `application` cancelled."""
        if count:
            self.cancelled.labels(application).inc(count)

    def count_redriven(self, application: str, count: int) -> None:
        """`count` alarms of `application` made pending again by a re-drive."""
        if count:
            self.redriven.labels(application).inc(count)

    def set_pending(self, pending: Mapping[str, int]) -> None:
        """Each application's pending alarms; an application this process showed before and
        `pending` leaves out has none left."""
        for application in self._pending_applications - pending.keys():
            self.pending.labels(application).set(0)
        for application, count in pending.items():
            self.pending.labels(application).set(count)
        self._pending_applications |= pending.keys()

    def set_pull_waiting(self, waiting: Mapping[str, tuple[int, float]]) -> None:
        """Each pull application's (messages waiting, seconds the oldest has waited); one this
        process showed before and `waiting` leaves out has none."""
        for application in self._pull_applications - waiting.keys():
            self.pull_waiting.labels(application).set(0)
            self.pull_oldest.labels(application).set(0)
        for application, (count, oldest_s) in waiting.items():
            self.pull_waiting.labels(application).set(count)
            self.pull_oldest.labels(application).set(oldest_s)
        self._pull_applications |= waiting.keys()

    def record_process(self, kind: str) -> None:
        """This process's CPU time and resident memory now, under its kind and pid."""
        times = os.times()
        labels = (kind, str(os.getpid())) if self._pid_label else (kind,)
        self.process_cpu.labels(*labels).set(times.user + times.system)
        self.process_memory.labels(*labels).set(resident_bytes())

    def loop_error(self, loop: str) -> None:
        """An exception was caught in `loop`, one of LOOPS."""
        self.loop_errors.labels(loop).inc()

    def observe_slot_waits(self, waits: Iterable[tuple[str, float]]) -> None:
        """(application, seconds) a webhook call past its due time waited for a free call."""
        by_label: dict[str, list[float]] = defaultdict(list)
        for application, seconds in waits:
            by_label[self.label(application)].append(seconds)
        for application, values in by_label.items():
            self._observe_many(self.webhook_slot_wait.labels(application), values)

    def observe_webhook_calls(self, calls: Iterable[tuple[str, str, float | None]]) -> None:
        """Webhook calls recorded together, (application, outcome, seconds it took or None
        when no call was made) each: one update per label set and bucket touched."""
        outcomes: Tally[tuple[str, str]] = Tally()
        durations: dict[str, list[float]] = defaultdict(list)
        for application, outcome, seconds in calls:
            label = self.label(application)
            outcomes[label, outcome] += 1
            if seconds is not None:
                durations[label].append(seconds)
        for (application, outcome), count in outcomes.items():
            self.webhook_calls.labels(application, outcome).inc(count)
        for application, values in durations.items():
            self._observe_many(self.webhook_call_duration.labels(application), values)

    def observe_lateness(self, lateness: Iterable[tuple[str, str, float]]) -> None:
        """Record a ring batch's lateness, (application, channel, seconds) per alarm, under
        each application's bounded label: one update per bucket touched and label set, not
        per alarm."""
        grouped: dict[tuple[str, str], list[float]] = defaultdict(list)
        labels: dict[str, str] = {}  # a batch holds few applications and many alarms
        for application, channel, seconds in lateness:
            label = labels.get(application)
            if label is None:
                label = labels[application] = self.label(application)
            grouped[label, channel].append(seconds)
        for (application, channel), values in grouped.items():
            self._observe_many(self.lateness.labels(application, channel), values)

    @staticmethod
    def _observe_many(histogram: Histogram, seconds: Sequence[float]) -> None:
        """In multiprocess mode every histogram update writes a memory-mapped file under a
        lock; per alarm that showed in the burst profile. Falls back to one observe() per
        value if prometheus_client's histogram ever changes shape."""
        bounds = getattr(histogram, "_upper_bounds", None)
        buckets = getattr(histogram, "_buckets", None)
        total = getattr(histogram, "_sum", None)
        if bounds is None or buckets is None or total is None:
            for value in seconds:
                histogram.observe(value)
            return
        for index, count in Tally(bisect.bisect_left(bounds, v) for v in seconds).items():
            buckets[index].inc(count)
        total.inc(sum(seconds))
