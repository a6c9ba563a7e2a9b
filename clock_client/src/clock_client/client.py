"""HTTP client for the clock service's /v1 API."""

from __future__ import annotations

import builtins
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, TypeVar

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from . import calls, schedules
from .calls import MAX_BATCH, Call
from .errors import ClockError, NotFound, Unavailable
from .models import (
    AckResult,
    Alarm,
    AlarmEvent,
    AlarmPage,
    Application,
    BatchResult,
    Counted,
    PulledMessage,
    timing_fields,
)
from .reports import Overview, Stats, WhoAmI
from .retries import RETRY_METHODS, RETRY_STATUSES
from .schedules import Occurrence, Schedule, SchedulePage

__all__ = ["MAX_BATCH", "ClockClient"]

logger = logging.getLogger(__name__)
T = TypeVar("T")


class ClockClient:
    """Talks to one clock server over a pooled keep-alive session.

    ``timeout`` (seconds) bounds connecting and each read. Failed connections and
    502/503/504 answers are retried up to ``retries`` times with exponential backoff
    (``backoff_factor``) for the idempotent calls only: every read (get, list, events,
    applications, application, whoami, overview, stats, health and the other probes), cancel,
    create, batch_create, the PUT of configure, webhook_secret, redrive, the bulk actions,
    pull (what a lost answer leased comes back when its lease ends) and ack; update and the
    PATCH of configure are sent once. Every failure raises a subclass of ClockError. Use
    one client per thread; close it (or use ``with``) to release its connections.
    AsyncClockClient has the same methods for asyncio.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        timeout: float = 5.0,
        retries: int = 3,
        *,
        backoff_factor: float = 0.2,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self._session = requests.Session()
        retry = Retry(
            total=retries,
            connect=retries,
            read=retries,
            status=retries,
            other=0,
            allowed_methods=RETRY_METHODS,
            status_forcelist=RETRY_STATUSES,
            backoff_factor=backoff_factor,
            raise_on_status=False,  # hand back the last 5xx so it maps to Unavailable
            # A 429 is the caller's to handle (RateLimited.retry_after_s), not slept on here.
            respect_retry_after_header=False,
        )
        adapter = HTTPAdapter(max_retries=retry)
        self._session.mount("http://", adapter)
        self._session.mount("https://", adapter)
        self._session.headers["Accept"] = "application/json"
        if token:
            self._session.headers["Authorization"] = f"Bearer {token}"

    def __enter__(self) -> ClockClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close pooled connections; the client must not be used afterwards."""
        self._session.close()

    def create(
        self,
        application: str,
        business_id: str,
        payload: str,
        *,
        target_ring_at: int | datetime | None = None,
        delay: float | timedelta | None = None,
        latest_ring_at: int | datetime | None = None,
        ring_after_count: int | None = None,
        count_only: bool = False,
    ) -> Alarm:
        """Create an alarm due at ``target_ring_at`` (epoch ms or aware datetime) or after
        ``delay`` (seconds or timedelta); give exactly one.

        With ``ring_after_count`` N it rings once N were counted on it (``count()``), or at
        its time, whichever comes first; ``count_only=True`` (and no time) rings by the
        count alone.

        Idempotent: if (application, business_id) exists, the stored alarm is returned
        unchanged (compare ``payload``/``target_ring_at`` if that matters to you).
        ``latest_ring_at`` is the instant after which the alarm expires instead of ringing.
        Raises ValidationError for a rejected request, RateLimited (``retry_after_s``) or
        CapacityExceeded when the application is over one of its limits.
        """
        call = calls.create(
            application,
            business_id,
            payload,
            target_ring_at=target_ring_at,
            delay=delay,
            latest_ring_at=latest_ring_at,
            ring_after_count=ring_after_count,
            count_only=count_only,
        )
        return self._send(call)

    def count(
        self,
        application: str,
        business_id: str,
        *,
        increment_id: str | None = None,
        by: int = 1,
    ) -> Counted:
        """Count ``by`` (1 to 1,000) on a count-triggered alarm. With ``increment_id``, a
        repeat (a retry) counts nothing and answers ``counted`` False. Raises Conflict once
        the alarm rang, was cancelled or its count was reached; NotFound if unknown."""
        return self._send(calls.count(application, business_id, increment_id, by))

    def batch_create(self, items: Sequence[Mapping[str, Any]]) -> builtins.list[BatchResult]:
        """Create many alarms; returns one BatchResult per item, in order.

        Each item is a mapping with create()'s argument names (``application``,
        ``business_id``, ``payload``, ``target_ring_at`` or ``delay``, optional
        ``latest_ring_at``). An item the server rejects by a rule of its own (a cutoff
        before its target, a payload over the limit, another application's, a limit of the
        application) gives a result with ``error`` set; it does not raise. An item that is
        not a create request at all (neither time, or both) makes the server refuse its
        request: ValidationError naming the item, none of that request's items created.
        More than 1000 items are sent in several requests. Raises TypeError/ValueError for
        an item the client cannot encode.
        """
        results: builtins.list[BatchResult] = []
        for call in calls.batch_creates(items):
            batch: builtins.list[BatchResult] = self._send(call)
            results.extend(batch)
        return results

    def get(self, application: str, business_id: str) -> Alarm:
        """The alarm for (application, business_id); raises NotFound if there is none."""
        return self._send(calls.get(application, business_id))

    def events(self, application: str, business_id: str) -> builtins.list[AlarmEvent]:
        """The alarm's history, oldest first: created, moved, cancelled, each failed publish
        with its error, rung, expired, dead, re-driven. Raises NotFound if there is no such
        alarm."""
        return self._send(calls.events(application, business_id))

    def update(
        self,
        application: str,
        business_id: str,
        *,
        target_ring_at: int | datetime | None = None,
        delay: float | timedelta | None = None,
        latest_ring_at: int | datetime | None = None,
        payload: str | None = None,
        clear_latest_ring_at: bool = False,
    ) -> Alarm:
        """Change a pending alarm; only the arguments given are sent. Returns the new state.

        Give at most one of ``target_ring_at``/``delay``; ``clear_latest_ring_at=True``
        removes the expiry cutoff. Raises Conflict (with ``.status``) when the alarm is
        no longer pending, NotFound if unknown. Never retried: after an Unavailable with
        no status code, get() the alarm to learn whether the update was applied.
        """
        call = calls.update(
            application,
            business_id,
            target_ring_at,
            delay,
            latest_ring_at,
            payload,
            clear_latest_ring_at,
        )
        return self._send(call)

    def cancel(self, application: str, business_id: str) -> Alarm:
        """Cancel a pending alarm and return it (status "cancelled").

        Idempotent: cancelling a cancelled alarm returns it again. Raises Conflict when
        it already rang, expired or died, NotFound if unknown.
        """
        return self._send(calls.cancel(application, business_id))

    def list_page(
        self,
        application: str | None = None,
        status: str | None = None,
        limit: int = 100,
        cursor: str | None = None,
        *,
        business_id_prefix: str | None = None,
        due_from: int | datetime | None = None,
        due_to: int | datetime | None = None,
    ) -> AlarmPage:
        """One page of at most ``limit`` alarms matching the filters given.

        ``business_id_prefix`` needs ``application`` and pages in business_id order;
        ``due_from`` (inclusive) and ``due_to`` (exclusive) bound ``next_try_time`` and page
        in that order; otherwise pages go in id order. Pass ``next_cursor`` back with the
        same filters.
        """
        filters = calls.filter_fields(application, status, business_id_prefix, due_from, due_to)
        return self._send(calls.list_page(filters, limit, cursor))

    def health(self) -> dict[str, Any]:
        """The server's health report (``GET /healthz``), e.g. ``{"status": "ok", "database":
        "ok", "broker": "ok", "channels": {"amqp": "ok"}}``.

        ``"status"`` is ``"ok"``; ``"degraded"`` (a 200) while the broker or a channel is
        down, when alarms are still taken and kept; or ``"unavailable"`` (a 503, returned
        too) while the database is down. The failing part says ``"down"``; other failures
        raise.
        """
        return self._send(calls.health())

    def list(
        self,
        application: str | None = None,
        status: str | None = None,
        limit: int = 100,
        *,
        business_id_prefix: str | None = None,
        due_from: int | datetime | None = None,
        due_to: int | datetime | None = None,
    ) -> Iterator[Alarm]:
        """Iterate over every matching alarm (filters as in ``list_page``), fetching pages of
        ``limit`` lazily.

        ``limit`` is the page size, not a cap on the total. Alarms changed while the
        iteration runs may or may not show up (keyset pagination, no snapshot).
        """
        cursor: str | None = None
        while True:
            page = self.list_page(
                application,
                status,
                limit,
                cursor,
                business_id_prefix=business_id_prefix,
                due_from=due_from,
                due_to=due_to,
            )
            yield from page.alarms
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def redrive(
        self,
        application: str,
        business_id: str,
        *,
        target_ring_at: int | datetime | None = None,
        delay: float | timedelta | None = None,
    ) -> Alarm:
        """Make a dead or expired alarm pending again with a fresh retry budget, due now, at
        ``target_ring_at`` or after ``delay``; returns it. Raises Conflict (with
        ``.status``) for any other status, NotFound if unknown. A re-drive that landed but
        whose answer was lost is sent again, and then answers Conflict with status
        "pending": get() the alarm to tell."""
        return self._send(calls.redrive(application, business_id, target_ring_at, delay))

    def redrive_where(
        self,
        application: str | None = None,
        status: str | None = None,
        *,
        business_id_prefix: str | None = None,
        due_from: int | datetime | None = None,
        due_to: int | datetime | None = None,
        target_ring_at: int | datetime | None = None,
        delay: float | timedelta | None = None,
    ) -> int:
        """Re-drive every dead or expired alarm matching the filters (as in ``list_page``;
        ``status`` dead or expired, or None for both), due now, at ``target_ring_at`` or
        after ``delay``; returns how many. Needs an admin token."""
        body = calls.filter_fields(application, status, business_id_prefix, due_from, due_to)
        return self._bulk("redrive", body | timing_fields(target_ring_at, delay))

    def cancel_where(
        self,
        application: str | None = None,
        *,
        business_id_prefix: str | None = None,
        due_from: int | datetime | None = None,
        due_to: int | datetime | None = None,
    ) -> int:
        """Cancel every pending alarm matching the filters (as in ``list_page``); returns
        how many. Needs an admin token."""
        body = calls.filter_fields(application, None, business_id_prefix, due_from, due_to)
        return self._bulk("cancel", body)

    def applications(self, counts: bool = True) -> builtins.list[Application]:
        """Every application, by name, with its settings and live counts: the registered
        ones, and any other that has alarms (``registered`` False). ``counts=False`` leaves
        the counts out (None), which over millions of alarms answers in milliseconds rather
        than seconds. Needs an admin token (Forbidden otherwise)."""
        return self._send(calls.applications(counts))

    def application(self, name: str) -> Application:
        """The registered application ``name`` with its settings and live counts; NotFound
        if it is not registered. Needs an admin token (Forbidden otherwise)."""
        return self._send(calls.application(name))

    def configure(self, name: str, *, replace: bool = False, **settings: Any) -> Application:
        """Set some of the application's settings and return it as it now is.

        ``settings`` are any of ``create_rate_per_s``, ``create_burst``, ``max_pending``,
        ``ring_rate_per_s``, ``ring_burst``, ``retry_base_s``, ``retry_cap_s``,
        ``retry_max``, ``default_cutoff_ms``, ``retention_days``, ``channel`` ("amqp",
        "webhook" or "pull"), ``webhook_url``, ``webhook_timeout_s``,
        ``webhook_max_in_flight`` and ``pull_visibility_s``; None clears one (no limit, or
        the server's default). Needs an admin token (Forbidden otherwise).

        By default only the settings given change (PATCH), and those not given keep their
        values. An application that is not registered yet gets a 404 there and is then
        registered with a PUT of the settings given, the others left at None. Between the
        two requests another caller may register it; its settings are then replaced too.
        With no settings, the application is registered if it is not and returned as is.

        ``replace=True`` sends a PUT: every setting not given becomes None, and the
        application is registered if needed. PUT is retried like the other idempotent
        calls; PATCH is sent once (after an Unavailable without a status code, read
        ``application()`` to see whether it was applied).

        Raises TypeError for a name that is not a setting, ValidationError (with
        ``field``) for a value the server refuses.
        """
        calls.check_settings(settings)
        if not replace:
            try:
                if not settings:
                    return self.application(name)
                return self._send(calls.configure(name, settings, replace=False))
            except NotFound:
                pass  # not registered yet: the PUT below registers it
        return self._send(calls.configure(name, settings, replace=True))

    def webhook_secret(
        self, name: str, *, rotate: bool = False, overlap_s: float | None = None
    ) -> str | None:
        """The secret that signs the application's webhooks (None before it first took the
        webhook channel); with ``rotate=True``, a new one replaces it first, and the old one
        goes on signing beside it for ``overlap_s`` (the server's default is a day; 0 stops
        it at once). Needs an admin token (Forbidden otherwise)."""
        return self._send(calls.webhook_secret(name, rotate, overlap_s))

    def pull(
        self, application: str, max: int = 10, wait_s: float = 0.0
    ) -> builtins.list[PulledMessage]:
        """Lease up to ``max`` (1 to 100) of a pull application's due messages; when none is
        ready, the server waits up to ``wait_s`` (0 to 20) seconds for one. Each stays
        hidden from other pullers until its ``leased_until``: ``ack`` it by then, or it is
        leased again with the next ``attempt`` (so deduplicate on its id), until its
        application's retries are spent and it is dead. Returns [] when nothing came.

        The read timeout is the client's ``timeout`` plus ``wait_s``. Raises Conflict
        (``.status`` names the channel) when the application does not take the pull
        channel, ValidationError for a ``max`` or ``wait_s`` out of range.
        """
        return self._send(calls.pull(application, max, wait_s))

    def ack(self, application: str, ids: Iterable[int | str]) -> AckResult:
        """Mark rung the pulled messages ``ids`` (1 to 1,000) of ``application``, whether or
        not their lease has ended. An id that is unknown, another application's, or already
        rung, expired or dead is returned in ``not_acked`` and changes nothing; so is one
        acked by an earlier try of a request retried after a lost answer."""
        return self._send(calls.ack(application, ids))

    def whoami(self) -> WhoAmI:
        """What this client's token may do (``GET /v1/whoami``): its applications (``"*"`` for
        all) and whether it is read-only; never the token itself."""
        return self._send(calls.whoami())

    def overview(self) -> Overview:
        """What the console's overview shows (``GET /v1/overview``): counts by status, due and
        overdue, by application (each read with a bounded cost, so possibly ``capped``), the
        recent lateness, and the engines' health. Needs a token of every application
        (Forbidden otherwise)."""
        return self._send(calls.overview())

    def stats(self, minutes: int = 60, application: str | None = None) -> Stats:
        """The per-minute statistics of the last ``minutes`` (1 to 1440; ``GET /v1/stats``):
        alarms created, rung and failed, and the engine's lateness, by application and in
        total (``"*"``). A token of every application sees every application (or the one
        named), an application's token its own (Forbidden for another's). Without
        ``application``, at most 20 applications, the busiest, get a series of their own
        (fewer for more than 685 minutes); ``left_out`` says how many more are in the total
        only."""
        return self._send(calls.stats(minutes, application))

    def schedule(
        self,
        application: str,
        schedule_id: str,
        payload: str,
        *,
        cron: str | None = None,
        every_s: int | None = None,
        timezone: str = "UTC",
        start_at: int | None = None,
        end_at: int | None = None,
        cutoff_ms: int | None = None,
        catch_up: str = "skip",
        catch_up_max: int = 100,
        paused: bool = False,
    ) -> Schedule:
        """Create or replace a recurring schedule (``PUT /v1/schedules/...``): exactly one of
        ``cron`` (5 fields, or 6 with seconds) and ``every_s``, read in the IANA ``timezone``.
        Each occurrence rings like an alarm of ``application``; one missed while clock was
        down follows ``catch_up`` (``skip``, ``latest``, or ``all``: the latest
        ``catch_up_max``). ValidationError names the field of a bad one."""
        fields = {"cron": cron, "every_s": every_s, "timezone": timezone, "payload": payload,
                  "start_at": start_at, "end_at": end_at, "cutoff_ms": cutoff_ms,
                  "catch_up": catch_up, "catch_up_max": catch_up_max, "paused": paused}  # fmt: skip
        return self._send(schedules.put(application, schedule_id, fields))

    def get_schedule(self, application: str, schedule_id: str) -> Schedule:
        """A stored schedule (NotFound if there is none)."""
        return self._send(schedules.get(application, schedule_id))

    def change_schedule(self, application: str, schedule_id: str, **fields: Any) -> Schedule:
        """Change some fields of a schedule (``PATCH``); occurrences not yet due follow."""
        return self._send(schedules.patch(application, schedule_id, fields))

    def delete_schedule(self, application: str, schedule_id: str) -> Schedule:
        """Delete a schedule and its occurrences not yet due; the schedule as it was."""
        return self._send(schedules.delete(application, schedule_id))

    def pause_schedule(self, application: str, schedule_id: str) -> Schedule:
        """Pause a schedule: nothing more rings until it is resumed."""
        return self._send(schedules.pause(application, schedule_id, True))

    def resume_schedule(self, application: str, schedule_id: str) -> Schedule:
        """Resume a schedule from now: what fell due while paused does not ring."""
        return self._send(schedules.pause(application, schedule_id, False))

    def next_occurrences(
        self, application: str, schedule_id: str, count: int = 5
    ) -> tuple[Occurrence, ...]:
        """The next ``count`` (1 to 100) occurrences, in UTC and in the schedule's zone."""
        return self._send(schedules.upcoming(application, schedule_id, count))

    def schedules(
        self, application: str | None = None, limit: int = 100, cursor: str | None = None
    ) -> SchedulePage:
        """One page of schedules in (application, schedule_id) order; pass the page's
        ``next_cursor`` for the next. Every application's needs an admin token."""
        return self._send(schedules.listing(application, limit, cursor))

    def live(self) -> dict[str, Any]:
        """The liveness probe's report (``GET /livez``): ``{"status": "ok", "loops": {...},
        "stalled": []}``, or ``"stalled"`` naming the loops (a 503, returned too)."""
        return self._send(calls.live())

    def ready(self) -> dict[str, Any]:
        """The readiness probe's report (``GET /readyz``): ``{"status": "ok", "database":
        "ok"}``, or ``"unavailable"`` while the database is down (a 503, returned too)."""
        return self._send(calls.ready())

    def metrics(self) -> str:
        """The server's Prometheus exposition (``GET /metrics``), as text."""
        return self._send(calls.metrics())

    def openapi(self) -> dict[str, Any]:
        """The server's API as an OpenAPI 3.1 document (``GET /openapi.json``)."""
        return self._send(calls.openapi())

    def _bulk(self, action: str, body: dict[str, Any]) -> int:
        """Call a bulk action until it answers done (each call works for a bounded time
        and a repeat goes on where it stopped); the total changed."""
        total = 0
        while True:
            changed, done = self._send(calls.bulk(action, body))
            total += changed
            if done:
                return total

    def _send(self, call: Call[T]) -> T:
        """The result of one call, or the ClockError it stands for."""
        url = self.base_url + call.path
        where = f"{call.method} {url}"
        try:
            response = self._session.request(
                call.method,
                url,
                params=call.params,
                json=call.json,
                timeout=self.timeout + call.extra_wait_s,
            )
        except requests.Timeout as exc:
            raise Unavailable(f"{where} timed out: {exc}", code="timeout") from exc
        except requests.ConnectionError as exc:
            raise Unavailable(f"{where} failed: {exc}", code="connection_error") from exc
        except requests.RequestException as exc:
            raise ClockError(f"{where} failed: {exc}", code="request_error") from exc
        if response.status_code >= 400:
            logger.debug("%s -> %s", where, response.status_code)
        return call.answer(
            response.status_code,
            response.content,
            response.reason or "",
            response.headers.get("Retry-After"),
        )
