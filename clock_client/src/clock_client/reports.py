"""What the server says about itself and the token in use: ``whoami`` and ``overview``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
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
    counts by status. ``lateness`` (``window_ms``, ``sample``, ``p50_ms``, ``p99_ms``,
    ``max_ms``) and ``health`` (``database``, ``broker``, ``live_engines``, ``engines``) are
    the server's objects as sent.
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
        )


def overview_from_json(data: Mapping[str, Any]) -> Overview:
    """An Overview from a decoded answer; ClockError(code="bad_response") if malformed."""
    try:
        return Overview.from_dict(data)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise _bad(f"malformed overview: {exc!r}") from exc
