"""What the server says about itself and the token in use: ``whoami``, ``overview`` and
``stats``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import ClockError


def _bad(what: str) -> ClockError:
    return ClockError(f"unexpected response from the server: {what}", code="bad_response")


@dataclass(frozen=True, slots=True)
class WhoAmI:
    """What the client's token may do (never the token itself): ``applications`` is ``"*"``
    for every application, else their names; ``read_only`` for a ``:read`` token;
    ``authenticated`` False on a server without tokens, where anyone may do anything."""

    authenticated: bool
    applications: str | tuple[str, ...]
    read_only: bool


def whoami_from_json(data: Mapping[str, Any]) -> WhoAmI:
    """A WhoAmI from a decoded answer; ClockError(code="bad_response") if malformed."""
    authenticated, read_only = data.get("authenticated"), data.get("read_only")
    apps = data.get("applications")
    if not isinstance(authenticated, bool) or not isinstance(read_only, bool):
        raise _bad(f"malformed whoami answer: {dict(data)!r}")
    if apps == "*":
        return WhoAmI(authenticated, "*", read_only)
    if not isinstance(apps, list) or not all(isinstance(name, str) for name in apps):
        raise _bad(f"whoami's applications must be '*' or a list of names, got {apps!r}")
    return WhoAmI(authenticated, tuple(apps), read_only)


@dataclass(frozen=True, slots=True)
class CappedCount:
    """A count read with a bounded cost: with ``capped``, "at least ``count``"."""

    count: int
    capped: bool

    @classmethod
    def from_dict(cls, data: Any) -> CappedCount:
        if not isinstance(data, Mapping):
            raise ValueError(f"a count must be an object, got {data!r}")
        count, capped = data.get("count"), data.get("capped")
        if isinstance(count, bool) or not isinstance(count, int) or not isinstance(capped, bool):
            raise ValueError(f"a count must be {{count: int, capped: bool}}, got {data!r}")
        return cls(count, capped)


@dataclass(frozen=True, slots=True)
class Overview:
    """What the console's overview shows (``GET /v1/overview``; see the API reference).

    ``by_status``: a count per status; ``overdue``: pending and due before ``now``; ``due``:
    pending and due from now to now + the key (ms); ``by_application``: each application's
    counts by status. ``lateness`` (the engine's, over the last minutes: ``window_ms``,
    ``sample``, ``p50_ms``, ``p99_ms``, ``max_ms``), ``pull_ack`` (the pull consumers' time
    from due to ack, the same keys) and ``health`` (``database``, ``broker``,
    ``live_engines``, ``engines``) are the server's objects as sent.
    """

    now: int
    count_cap: int
    application_count_cap: int
    by_status: Mapping[str, CappedCount]
    overdue: CappedCount
    due: Mapping[int, CappedCount]
    by_application: Mapping[str, Mapping[str, CappedCount]]
    lateness: Mapping[str, Any]
    health: Mapping[str, Any]
    pull_ack: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Overview:
        """Build from the server's answer; ValueError (or TypeError, KeyError) if malformed."""
        by_application = {}
        for entry in data["by_application"]:
            counts = {k: CappedCount.from_dict(v) for k, v in entry.items() if k != "application"}
            by_application[str(entry["application"])] = counts
        return cls(
            now=int(data["now"]),
            count_cap=int(data["count_cap"]),
            application_count_cap=int(data["application_count_cap"]),
            by_status={k: CappedCount.from_dict(v) for k, v in data["by_status"].items()},
            overdue=CappedCount.from_dict(data["overdue"]),
            due={int(d["within_ms"]): CappedCount.from_dict(d) for d in data["due"]},
            by_application=by_application,
            lateness=dict(data["lateness"] or {}),
            health=dict(data["health"]),
            pull_ack=dict(data.get("pull_ack") or {}),
        )


def overview_from_json(data: Mapping[str, Any]) -> Overview:
    """An Overview from a decoded answer; ClockError(code="bad_response") if malformed."""
    try:
        return Overview.from_dict(data)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise _bad(f"malformed overview: {exc!r}") from exc


@dataclass(frozen=True, slots=True)
class StatsMinute:
    """One minute of a series of ``GET /v1/stats``: alarms created, rung and failed (dead,
    expired and failed delivery attempts) in it, as rates too, and the engine's lateness
    percentiles (None when nothing rang)."""

    minute: int
    created: int
    rung: int
    failed: int
    creates_per_s: float
    rings_per_s: float
    lateness_p50_ms: float | None
    lateness_p99_ms: float | None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StatsMinute:
        p50, p99 = data["lateness_p50_ms"], data["lateness_p99_ms"]
        return cls(
            minute=int(data["minute"]),
            created=int(data["created"]),
            rung=int(data["rung"]),
            failed=int(data["failed"]),
            creates_per_s=float(data["creates_per_s"]),
            rings_per_s=float(data["rings_per_s"]),
            lateness_p50_ms=None if p50 is None else float(p50),
            lateness_p99_ms=None if p99 is None else float(p99),
        )


@dataclass(frozen=True, slots=True)
class Stats:
    """The per-minute statistics (``GET /v1/stats``): from ``from_ms`` to ``to_ms``, one
    entry per minute of ``minute_ms`` in every series; ``series`` by application (those of
    ``applications``: at most 20, the busiest), and ``"*"`` for the total over every
    application; ``left_out``: the applications with statistics in the window but no series
    of their own (ask for one by name)."""

    minute_ms: int
    from_ms: int
    to_ms: int
    applications: tuple[str, ...]
    series: Mapping[str, tuple[StatsMinute, ...]]
    left_out: int = 0


def stats_from_json(data: Mapping[str, Any]) -> Stats:
    """Stats from a decoded answer; ClockError(code="bad_response") if malformed."""
    try:
        return Stats(
            minute_ms=int(data["minute_ms"]),
            from_ms=int(data["from"]),
            to_ms=int(data["to"]),
            applications=tuple(str(name) for name in data["applications"]),
            series={
                str(name): tuple(StatsMinute.from_dict(entry) for entry in entries)
                for name, entries in data["series"].items()
            },
            left_out=int(data.get("left_out", 0)),
        )
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise _bad(f"malformed stats: {exc!r}") from exc
