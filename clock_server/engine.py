"""The engine: a preload thread and a ring thread around one bounded heap."""

from __future__ import annotations

import logging
import time

from clock_server.backoff import RetryPolicy
from clock_server.claims import ClaimStore
from clock_server.db import open_ahead
from clock_server.heap import ClaimHeap
from clock_server.metrics import Metrics
from clock_server.preloader import Preloader
from clock_server.publishing import Publisher
from clock_server.ringer import Ringer
from clock_server.settings import Settings
from clock_server.store import AlarmStore
from clock_server.timesource import Clock
from clock_server.worker import Waker, Worker

log = logging.getLogger(__name__)

WAKE_MARGIN_MS = 500


def wake_horizon_ms(settings: Settings) -> int:
    """How soon an alarm must fall due to be worth waking the preloader for.

    The next regular pass comes within one interval and claims the whole window; only alarms
    due before then (plus time for the pass itself) need a wake-up."""
    return min(settings.preload_window_ms, int(settings.preload_interval_s * 1000) + WAKE_MARGIN_MS)


class Engine:
    """Claims alarms as they come within the window and rings them when due.

    Constructing it does nothing; start() starts both threads, stop() hands everything back.
    """

    def __init__(
        self,
        settings: Settings,
        store: AlarmStore,
        publisher: Publisher,
        clock: Clock,
        metrics: Metrics,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.metrics = metrics
        self.publisher = publisher
        self.claims = ClaimStore(store)
        self.heap = ClaimHeap(settings.heap_size)
        self.preload_waker = Waker()
        self.ring_waker = Waker()
        self.preloader = Preloader(
            self.claims,
            self.heap,
            clock,
            self.ring_waker,
            metrics,
            window_ms=settings.preload_window_ms,
            interval_s=settings.preload_interval_s,
            lease_ms=settings.lease_ms,
            batch=settings.claim_batch,
        )
        retry = RetryPolicy(
            base_ms=int(settings.retry_base_s * 1000),
            cap_ms=int(settings.retry_cap_s * 1000),
            max_retries=settings.retry_max,
        )
        self.ringer = Ringer(
            self.claims,
            self.heap,
            publisher,
            clock,
            metrics,
            retry,
            batch=settings.ring_batch,
            publish_timeout_s=settings.publish_timeout_s,
            lanes=settings.ring_lanes,
            lead_ms=settings.ring_lead_ms,
            lead_max_ms=settings.ring_lead_max_ms,
            on_lane_free=self.ring_waker.wake,
        )
        self._preload_worker = Worker("clock-preload", self.preloader.run_once, self.preload_waker)
        self._ring_worker = Worker("clock-ring", self.ringer.run_once, self.ring_waker)
        self._started = False
        self._wake_horizon_ms = wake_horizon_ms(settings)

    def start(self) -> None:
        try:
            # a connection per lane, the preloader's and one for maintenance
            open_ahead(self.claims.store.engine, self.settings.ring_lanes + 2)
        except Exception as error:  # the workers connect when the database is back
            log.warning("could not connect ahead: %s", error, extra={"action": "connect_failed"})
        self._ring_worker.start()
        self._preload_worker.start()
        self._started = True
        log.info("engine %s started", self.settings.instance_id, extra={"action": "engine_started"})

    def notify_due(self, due_ms: int) -> None:
        """An alarm was written that falls due at `due_ms`: claim it now if the next regular
        preload pass might come too late for it."""
        if due_ms <= self.clock.now_ms() + self._wake_horizon_ms:
            self.preloader.rescan()
            self.preload_waker.wake()

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop claiming, finish the ring batch in hand, give every claim back. Bounded in time."""
        if not self._started:
            return
        self._started = False
        deadline = time.monotonic() + (timeout_s or self.settings.shutdown_timeout_s)
        self._preload_worker.stop()
        self._ring_worker.stop()
        for worker in (self._preload_worker, self._ring_worker):
            if not worker.join(max(deadline - time.monotonic(), 0.1)):
                log.error(
                    "%s did not stop in time", worker.name, extra={"action": "engine_stop_late"}
                )
        self.ringer.close()
        held = self.heap.drain()
        try:
            released = self.claims.release(held, self.clock.now_ms())
            log.info(
                "engine stopped; gave back %d of %d claims",
                released,
                len(held),
                extra={"action": "engine_stopped"},
            )
        except Exception:
            log.exception(
                "could not give back %d claims; they return when their lease ends",
                len(held),
                extra={"action": "release_failed"},
            )
