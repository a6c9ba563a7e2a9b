"""GET /v1/stats: the per-minute statistics of the last minutes, from the shared table that
every process writes (store/minute_stats.py); a token of every application sees them all, an
application's token its own."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from flask import Blueprint, Response, jsonify, request

from clock_server.api.access import authorize, current_grant
from clock_server.api.answers.stats import Minute, Stats
from clock_server.api.routes import services
from clock_server.api.stats_bounds import busiest, series_bound
from clock_server.api.validation import check_application
from clock_server.errors import ValidationError
from clock_server.minute_stats import MINUTE_MS, MinuteCounts, minute_of, quantile
from clock_server.store.minute_stats import MinuteRow, SqlMinuteStats

stats = Blueprint("stats", __name__)

DEFAULT_MINUTES = 60
MAX_MINUTES = 1_440
TOTAL = "*"


@stats.get("/v1/stats")
def get_stats() -> Response:
    minutes, application = stats_query(request.args.to_dict())
    if application is not None:
        authorize(application)
    grant = current_grant()
    visible = None if grant is None or grant.is_admin else grant.applications
    chosen = {application} if application is not None else visible
    svc = services()
    to_ms = minute_of(svc.clock.now_ms()) + MINUTE_MS
    from_ms = to_ms - minutes * MINUTE_MS
    rows = SqlMinuteStats(svc.store).read(from_ms, to_ms, chosen)
    activity: dict[str, int] = {}
    for row in rows:
        activity[row.application] = (
            activity.get(row.application, 0) + row.counts.rung + row.counts.created
        )
    names = busiest(activity, chosen if chosen is not None else activity, series_bound(minutes))
    left_out = len(activity.keys() - set(names))
    return jsonify(stats_answer(rows, from_ms, to_ms, names, left_out))


def stats_query(args: Mapping[str, str]) -> tuple[int, str | None]:
    """(minutes, application or None) from the query string; ValidationError naming the
    parameter."""
    raw = args.get("minutes", str(DEFAULT_MINUTES))
    digits = raw.isascii() and raw.isdigit() and len(raw) <= len(str(MAX_MINUTES))
    if not digits or not 1 <= int(raw) <= MAX_MINUTES:
        raise ValidationError(
            f"minutes must be a whole number from 1 to {MAX_MINUTES}", field="minutes"
        )
    application = args.get("application")
    if application is not None:
        check_application(application)
    return int(raw), application


def stats_answer(
    rows: Iterable[MinuteRow], from_ms: int, to_ms: int, names: list[str], left_out: int = 0
) -> Stats:
    """One entry per minute from `from_ms` to `to_ms` for each of `names`, and for the total
    of every row, "*" (the `left_out` applications without a series of their own
    included)."""
    by_key = {(row.minute, row.application): row.counts for row in rows}
    minutes = range(from_ms, to_ms, MINUTE_MS)
    totals = {minute: MinuteCounts() for minute in minutes}
    for (minute, _), counts in by_key.items():
        if minute in totals:
            totals[minute].add(counts)
    series = {
        name: [minute_entry(m, by_key.get((m, name), MinuteCounts())) for m in minutes]
        for name in names
    }
    answer: Stats = {
        "minute_ms": MINUTE_MS,
        "from": from_ms,
        "to": to_ms,
        "applications": names,
        "left_out": left_out,
        "series": {TOTAL: [minute_entry(m, totals[m]) for m in minutes], **series},
    }
    return answer


def minute_entry(minute: int, counts: MinuteCounts) -> Minute:
    return Minute(
        minute=minute,
        created=counts.created,
        rung=counts.rung,
        failed=counts.failed,
        creates_per_s=round(counts.created * 1000 / MINUTE_MS, 3),
        rings_per_s=round(counts.rung * 1000 / MINUTE_MS, 3),
        lateness_p50_ms=_rounded(quantile(0.5, counts.lateness)),
        lateness_p99_ms=_rounded(quantile(0.99, counts.lateness)),
    )


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 1)
