"""The table rows of the scenarios of many applications and of operating clock: the noisy
neighbour, the retention purge, and the console at scale."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.stats import median_and_spread

Row = Callable[..., dict[str, Any]]
Pick = Callable[..., dict[str, float]]
CONSOLE_TARGET_MS = 500.0


def noisy_rows(runs: list[dict[str, Any]], pick: Pick, row: Row) -> list[dict[str, Any]]:
    """Each run is a pair: A's burst alone, and beside B's steady 100/s."""
    alone = [run["alone"] for run in runs]
    beside = [run["beside"] for run in runs]
    ratio = median_and_spread(
        [b["drain_rate_per_s"] / a["drain_rate_per_s"] for a, b in zip(alone, beside, strict=True)]
    )
    during = [run["quiet_received_ms"]["during"] for run in beside]
    return [
        row("noisy: A's drain rate alone (rings/s)", pick(alone, "drain_rate_per_s"), "-", None, 0),
        row("noisy: A's drain rate beside B / alone", ratio, ">= 0.90", lambda v: v >= 0.9, 2),
        row("noisy: B during A's drain, received p99 (ms)", pick(during, "p99"), "<= 50",
            lambda v: v <= 50, 0),
        row("noisy: B during A's drain, published p99 (server's rung_at, ms)",
            pick(beside, "quiet_published_during_ms", "p99"), "-", None, 0),
        row("noisy: lost", pick(beside, "quiet_lost"), "0", lambda v: v == 0, 0),
    ]  # fmt: skip


def purge_rows(runs: list[dict[str, Any]], pick: Pick, row: Row) -> list[dict[str, Any]]:
    """Each run is a pair: steady 1,000/s on an empty table, and while a backlog is purged."""
    base = [run["baseline"] for run in runs]
    purged = [run["purge"] for run in runs]
    rows = []
    for name in ("p50", "p99"):
        ratio = median_and_spread([
            p["received_lateness_ms"][name] / max(b["received_lateness_ms"][name], 1)
            for b, p in zip(base, purged, strict=True)
        ])  # fmt: skip
        rows += [
            row(f"purge: lateness {name} without the rows (ms)",
                pick(base, "received_lateness_ms", name), "-", None, 0),
            row(f"purge: lateness {name} while purging (ms)",
                pick(purged, "received_lateness_ms", name), "-", None, 0),
            row(f"purge: lateness {name}, purging / not", ratio, "<= 1.20",
                lambda v: v <= 1.2, 2),
        ]  # fmt: skip
    rows.append(row("purge: rows purged per second during the load",
                    pick(purged, "purge_rows_per_s_during_load"), "-", None, 0))  # fmt: skip
    return rows


def console_rows(runs: list[dict[str, Any]], row: Row) -> list[dict[str, Any]]:
    """The slowest call the console makes, and each call's median."""
    rows = []
    for name in runs[0]["calls"]:
        if name.startswith("exact counts"):  # the API's, not a console page's
            continue
        cell = median_and_spread([run["calls"][name]["max_ms"] for run in runs])
        rows.append(row(f"console at {runs[0]['prepared']['rows']:,} alarms: {name}, max (ms)",
                        cell, f"<= {CONSOLE_TARGET_MS:.0f}",
                        lambda v: v <= CONSOLE_TARGET_MS, 1))  # fmt: skip
    return rows
