"""The targets the benchmark is judged by, and the table rows comparing them with results."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from bench.operate_targets import console_rows, noisy_rows, purge_rows
from bench.report import spread
from bench.stats import median_and_spread

Pick = Callable[..., dict[str, float]]
_CPU_NAMES = (("engine", "engine process"), ("mariadb", "MariaDB"), ("rabbitmq", "RabbitMQ"),
              ("collector", "collector (the bench's consumer)"))  # fmt: skip


_CREATE_CPU = (
    ("single", "web_cpu_us_per_request", "web workers'"),
    ("single", "mariadb_cpu_us_per_request", "MariaDB"),
    ("http_alone", "web_cpu_us_per_request", "the echo's web workers'"),
)


def _row(figure: str, cell: dict[str, float] | None, target: str, ok: Callable[[float], bool] | None,
         digits: int = 1) -> dict[str, Any]:  # fmt: skip
    # A target holds when it holds in each run: the lowest and the highest both meet it.
    met = None if cell is None or ok is None else ok(cell["min"]) and ok(cell["max"])
    return {"figure": figure, "measured": spread(cell, digits), "target": target, "met": met,
            "cell": cell}  # fmt: skip


# Per steady rate: the figure's key in _steady_rows and its target, (text, test); none is "-".
_STEADY_TARGETS: dict[str, dict[str, tuple[str, Callable[[float], bool]]]] = {
    "steady_1000": {
        "p50": ("<= 2", lambda v: v <= 2),
        "p99": ("<= 5", lambda v: v <= 5),
        "max": ("<= 50", lambda v: v <= 50),
        "engine": ("<= 120", lambda v: v <= 120),
        "mariadb": ("<= 120", lambda v: v <= 120),
    },
    "steady_5000": {"p99": ("<= 25", lambda v: v <= 25)},
    "steady_10000": {
        "p99": ("<= 100", lambda v: v <= 100),
        "rate": (">= 9,900 (the rate held)", lambda v: v >= 9_900),
    },
}


def _unrung_rows(label: str, runs: list[dict[str, Any]], pick: Pick) -> list[dict[str, Any]]:
    """Alarms still due and never received when the run stopped waiting (counted as lost in
    records from before this figure, which lack it)."""
    if "unrung_at_end" not in runs[0]:
        return []
    return [_row(f"{label}: not rung when the run stopped waiting", pick(runs, "unrung_at_end"),
                 "0", lambda v: v == 0, 0)]  # fmt: skip


def _knee_rows(runs: list[dict[str, Any]], pick: Pick) -> list[dict[str, Any]]:
    """The knee's rate and its share of the publish limit (met, as every target, only when
    each run meets it)."""
    bound = runs[0]["p99_bound_ms"]
    return [
        _row(f"knee: highest steady rate with p99 <= {bound:g} ms (alarms/s)",
             pick(runs, "knee_per_s"), "-", None, 0),
        _row("knee: that rate / pipelined publish limit (same run)",
             pick(runs, "knee_share_of_limit"), ">= 0.50 in each run", lambda v: v >= 0.5, 2),
    ]  # fmt: skip


def _steady_rows(runs: list[dict[str, Any]], label: str,
                 targets: dict[str, tuple[str, Callable[[float], bool]]],
                 pick: Pick) -> list[dict[str, Any]]:  # fmt: skip
    def row(name: str, figure: str, cell: dict[str, float] | None) -> dict[str, Any]:
        text, ok = targets.get(name, ("-", None))
        return _row(f"{label}: {figure}", cell, text, ok, 0)

    lat = ("received_lateness_ms",)
    achieved = [run["load"]["created"] / run["load"]["elapsed_s"] for run in runs]
    rows = [
        row("p50", "lateness p50 (ms)", pick(runs, *lat, "p50")),
        row("p99", "lateness p99 (ms)", pick(runs, *lat, "p99")),
        row("p999", "lateness p99.9 (ms)", pick(runs, *lat, "p999")),
        row("max", "lateness max (ms)", pick(runs, *lat, "max")),
        row("published", "published lateness p99 (server's rung_at, ms)",
            pick(runs, "published_lateness_ms", "p99")),
        _row(f"{label}: early rings", pick(runs, "early"), "0", lambda v: v == 0, 0),
        _row(f"{label}: lost", pick(runs, "lost"), "0", lambda v: v == 0, 0),
        *_unrung_rows(label, runs, pick),
        row("rate", "rings per second, alarms created beforehand (achieved)"
            if runs[0].get("precreated") else "alarms created per second (achieved)",
            median_and_spread(achieved)),
    ]  # fmt: skip
    if "transit_ms" in runs[0]:  # records from before these figures lack them
        rows += [
            row("transit", "transit p99 (received - server's rung_at, ms)",
                pick(runs, "transit_ms", "p99")),
            row("engine", "engine process CPU per alarm (us)", pick(runs, "engine_cpu_us_per_alarm")),
        ]  # fmt: skip
    if "mariadb_cpu_us_per_alarm" in runs[0]:
        rows.append(row("mariadb", "MariaDB CPU per alarm (us)",
                        pick(runs, "mariadb_cpu_us_per_alarm")))  # fmt: skip
    return rows


def rows_for(raw: dict[str, Any], pick: Pick) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    samples = raw.setdefault("_samples", {})
    for key, label in (("steady_1000", "steady 1,000/s"), ("steady_5000", "steady 5,000/s"),
                       ("steady_10000", "steady 10,000/s")):  # fmt: skip
        if key in raw:
            samples[label] = raw[key][0]["received_sample"]
            rows += _steady_rows(raw[key], label, _STEADY_TARGETS[key], pick)
    publish_rate = _limit(raw, pick, "rabbitmq_pipelined_publishes_per_s")
    consumed_rate = _limit(raw, pick, "rabbitmq_pipelined_publishes_with_consumer_per_s")
    if "burst" in raw:
        runs = raw["burst"]
        rate = pick(runs, "ring_rate_per_s")
        rows.append(
            _row(
                f"burst of {runs[0]['count']:,}: time to ring all (s)",
                pick(runs, "ring_drain_s"),
                "-",
                None,
            )
        )
        rows.append(_row("burst: rings per second", rate, "-", None, 0))
        if publish_rate:
            rows.append(_row("burst: ring rate / pipelined publish rate (same run)",
                             _ratio(rate, publish_rate), ">= 0.80", lambda v: v >= 0.8, 2))  # fmt: skip
        if consumed_rate:
            rows.append(_row("burst: ring rate / publish rate with a consumer attached (same run)",
                             _ratio(rate, consumed_rate), "-", None, 2))  # fmt: skip
        rows.append(_row("burst: lost", pick(runs, "lost"), "0", lambda v: v == 0, 0))
        rows.extend(_unrung_rows("burst", runs, pick))
        for name, label in _CPU_NAMES:
            if f"{name}_cpu_us_per_alarm" in runs[0]:  # records from before this figure lack it
                rows.append(_row(f"burst: {label} CPU per alarm during the drain (us)",
                                 pick(runs, f"{name}_cpu_us_per_alarm"), "-", None, 0))  # fmt: skip
    if "knee" in raw:
        rows += _knee_rows(raw["knee"], pick)
    if "scale" in raw:
        rows += _scale_rows(raw["scale"], raw.get("steady_1000"), pick, samples)
    if "create" in raw:
        runs = raw["create"]
        rows.append(
            _row(
                "single create: requests/s (wrk, 64 connections)",
                pick(runs, "single", "requests_per_s"),
                ">= 4,000",
                lambda v: v >= 4_000,
                0,
            )
        )
        rows.append(
            _row(
                "single create: p99 latency (ms)",
                pick(runs, "single", "p99_ms"),
                "<= 20",
                lambda v: v <= 20,
            )
        )
        if "http_alone" in runs[0]:  # records from before this figure lack it
            alone = pick(runs, "http_alone", "requests_per_s")
            rows += [
                _row("single create: Flask + waitress alone, a JSON echo (same wrk, requests/s)",
                     alone, "-", None, 0),
                _row("single create: that echo's p99 latency (ms)",
                     pick(runs, "http_alone", "p99_ms"), "-", None),
                _row("single create: requests/s / the echo's, just before (per run)",
                     median_and_spread([run["single"]["requests_per_s"] / run["http_alone"]["requests_per_s"]
                                        for run in runs]), "-", None, 2),
            ]  # fmt: skip
            for part, key, label in _CREATE_CPU:
                if key in runs[0][part]:  # records from before these figures lack them
                    rows.append(_row(f"single create: {label} CPU per request (us)",
                                     pick(runs, part, key), "-", None, 0))  # fmt: skip
        rows.append(
            _row(
                "batch create: alarms/s (1,000 per request)",
                pick(runs, "batch", "alarms_per_s"),
                ">= 25,000",
                lambda v: v >= 25_000,
                0,
            )
        )
    if "mixed" in raw:
        runs = raw["mixed"]
        samples["1,000/s under full API load"] = runs[0]["received_sample"]
        rows.append(
            _row(
                "mixed: p99 lateness at 1,000/s under full API load (ms)",
                pick(runs, "received_lateness_ms", "p99"),
                "<= 10",
                lambda v: v <= 10,
                0,
            )
        )
        rows.append(
            _row(
                "mixed: API requests/s meanwhile",
                pick(runs, "api_load", "requests_per_s"),
                "-",
                None,
                0,
            )
        )
    if "clients" in raw:
        runs = raw["clients"]
        rows += [
            _row("100 clients: creates/s", pick(runs, "api", "requests_per_s"), "-", None, 0),
            _row(
                "100 clients: 5xx and other errors",
                pick(runs, "api", "errors_status"),
                "0",
                lambda v: v == 0,
                0,
            ),
            _row("100 clients: alarms lost", pick(runs, "lost"), "0", lambda v: v == 0, 0),
            *_unrung_rows("100 clients", runs, pick),
            _row(
                "100 clients: lateness p99 meanwhile (ms)",
                pick(runs, "received_lateness_ms", "p99"),
                "-",
                None,
                0,
            ),
            _row("100 clients: early rings", pick(runs, "early"), "0", lambda v: v == 0, 0),
        ]
    if "peers" in raw:
        rows += _peer_rows(raw, pick)
    if "noisy" in raw:
        rows += noisy_rows(raw["noisy"], pick, _row)
    if "purge" in raw:
        rows += purge_rows(raw["purge"], pick, _row)
    if "console" in raw:
        rows += console_rows(raw["console"], _row)
    if "limits" in raw:
        rows.append(
            _row(
                "limit: MariaDB batched INSERT rows/s",
                pick(raw["limits"], "mariadb_insert_rows_per_s"),
                "-",
                None,
                0,
            )
        )
        rows.append(
            _row(
                "limit: MariaDB batched UPDATE rows/s",
                pick(raw["limits"], "mariadb_update_rows_per_s"),
                "-",
                None,
                0,
            )
        )
        rows.append(
            _row(
                "limit: RabbitMQ persistent publishes/s, pipelined confirms",
                publish_rate,
                "-",
                None,
                0,
            )
        )
        rows.append(
            _row(
                "limit: the same with a consumer taking every message",
                consumed_rate,
                "-",
                None,
                0,
            )
        )
    return rows


def _peer_rows(raw: dict[str, Any], pick: Pick) -> list[dict[str, Any]]:
    peers = raw["peers"]
    rows = []
    ours_p99 = (
        pick(raw["steady_1000"], "received_lateness_ms", "p99")["median"]
        if "steady_1000" in raw
        else None
    )
    ours_rate = pick(raw["burst"], "ring_rate_per_s")["median"] if "burst" in raw else None
    same_size = raw.get("peer_size_burst")
    same_rate = pick(same_size, "ring_rate_per_s")["median"] if same_size else None
    for name, result in peers.items():
        steady, burst = result["steady"], result["burst"]
        p99 = _dig(steady, "p99")
        rate = _dig(burst, "rings_per_s") or _dig(burst, "rate_per_s")
        rows.append(_row(f"{name}: steady 1,000/s lateness p99 (ms)", _one(p99), "-", None, 0))
        rows.append(_row(f"{name}: burst rings/s", _one(rate), "-", None, 0))
        for workload, label in ((steady, "steady 1,000/s"), (burst, "burst")):
            if "lost" in workload:  # not run 30 s after the last due time, or 30 s without a run
                rows.append(_row(f"{name}: {label}, jobs not run when the wait ended", _one(workload["lost"]),
                                 "-", None, 0))  # fmt: skip
        if name == "celery" and ours_p99 is not None and p99:
            rows.append(
                _row(
                    "clock p99 / Celery ETA p99",
                    _one(ours_p99 / p99),
                    "<= 0.10",
                    lambda v: v <= 0.1,
                    3,
                )
            )
        if name == "apscheduler3" and same_size and same_rate is not None and rate:
            rows.append(_row(f"clock ring rate, burst of {same_size[0]['count']:,} as the peers'",
                             pick(same_size, "ring_rate_per_s"), "-", None, 0))  # fmt: skip
            rows.append(_row("clock ring rate / APScheduler 3 rate (same burst size)",
                             _one(same_rate / rate), ">= 10", lambda v: v >= 10, 1))  # fmt: skip
        if name == "apscheduler3" and ours_rate is not None and rate:
            rows.append(
                _row(
                    "clock ring rate (burst of the Results table) / APScheduler 3 rate",
                    _one(ours_rate / rate),
                    ">= 10" if same_rate is None else "-",
                    (lambda v: v >= 10) if same_rate is None else None,
                    1,
                )
            )
    return rows


def _one(value: float | None) -> dict[str, float] | None:
    return None if value is None else {"median": value, "min": value, "max": value, "runs": 1}


def _dig(result: dict[str, Any], key: str) -> float | None:
    """Find `key` anywhere in a peer's result dict (their shapes differ a little)."""
    if key in result and isinstance(result[key], (int, float)):
        return float(result[key])
    for value in result.values():
        if isinstance(value, dict):
            found = _dig(value, key)
            if found is not None:
                return found
    return None


def _limit(raw: dict[str, Any], pick: Pick, key: str) -> dict[str, float] | None:
    """A limit figure, if this run (or an older result file) has it."""
    runs = raw.get("limits")
    if not runs or any(key not in run for run in runs):
        return None
    return pick(runs, key)


def _ratio(cell: dict[str, float], limit: dict[str, float]) -> dict[str, float]:
    """`cell`'s median and range over the median of `limit`."""
    return {
        k: (v / limit["median"] if k in ("median", "min", "max") else v) for k, v in cell.items()
    }


def _scale_rows(scale: list[dict[str, Any]], steady: list[dict[str, Any]] | None, pick: Pick,
                samples: dict[str, Any]) -> list[dict[str, Any]]:  # fmt: skip
    """Scenario 3 against its own empty-table run on the same server just before the fill;
    records from before that baseline existed are compared with scenario 1 instead."""
    pending = scale[0]["prepared"]["pending_rows"]
    samples[f"1,000/s beside {pending:,} pending"] = scale[0]["received_sample"]
    empties = [run["empty"] for run in scale if "empty" in run]
    if empties:
        empty = pick(empties, "received_lateness_ms", "p99")["median"]
        baseline = "empty table, same server, just before"
    elif steady:
        empty = pick(steady, "received_lateness_ms", "p99")["median"]
        baseline = "empty"
    else:
        return []
    rows = [
        _row(
            f"scale: p99 lateness with {pending:,} pending (ms)",
            pick(scale, "received_lateness_ms", "p99"),
            f"<= 1.2 x {baseline} ({empty:.0f})",
            lambda v: v <= max(1.2 * empty, empty + 1),
            0,
        ),
    ]
    for figure, path in (("published lateness p99 (ms)", ("published_lateness_ms", "p99")),
                         ("transit p99 (ms)", ("transit_ms", "p99")),
                         ("engine process CPU per alarm (us)", ("engine_cpu_us_per_alarm",)),
                         ("MariaDB CPU per alarm (us)", ("mariadb_cpu_us_per_alarm",)),
                         ("RabbitMQ CPU per alarm (us)", ("rabbitmq_cpu_us_per_alarm",))):  # fmt: skip
        if path[0] not in scale[0]:
            continue
        before = f"{pick(empties, *path)['median']:,.0f}" if empties else "-"
        rows.append(_row(f"scale: {figure}", pick(scale, *path), f"- (empty: {before})", None, 0))
    rows.append(_row("scale: server RSS (MB)", pick(scale, "peak_rss_mb"), "<= 250",
                     lambda v: v <= 250, 0))  # fmt: skip
    return rows
