"""The highest steady rate at which the p99 lateness stays within a bound, as a share of the
pipelined publish limit measured in the same run.

    python -m bench.knee                          # p99 <= 25 ms, 20 s per rate, 5 rates
    python -m bench.knee --p99-ms 25 --seconds 10 --steps 4

A sitting on this machine can be twice as fast as another: the same code drained a burst at
8,100/s one day and 15,600/s another. A rate alone then says more of the sitting than of
clock; the rate divided by what the broker alone takes in the same run does not. Each rate
tried is the steady scenario (alarms created through the API at that rate, each due 1-10 s
later, bench.scenarios.steady) on a fresh server. A rate holds when the received p99 is
within the bound, nothing is lost or early, and the load created at least 95 % of what it
was asked for. The search is a bisection between nothing and the publish limit, from half
of it: `next_rate` is its policy.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from bench import limits, scenarios

HELD_SHARE = 0.95  # of the asked rate the load must have created for the rate to count
ROUND_TO = 100  # alarms/s: rates tried are whole hundreds


def holds(result: dict[str, Any], p99_ms: float) -> bool:
    """Whether a steady run held its rate within the bound."""
    asked = result["rate"] * result["duration_s"]
    return (
        result["received_lateness_ms"]["p99"] <= p99_ms
        and result["lost"] == 0
        and result.get("unrung_at_end", 0) == 0
        and result["early"] == 0
        and result["load"]["created"] >= HELD_SHARE * asked
    )


def next_rate(limit: float, held: float, failed: float) -> int:
    """The rate to try between the highest that held and the lowest that failed (the
    limit, at first), rounded to whole hundreds; 0 when none is left between them."""
    rate = int((held + failed) / 2 / ROUND_TO) * ROUND_TO
    return rate if held < rate < failed and rate > 0 else 0


def search(workdir: Path, p99_ms: float, seconds: float, steps: int, **server: str) -> dict:
    """The publish limit, then up to `steps` steady runs bisecting for the highest rate that
    holds; returns each run's figures and the knee as a share of the limit."""
    limit = limits.rabbitmq_rate()["rabbitmq_pipelined_publishes_per_s"]
    held, failed = 0.0, limit
    tried: list[dict[str, Any]] = []
    for _ in range(steps):
        rate = next_rate(limit, held, failed)
        if not rate:
            break
        result = scenarios.steady(workdir, rate, seconds, False, **server)
        ok = holds(result, p99_ms)
        tried.append({"rate": rate, "held": ok, "received_p99_ms": result["received_lateness_ms"]["p99"],
                      "published_p99_ms": result["published_lateness_ms"]["p99"],
                      "created": result["load"]["created"], "lost": result["lost"],
                      "early": result["early"]})  # fmt: skip
        held, failed = (rate, failed) if ok else (held, rate)
    return {
        "p99_bound_ms": p99_ms,
        "seconds_per_rate": seconds,
        "publish_limit_per_s": limit,
        "knee_per_s": held,
        "knee_share_of_limit": held / limit,
        "tried": tried,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--p99-ms", type=float, default=25)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--web-processes", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        result = search(Path(work), args.p99_ms, args.seconds, args.steps,
                        web_processes=str(args.web_processes))  # fmt: skip
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
