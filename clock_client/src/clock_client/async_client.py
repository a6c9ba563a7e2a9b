"""The HTTP client for asyncio: ClockClient's methods, as coroutines, over httpx. Needs the
``async`` extra (httpx)."""

from __future__ import annotations

import asyncio
import builtins
import logging
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any, TypeVar

import httpx

from . import calls, schedules
from .calls import Call
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
from .retries import RETRY_METHODS, RETRY_STATUSES, backoff_s
from .schedules import Occurrence, Schedule, SchedulePage

logger = logging.getLogger(__name__)
T = TypeVar("T")

# The request never reached the server: any method may be sent again.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


class AsyncClockClient:
    """ClockClient for asyncio: the same methods, with the same arguments and results, each a
    coroutine (``list`` an async iterator), over one pooled ``httpx.AsyncClient``.

    Timeouts, retries and errors are as in ClockClient: ``timeout`` bounds connecting and
    each read; a connection that fails is tried again for any call, and a lost answer or a
    502/503/504 for the idempotent calls only (every one but ``update`` and the PATCH of
    ``configure``), up to ``retries`` times, the waits growing from ``backoff_factor``.
    Close it (``await client.close()``, or ``async with``) to release its connections.
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
        self.retries = retries
        self.backoff_factor = backoff_factor
        headers = {"Accept": "application/json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.AsyncClient(headers=headers, timeout=timeout)

    async def __aenter__(self) -> AsyncClockClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close pooled connections; the client must not be used afterwards."""
        await self._http.aclose()

    async def create(
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
        """As ClockClient.create."""
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
        return await self._send(call)

    async def count(
        self,
        application: str,
        business_id: str,
        *,
        increment_id: str | None = None,
        by: int = 1,
    ) -> Counted:
        """As ClockClient.count."""
        return await self._send(calls.count(application, business_id, increment_id, by))

    async def batch_create(self, items: Sequence[Mapping[str, Any]]) -> builtins.list[BatchResult]:
        """As ClockClient.batch_create."""
        results: builtins.list[BatchResult] = []
        for call in calls.batch_creates(items):
            batch: builtins.list[BatchResult] = await self._send(call)
            results.extend(batch)
        return results

    async def get(self, application: str, business_id: str) -> Alarm:
        """As ClockClient.get."""
        return await self._send(calls.get(application, business_id))

    async def events(self, application: str, business_id: str) -> builtins.list[AlarmEvent]:
        """As ClockClient.events."""
        return await self._send(calls.events(application, business_id))

    async def update(
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
        """As ClockClient.update: sent once, never retried."""
        call = calls.update(
            application,
            business_id,
            target_ring_at,
            delay,
            latest_ring_at,
            payload,
            clear_latest_ring_at,
        )
        return await self._send(call)

    async def cancel(self, application: str, business_id: str) -> Alarm:
        """As ClockClient.cancel."""
        return await self._send(calls.cancel(application, business_id))

    async def list_page(
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
        """As ClockClient.list_page."""
        filters = calls.filter_fields(application, status, business_id_prefix, due_from, due_to)
        return await self._send(calls.list_page(filters, limit, cursor))

    async def health(self) -> dict[str, Any]:
        """As ClockClient.health."""
        return await self._send(calls.health())

    async def list(
        self,
        application: str | None = None,
        status: str | None = None,
        limit: int = 100,
        *,
        business_id_prefix: str | None = None,
        due_from: int | datetime | None = None,
        due_to: int | datetime | None = None,
    ) -> AsyncIterator[Alarm]:
        """As ClockClient.list, for ``async for``."""
        cursor: str | None = None
        while True:
            page = await self.list_page(
                application,
                status,
                limit,
                cursor,
                business_id_prefix=business_id_prefix,
                due_from=due_from,
                due_to=due_to,
            )
            for alarm in page.alarms:
                yield alarm
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def redrive(
        self,
        application: str,
        business_id: str,
        *,
        target_ring_at: int | datetime | None = None,
        delay: float | timedelta | None = None,
    ) -> Alarm:
        """As ClockClient.redrive."""
        return await self._send(calls.redrive(application, business_id, target_ring_at, delay))

    async def redrive_where(
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
        """As ClockClient.redrive_where."""
        body = calls.filter_fields(application, status, business_id_prefix, due_from, due_to)
        return await self._bulk("redrive", body | timing_fields(target_ring_at, delay))

    async def cancel_where(
        self,
        application: str | None = None,
        *,
        business_id_prefix: str | None = None,
        due_from: int | datetime | None = None,
        due_to: int | datetime | None = None,
    ) -> int:
        """As ClockClient.cancel_where."""
        body = calls.filter_fields(application, None, business_id_prefix, due_from, due_to)
        return await self._bulk("cancel", body)

    async def applications(self, counts: bool = True) -> builtins.list[Application]:
        """As ClockClient.applications."""
        return await self._send(calls.applications(counts))

    async def application(self, name: str) -> Application:
        """As ClockClient.application."""
        return await self._send(calls.application(name))

    async def configure(self, name: str, *, replace: bool = False, **settings: Any) -> Application:
        """As ClockClient.configure."""
        calls.check_settings(settings)
        if not replace:
            try:
                if not settings:
                    return await self.application(name)
                return await self._send(calls.configure(name, settings, replace=False))
            except NotFound:
                pass  # not registered yet: the PUT below registers it
        return await self._send(calls.configure(name, settings, replace=True))

    async def webhook_secret(
        self, name: str, *, rotate: bool = False, overlap_s: float | None = None
    ) -> str | None:
        """As ClockClient.webhook_secret."""
        return await self._send(calls.webhook_secret(name, rotate, overlap_s))

    async def pull(
        self, application: str, max: int = 10, wait_s: float = 0.0
    ) -> builtins.list[PulledMessage]:
        """As ClockClient.pull."""
        return await self._send(calls.pull(application, max, wait_s))

    async def ack(self, application: str, ids: Iterable[int | str]) -> AckResult:
        """As ClockClient.ack."""
        return await self._send(calls.ack(application, ids))

    async def whoami(self) -> WhoAmI:
        """As ClockClient.whoami."""
        return await self._send(calls.whoami())

    async def overview(self) -> Overview:
        """As ClockClient.overview."""
        return await self._send(calls.overview())

    async def stats(self, minutes: int = 60, application: str | None = None) -> Stats:
        """As ClockClient.stats."""
        return await self._send(calls.stats(minutes, application))

    async def schedule(
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
        """As ClockClient.schedule."""
        fields = {"cron": cron, "every_s": every_s, "timezone": timezone, "payload": payload,
                  "start_at": start_at, "end_at": end_at, "cutoff_ms": cutoff_ms,
                  "catch_up": catch_up, "catch_up_max": catch_up_max, "paused": paused}  # fmt: skip
        return await self._send(schedules.put(application, schedule_id, fields))

    async def get_schedule(self, application: str, schedule_id: str) -> Schedule:
        """As ClockClient.get_schedule."""
        return await self._send(schedules.get(application, schedule_id))

    async def change_schedule(self, application: str, schedule_id: str, **fields: Any) -> Schedule:
        """As ClockClient.change_schedule."""
        return await self._send(schedules.patch(application, schedule_id, fields))

    async def delete_schedule(self, application: str, schedule_id: str) -> Schedule:
        """As ClockClient.delete_schedule."""
        return await self._send(schedules.delete(application, schedule_id))

    async def pause_schedule(self, application: str, schedule_id: str) -> Schedule:
        """As ClockClient.pause_schedule."""
        return await self._send(schedules.pause(application, schedule_id, True))

    async def resume_schedule(self, application: str, schedule_id: str) -> Schedule:
        """As ClockClient.resume_schedule."""
        return await self._send(schedules.pause(application, schedule_id, False))

    async def next_occurrences(
        self, application: str, schedule_id: str, count: int = 5
    ) -> tuple[Occurrence, ...]:
        """As ClockClient.next_occurrences."""
        return await self._send(schedules.upcoming(application, schedule_id, count))

    async def schedules(
        self, application: str | None = None, limit: int = 100, cursor: str | None = None
    ) -> SchedulePage:
        """As ClockClient.schedules."""
        return await self._send(schedules.listing(application, limit, cursor))

    async def live(self) -> dict[str, Any]:
        """As ClockClient.live."""
        return await self._send(calls.live())

    async def ready(self) -> dict[str, Any]:
        """As ClockClient.ready."""
        return await self._send(calls.ready())

    async def metrics(self) -> str:
        """As ClockClient.metrics."""
        return await self._send(calls.metrics())

    async def openapi(self) -> dict[str, Any]:
        """As ClockClient.openapi."""
        return await self._send(calls.openapi())

    async def _bulk(self, action: str, body: dict[str, Any]) -> int:
        total = 0
        while True:
            changed, done = await self._send(calls.bulk(action, body))
            total += changed
            if done:
                return total

    async def _send(self, call: Call[T]) -> T:
        """The result of one call, or the ClockError it stands for; tried again as
        ClockClient's retry policy says."""
        url = self.base_url + call.path
        failures = 0
        while True:
            try:
                response = await self._http.request(
                    call.method,
                    url,
                    params=call.params,
                    json=call.json,
                    timeout=self.timeout + call.extra_wait_s,
                )
            except httpx.HTTPError as exc:
                if not _may_repeat(call.method, exc) or failures >= self.retries:
                    raise _error_of(f"{call.method} {url}", exc) from exc
            else:
                retryable = response.status_code in RETRY_STATUSES and call.method in RETRY_METHODS
                if not retryable or failures >= self.retries:
                    return call.answer(
                        response.status_code,
                        response.content,
                        response.reason_phrase,
                        response.headers.get("Retry-After"),
                    )
            failures += 1
            await asyncio.sleep(backoff_s(self.backoff_factor, failures))


def _may_repeat(method: str, error: httpx.HTTPError) -> bool:
    """A request that never reached the server may be sent again whatever it is; one whose
    answer was lost only when repeating it is safe."""
    if isinstance(error, _NOT_SENT):
        return True
    return isinstance(error, httpx.TransportError) and method in RETRY_METHODS


def _error_of(where: str, error: httpx.HTTPError) -> ClockError:
    if isinstance(error, httpx.TimeoutException):
        return Unavailable(f"{where} timed out: {error!r}", code="timeout")
    if isinstance(error, httpx.TransportError):
        return Unavailable(f"{where} failed: {error!r}", code="connection_error")
    return ClockError(f"{where} failed: {error!r}", code="request_error")
