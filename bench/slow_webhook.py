"""A slow webhook beside a fast one: one application's endpoint takes 5 s per call while
another's alarms ring, both on the webhook channel of one server.

    python -m bench.slow_webhook                  # slow: 200 due at once; fast: 500 over 1 s
    python -m bench.slow_webhook --runs 3

The slow application's 200 alarms fall due in the same second as the fast one's 500 (due
evenly over that second); its endpoint (in this process, as the fast one's) sleeps 5 s
before answering 204. Reported: the fast application's lateness (receive time minus target)
and the slow one's calls received while the fast alarms rang (at most its bound on calls in
flight, CLOCK_WEBHOOK_MAX_IN_FLIGHT, 16).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, cast

import requests

from bench.channels import HookReceiver, _create_steady, _HookHandler, _now_ms, _tally
from bench.clockserver import BenchServer
from bench.stats import summarize

SLOW_S = 5.0
LEAD_S = 4.0


class _SlowHandler(_HookHandler):
    """Sleeps SLOW_S before recording and answering calls to a path ending in 'slow...'."""

    def do_POST(self) -> None:
        if self.path.rsplit("/", 1)[-1].startswith("slow"):
            time.sleep(SLOW_S)
        super().do_POST()


class SlowReceiver(HookReceiver):
    def __init__(self) -> None:
        super().__init__()
        handler = cast(type, self._server.RequestHandlerClass)  # a class, typed as a factory
        self._server.RequestHandlerClass = type("Handler", (_SlowHandler, handler), {})


def run_once(workdir: Path, fast_count: int, slow_count: int) -> dict[str, Any]:
    tag = uuid.uuid4().hex[:6]
    fast, slow = f"fast{tag}", f"slow{tag}"
    with SlowReceiver() as receiver, BenchServer(workdir, webhook_allow_private="true") as server:
        for application in (fast, slow):
            settings = {"channel": "webhook", "webhook_url": receiver.url_for(application)}
            url = f"{server.base_url}/v1/applications/{application}"
            requests.put(url, json=settings, timeout=30).raise_for_status()
        first_ms = _now_ms() + int(LEAD_S * 1000)
        created_slow = _create_steady(
            server.base_url, slow, slow_count / 0.01, first_ms, slow_count
        )
        created_fast = _create_steady(server.base_url, fast, fast_count, first_ms, fast_count)
        fast_sink, slow_sink = receiver.sink(fast), receiver.sink(slow)
        deadline = first_ms / 1000 + 1 + 10
        while fast_sink.unique() < created_fast and time.time() < deadline:
            time.sleep(0.05)
        done_ms = _now_ms()
        time.sleep(0.5)
        with fast_sink.lock:
            arrivals = list(fast_sink.arrivals)
        with slow_sink.lock:
            slow_before = sum(1 for a in slow_sink.arrivals if a.received_ms <= done_ms)
    return {
        "fast": {
            **_tally(arrivals, created_fast),
            "lateness_ms": summarize([a.received_ms - a.target_ms for a in arrivals]),
        },
        "slow_created": created_slow,
        "slow_answered_while_fast_rang": slow_before,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fast", type=int, default=500, help="fast alarms, due over 1 s")
    parser.add_argument("--slow", type=int, default=200, help="slow alarms, due at once")
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="clock-slow-webhook-") as tmp:
        for run in range(args.runs):
            result = run_once(Path(tmp), args.fast, args.slow)
            print(f"[slow_webhook] run {run + 1}: {json.dumps(result)}", flush=True)
            results.append(result)
    p99s = [r["fast"]["lateness_ms"]["p99"] for r in results]
    print(
        json.dumps(
            {
                "fast_p99_ms": p99s,
                "fast_p99_median_ms": statistics.median(p99s),
                "fast_lost": [r["fast"]["lost"] for r in results],
                "fast_early": [r["fast"]["lateness_ms"]["early"] for r in results],
            }
        )
    )


if __name__ == "__main__":
    main()
