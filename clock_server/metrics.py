"""Prometheus metrics for one service instance (a registry of its own, so tests can make many)."""

from __future__ import annotations

import bisect
import os
from collections import Counter as Tally
from collections.abc import Iterable, Mapping, Sequence

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

from clock_server.minute_stats import MinuteTally

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


EXPOSITION_CONTENT_TYPE = CONTENT_TYPE_LATEST


def exposition(registry: CollectorRegistry) -> bytes:
    """The text Prometheus scrapes: this process's registry, or, when the service runs as
    several processes, every live process's values (PROMETHEUS_MULTIPROC_DIR)."""
    if "PROMETHEUS_MULTIPROC_DIR" in os.environ:
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    return generate_latest(registry)


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
            "clock_alarms_created", "Alarms stored by the API", ["application"], registry=r
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
            "Webhook calls by their answer: 2xx (rung), 3xx, 4xx, 5xx, or error (no answer: a "
            "timeout, a refused connection, a refused address)",
            ["application", "outcome"],
            registry=r,
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
        self.claimed = Counter("clock_alarms_claimed", "Claims taken by the preloader", registry=r)
        self.released = Counter("clock_claims_released", "Claims given back", registry=r)
        self.taken_over = Counter(
            "clock_claims_taken_over",
            "Claims of engines found dead that this engine gave back for claiming",
            registry=r,
        )
        self.engines_dead = Counter(
            "clock_engines_declared_dead",
            "Silent engines whose claims this engine took over",
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
            "Publish time minus due time",
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

    @staticmethod
    def count(counter: Counter, applications: Iterable[str] | Mapping[str, int]) -> None:
        """Add to `counter` one per item of `applications` (names, or name -> count): one
        update per application."""
        tally = applications if isinstance(applications, Mapping) else Tally(applications)
        for application, count in tally.items():
            if count:
                counter.labels(application).inc(count)

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

    def observe_lateness(self, seconds: Sequence[float]) -> None:
        """Record a ring batch's lateness values: one update per bucket touched, not per alarm.

        In multiprocess mode every histogram update writes a memory-mapped file under a lock;
        per alarm that showed in the burst profile. Falls back to one observe() per value if
        prometheus_client's histogram ever changes shape.
        """
        if not seconds:
            return
        histogram = self.lateness
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
