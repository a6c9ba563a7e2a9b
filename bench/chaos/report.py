"""The checker's figures for people: a few lines, must-be-0 figures marked when they are not."""

from __future__ import annotations

from typing import Any

from bench.chaos.checker import MUST_BE_ZERO


def readable(figures: dict[str, Any]) -> str:
    faults = ", ".join(f"{n} {kind}" for kind, n in sorted(figures["faults"].items()))
    final = ", ".join(f"{n} {status}" for status, n in sorted(figures["final"].items()))
    requests = "; ".join(
        f"{op} " + ", ".join(f"{status} x{n}" for status, n in sorted(counts.items()))
        for op, counts in figures["requests"].items()
    )
    late = figures["lateness_ms"]
    lines = [
        f"chaos run, seed {figures['seed']}, {figures['minutes']} min",
        f"faults: {faults or 'none'}"
        + (f" ({len(figures['fault_errors'])} failed)" if figures["fault_errors"] else ""),
        f"requests (status x count): {requests}",
        f"accepted {figures['accepted']} alarms (never answered: {figures['never_answered']}); "
        f"final status of the accepted: {final}",
        f"received by their application: {figures['received']}; received but not rung in the "
        f"end: {figures['received_not_rung'] or 'none'}; cancelled with a 200 yet received "
        f"(published before the answer): {figures['cancelled_received_before_the_answer']}; "
        f"count alarms whose attempts differ in trigger or count: "
        f"{figures['count_attempts_that_differ']}",
        f"duplicates: {figures['duplicates']} extra publishes taken, of "
        f"{figures['duplicated_alarms']} alarms (bound {figures['duplicate_bound']}); the "
        f"broker's redeliveries of one publish: {figures['broker_redeliveries']}; deliveries "
        f"of no known alarm: {figures['unknown_deliveries']}",
    ]
    if late:
        lines.append(
            f"first receipt after the target, {late['alarms']} alarms rung by their time: "
            f"p50 {late['p50']} ms, p99 {late['p99']} ms, p99.9 {late['p999']} ms, max {late['max']} ms"
        )
    for name in MUST_BE_ZERO:
        mark = "ok" if not figures[name] else "FAILED"
        examples = figures.get(f"{name}_examples")
        lines.append(
            f"  {name:<22} {figures[name]:>6}  {mark}" + (f"  e.g. {examples}" if examples else "")
        )
    lines.append("PASSED" if not figures["failed"] else f"FAILED: {', '.join(figures['failed'])}")
    return "\n".join(lines)
