"""HTTP client for the clock service's /v1 API."""

from __future__ import annotations

import builtins
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any
from urllib.parse import quote

import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

from .errors import ClockError, NotFound, Unavailable, ValidationError, error_from_response
from .models import (
    APPLICATION_SETTINGS,
    AckResult,
    Alarm,
    AlarmEvent,
    AlarmPage,
    Application,
    BatchResult,
    Counted,
    PulledMessage,
    ack_result_from_json,
    alarm_from_json,
    application_from_json,
    applications_from_json,
    batch_results_from_json,
    create_body,
    events_from_json,
    page_from_json,
    pulled_from_json,
    timing_fields,
    to_epoch_ms,
)

logger = logging.getLogger(__name__)

MAX_BATCH = 1000  # the server's limit per /v1/alarms/batch request
_RETRY_STATUSES = (502, 503, 504)
# POST is safe to repeat because creation is idempotent by (application, business_id).
# PATCH is not: a repeat of an update that did land can meet a 409 (the alarm rang in
# between) or, with a delay, move the alarm a second time. PUT sets an application's every
# setting: a repeat sets the same.
_RETRY_METHODS = frozenset({"GET", "HEAD", "DELETE", "POST", "PUT"})


def _filter_fields(
    application: str | None,
    status: str | None,
    business_id_prefix: str | None,
    due_from: int | datetime | None,
    due_to: int | datetime | None,
) -> dict[str, Any]:
    """The filter of a search or a bulk action, with only the parts given."""
    fields: dict[str, Any] = {}
    for name, value in (
        ("application", application),
        ("status", status),
        ("business_id_prefix", business_id_prefix),
    ):
        if value is not None:
            fields[name] = value
    if due_from is not None:
        fields["due_from"] = to_epoch_ms(due_from)
    if due_to is not None:
        fields["due_to"] = to_epoch_ms(due_to)
    return fields


def _segment(value: str, field: str) -> str:
    """`value` as one path segment. "." and ".." cannot be one: HTTP clients remove them
    from a path, so the call would reach another route or another alarm."""
    if value in (".", ".."):
        raise ValidationError(
            f"{field} must not be {value!r}: it cannot travel in a URL", field=field
        )
    return quote(value, safe="")


class ClockClient:
    """Talks to one clock server over a pooled keep-alive session.

    ``timeout`` (seconds) bounds connecting and each read. Failed connections and
    502/503/504 answers are retried up to ``retries`` times with exponential backoff
    (``backoff_factor``) for the idempotent calls only: get, list, health, cancel,
    create, batch_create, events, applications, application, the PUT of configure,
    pull (what a lost answer leased comes back when its lease ends) and ack; update and
    the PATCH of configure are sent once. Every failure raises a
    subclass of ClockError. Use one client per thread; close it (or use ``with``)
    to release its connections.
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
            allowed_methods=_RETRY_METHODS,
            status_forcelist=_RETRY_STATUSES,
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
        body = create_body(
            application,
            business_id,
            payload,
            target_ring_at=target_ring_at,
            delay=delay,
            latest_ring_at=latest_ring_at,
            ring_after_count=ring_after_count,
            count_only=count_only,
        )
        return alarm_from_json(self._request("POST", "/v1/alarms", json=body))

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
        body: dict[str, Any] = {"by": by}
        if increment_id is not None:
            body["increment_id"] = increment_id
        path = self._alarm_path(application, business_id) + "/count"
        return Counted.from_dict(self._request("POST", path, json=body))

    def batch_create(self, items: Sequence[Mapping[str, Any]]) -> builtins.list[BatchResult]:
        """Create many alarms; returns one BatchResult per item, in order.

        Each item is a mapping with create()'s argument names (``application``,
        ``business_id``, ``payload``, ``target_ring_at`` or ``delay``, optional
        ``latest_ring_at``). An item the server rejects gives a result with ``error``
        set; it does not raise. More than 1000 items are sent in several requests.
        Raises TypeError/ValueError for an item the client cannot encode.
        """
        bodies = [create_body(**item) for item in items]
        results: builtins.list[BatchResult] = []
        for start in range(0, len(bodies), MAX_BATCH):
            chunk = bodies[start : start + MAX_BATCH]
            data = self._request("POST", "/v1/alarms/batch", json={"alarms": chunk})
            results.extend(batch_results_from_json(data, len(chunk)))
        return results

    def get(self, application: str, business_id: str) -> Alarm:
        """The alarm for (application, business_id); raises NotFound if there is none."""
        return alarm_from_json(self._request("GET", self._alarm_path(application, business_id)))

    def events(self, application: str, business_id: str) -> builtins.list[AlarmEvent]:
        """The alarm's history, oldest first: created, moved, cancelled, each failed publish
        with its error, rung, expired, dead, re-driven. Raises NotFound if there is no such
        alarm."""
        path = self._alarm_path(application, business_id) + "/events"
        return events_from_json(self._request("GET", path))

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
        body: dict[str, Any] = timing_fields(target_ring_at, delay, latest_ring_at)
        if clear_latest_ring_at:
            if latest_ring_at is not None:
                raise ValueError("give latest_ring_at or clear_latest_ring_at, not both")
            body["latest_ring_at"] = None
        if payload is not None:
            body["payload"] = payload
        path = self._alarm_path(application, business_id)
        return alarm_from_json(self._request("PATCH", path, json=body))

    def cancel(self, application: str, business_id: str) -> Alarm:
        """Cancel a pending alarm and return it (status "cancelled").

        Idempotent: cancelling a cancelled alarm returns it again. Raises Conflict when
        it already rang, expired or died, NotFound if unknown.
        """
        path = self._alarm_path(application, business_id)
        return alarm_from_json(self._request("DELETE", path))

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
        params = _filter_fields(application, status, business_id_prefix, due_from, due_to)
        params["limit"] = limit
        if cursor is not None:
            params["cursor"] = cursor
        return page_from_json(self._request("GET", "/v1/alarms", params=params))

    def health(self) -> dict[str, Any]:
        """The server's health report (``GET /healthz``), e.g. ``{"status": "ok", "database":
        "ok", "broker": "ok", "channels": {"amqp": "ok"}}``.

        ``"status"`` is ``"ok"``; ``"degraded"`` (a 200) while the broker or a channel is
        down, when alarms are still taken and kept; or ``"unavailable"`` (a 503, returned
        too) while the database is down. The failing part says ``"down"``; other failures
        raise.
        """
        try:
            return self._request("GET", "/healthz")
        except Unavailable as exc:
            if exc.status_code == 503 and "status" in exc.body:
                return dict(exc.body)
            raise

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
        path = self._alarm_path(application, business_id) + "/redrive"
        body = timing_fields(target_ring_at, delay)
        return alarm_from_json(self._request("POST", path, json=body))

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
        body = _filter_fields(application, status, business_id_prefix, due_from, due_to)
        return self._bulk("/v1/alarms/redrive", body | timing_fields(target_ring_at, delay))

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
        body = _filter_fields(application, None, business_id_prefix, due_from, due_to)
        return self._bulk("/v1/alarms/cancel", body)

    def applications(self, counts: bool = True) -> builtins.list[Application]:
        """Every application, by name, with its settings and live counts: the registered
        ones, and any other that has alarms (``registered`` False). ``counts=False`` leaves
        the counts out (None), which over millions of alarms answers in milliseconds rather
        than seconds. Needs an admin token (Forbidden otherwise)."""
        params = {} if counts else {"counts": "false"}
        return applications_from_json(self._request("GET", "/v1/applications", params=params))

    def application(self, name: str) -> Application:
        """The registered application ``name`` with its settings and live counts; NotFound
        if it is not registered. Needs an admin token (Forbidden otherwise)."""
        return application_from_json(self._request("GET", self._application_path(name)))

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
        unknown = sorted(set(settings) - set(APPLICATION_SETTINGS))
        if unknown:
            raise TypeError(
                f"not settings of an application: {', '.join(unknown)}; "
                f"give any of {', '.join(APPLICATION_SETTINGS)}"
            )
        path = self._application_path(name)
        if not replace:
            try:
                if not settings:
                    return self.application(name)
                return application_from_json(self._request("PATCH", path, json=settings))
            except NotFound:
                pass  # not registered yet: the PUT below registers it
        return application_from_json(self._request("PUT", path, json=settings))

    def webhook_secret(
        self, name: str, *, rotate: bool = False, overlap_s: float | None = None
    ) -> str | None:
        """The secret that signs the application's webhooks (None before it first took the
        webhook channel); with ``rotate=True``, a new one replaces it first, and the old one
        goes on signing beside it for ``overlap_s`` (the server's default is a day; 0 stops
        it at once). Needs an admin token (Forbidden otherwise)."""
        path = f"{self._application_path(name)}/webhook-secret"
        if rotate:
            body = {} if overlap_s is None else {"overlap_s": overlap_s}
            answer = self._request("POST", path, json=body)
        else:
            answer = self._request("GET", path)
        secret = answer.get("webhook_secret")
        return secret if isinstance(secret, str) else None

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
        path = self._application_path(application) + "/pull"
        body = {"max": max, "wait_s": wait_s}
        answer = self._request("POST", path, json=body, timeout=self.timeout + wait_s)
        return pulled_from_json(answer)

    def ack(self, application: str, ids: Iterable[int | str]) -> AckResult:
        """Mark rung the pulled messages ``ids`` (1 to 1,000) of ``application``, whether or
        not their lease has ended. An id that is unknown, another application's, or already
        rung, expired or dead is returned in ``not_acked`` and changes nothing; so is one
        acked by an earlier try of a request retried after a lost answer."""
        path = self._application_path(application) + "/ack"
        answer = self._request("POST", path, json={"ids": [str(i) for i in ids]})
        return ack_result_from_json(answer)

    def _application_path(self, name: str) -> str:
        return f"/v1/applications/{_segment(name, 'application')}"

    def _bulk(self, path: str, body: dict[str, Any]) -> int:
        """Call a bulk action until it answers done (each call works for a bounded time
        and a repeat goes on where it stopped); the total changed."""
        changed = 0
        while True:
            answer = self._request("POST", path, json=body)
            changed += int(answer["changed"])
            if answer["done"]:
                return changed

    def _alarm_path(self, application: str, business_id: str) -> str:
        return (
            f"/v1/alarms/{_segment(application, 'application')}/"
            f"{_segment(business_id, 'business_id')}"
        )

    def _request(
        self, method: str, path: str, timeout: float | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        """The answer to one call; `timeout` (seconds) replaces the client's own."""
        url = self.base_url + path
        wait = self.timeout if timeout is None else timeout
        try:
            response = self._session.request(method, url, timeout=wait, **kwargs)
        except requests.Timeout as exc:
            raise Unavailable(f"{method} {url} timed out: {exc}", code="timeout") from exc
        except requests.ConnectionError as exc:
            raise Unavailable(f"{method} {url} failed: {exc}", code="connection_error") from exc
        except requests.RequestException as exc:
            raise ClockError(f"{method} {url} failed: {exc}", code="request_error") from exc
        if response.status_code >= 400:
            error = error_from_response(
                response.status_code,
                response.content,
                response.reason or "",
                response.headers.get("Retry-After"),
            )
            logger.debug("%s %s -> %s", method, url, error)
            raise error
        try:
            data = response.json()
        except ValueError as exc:
            raise ClockError(
                f"{method} {url} answered {response.status_code} with a non-JSON body",
                status_code=response.status_code,
                code="bad_response",
            ) from exc
        if not isinstance(data, dict):
            raise ClockError(
                f"{method} {url} answered a JSON {type(data).__name__}, expected an object",
                status_code=response.status_code,
                code="bad_response",
            )
        return data
