"""Turning a benchmark result into a Markdown table and a lateness plot."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _fmt(value: Any, digits: int = 1) -> str:
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def spread(cell: dict[str, float] | None, digits: int = 1) -> str:
    """'median (min-max)' of a median_and_spread() cell."""
    if not cell:
        return "not run"
    if cell["runs"] == 1:
        return _fmt(cell["median"], digits)
    return (
        f"{_fmt(cell['median'], digits)} ({_fmt(cell['min'], digits)}-{_fmt(cell['max'], digits)})"
    )


def markdown(summary: dict[str, Any]) -> str:
    """One row per figure: what, median (min-max over runs), target, met."""
    lines = [
        f"Measured {summary['date']} on {summary['machine']}; {summary['runs']} run(s) each; "
        "median (lowest-highest); met: in each run.",
        "",
        "| figure | measured | target | met |",
        "| --- | --- | --- | --- |",
    ]
    for row in summary["rows"]:
        met = {True: "yes", False: "**no**", None: "-"}[row.get("met")]
        lines.append(f"| {row['figure']} | {row['measured']} | {row['target']} | {met} |")
    return "\n".join(lines) + "\n"


def plot_lateness(samples: dict[str, list[float]], path: Path) -> None:
    """Cumulative distribution of lateness (ms) per labelled run, log-scaled x axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 4.5), dpi=110)
    for label, values in samples.items():
        ordered = sorted(max(v, 0.1) for v in values)
        if not ordered:
            continue
        fractions = [(i + 1) / len(ordered) for i in range(len(ordered))]
        axis.plot(ordered, fractions, label=label)
    axis.set_xscale("log")
    axis.set_xlabel("lateness: received - target_ring_at (ms, log scale)")
    axis.set_ylabel("fraction of alarms")
    axis.set_title("clock: lateness distribution")
    axis.grid(True, which="both", alpha=0.3)
    axis.legend(loc="lower right", fontsize=8)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)


def write(summary: dict[str, Any], directory: Path, stem: str) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    json_path = directory / f"{stem}.json"
    md_path = directory / f"{stem}.md"
    json_path.write_text(json.dumps(summary, indent=1, default=str))
    md_path.write_text(markdown(summary))
    return json_path, md_path
