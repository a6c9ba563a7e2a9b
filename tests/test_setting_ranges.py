"""Every numeric setting is read as plain decimal and kept within a finite range: NaN, an
infinity, an overflow and a number just past a bound stop the start, naming the variable."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import fields
from decimal import Decimal
from pathlib import Path

import pytest

from clock_server.errors import ConfigError
from clock_server.setting_ranges import RANGES, check_number, read_number, shown
from clock_server.settings import NUMBER_TYPES, Settings

ROOT = Path(__file__).resolve().parent.parent
# Read from the dataclass, so that a new numeric setting is in every table below.
NUMBERS = {f.name: str(f.type) for f in fields(Settings) if f.type in NUMBER_TYPES}
STEP = Decimal("0.0000001")  # finer than any bound


def just_outside(name: str) -> list[str]:
    """The nearest numbers past each bound, in plain decimal as an operator would write them."""
    bound = RANGES[name]
    if NUMBERS[name] == "int":
        return [str(int(bound.low) - 1), str(int(bound.high) + 1)]
    low, high = Decimal(shown(bound.low)), Decimal(shown(bound.high))
    return [format(low - STEP, "f"), format(high + STEP, "f")]


def cases() -> list[tuple[str, str]]:
    return [
        (name, raw)
        for name in NUMBERS
        for raw in ("nan", "inf", "-inf", "1e400", "NaN", "9" * 5_000, *just_outside(name))
    ]


def test_every_numeric_setting_has_a_range_and_its_default_is_within_it():
    assert len(NUMBERS) > 30 and set(RANGES) == set(NUMBERS)
    defaults = Settings()
    for name, kind in NUMBERS.items():
        check_number(name, kind, getattr(defaults, name))


@pytest.mark.parametrize(("name", "raw"), cases())
def test_a_number_that_is_not_finite_or_past_a_bound_is_refused_naming_it(name: str, raw: str):
    with pytest.raises(ConfigError, match=f"CLOCK_{name.upper()}") as refused:
        Settings.from_env({f"CLOCK_{name.upper()}": raw})
    assert refused.value.field == name


@pytest.mark.parametrize("name", list(NUMBERS))
def test_a_settings_value_built_in_code_is_checked_alike(name: str):
    low, high = RANGES[name].low, RANGES[name].high
    for value in (float("nan"), float("inf"), float("-inf"), low - 1, high + 1, True, "5"):
        with pytest.raises(ConfigError, match=f"CLOCK_{name.upper()}") as refused:
            Settings(**{name: value})
        assert refused.value.field == name


@pytest.mark.parametrize("name", list(NUMBERS))
def test_both_bounds_are_accepted_as_written_in_the_docs(name: str):
    kind = NUMBERS[name]
    for bound in (RANGES[name].low, RANGES[name].high):
        assert read_number(name, kind, shown(bound)) == bound


@pytest.mark.parametrize(
    ("kind", "raw", "read"),
    [
        ("int", "25", 25),
        ("int", "0025", 25),
        ("int", "1.5", None),
        ("int", "5.0", None),
        ("int", " 5 ", None),
        ("int", "5 ", None),
        ("int", "5_000", None),
        ("int", "0x10", None),
        ("int", "+5", None),
        ("int", "5e3", None),
        ("int", "\u0665", None),  # a digit, but not an ASCII one
        ("int", "-0", None),  # read, then below the range
        ("float", "2.5", 2.5),
        ("float", "3", 3.0),
        ("float", "1.5", 1.5),
        ("float", " 5 ", None),
        ("float", "5_000", None),
        ("float", "0x10", None),
        ("float", "+5", None),
        ("float", "1e3", None),
        ("float", ".5", None),
        ("float", "5.", None),
        ("float", "infinity", None),
    ],
)
def test_only_plain_decimal_is_read(kind: str, raw: str, read: float | None):
    name = "pull_poll_ms" if kind == "int" else "stats_retention_days"
    if read is None:
        with pytest.raises(ConfigError, match=f"CLOCK_{name.upper()}"):
            read_number(name, kind, raw)
    else:
        value = read_number(name, kind, raw)
        assert value == read and type(value).__name__ == kind


def test_the_messages_say_what_a_value_must_be():
    with pytest.raises(ConfigError) as refused:
        Settings.from_env({"CLOCK_PULL_POLL_MS": "1.5"})
    assert refused.value.message.startswith("CLOCK_PULL_POLL_MS='1.5' is not a plain whole number")
    with pytest.raises(ConfigError) as refused:
        Settings.from_env({"CLOCK_STATS_RETENTION_DAYS": "36501"})
    assert (
        refused.value.message
        == "CLOCK_STATS_RETENTION_DAYS must be from 0.000001 to 36500, not 36501"
    )
    with pytest.raises(ConfigError) as refused:
        Settings(retention_days=float("nan"))
    assert refused.value.message == "CLOCK_RETENTION_DAYS must be from 0.000001 to 36500, not NaN"
    with pytest.raises(ConfigError, match="each batch is one short transaction"):
        Settings(purge_batch=1_001)


def documented_ranges() -> dict[str, tuple[str, str, str]]:
    text = (ROOT / "docs" / "configuration.md").read_text()
    section = text.split("## Numbers and their ranges", 1)[1].split("\n## ", 1)[0]
    row = re.compile(r"^\| `CLOCK_([A-Z0-9_]+)` \| (whole|decimal) \| ([0-9.,]+) \| ([0-9.,]+) \|$")
    found = [row.match(line) for line in section.splitlines() if line.startswith("| `")]
    assert all(found), section
    return {
        m[1].lower(): (m[2], m[3].replace(",", ""), m[4].replace(",", ""))
        for m in found
        if m is not None
    }


def test_the_documented_ranges_are_the_ranges():
    expected = {
        name: (
            "whole" if NUMBERS[name] == "int" else "decimal",
            shown(RANGES[name].low),
            shown(RANGES[name].high),
        )
        for name in NUMBERS
    }
    assert documented_ranges() == expected


@pytest.mark.parametrize(
    ("variable", "raw"),
    [
        ("CLOCK_STATS_RETENTION_DAYS", "nan"),
        ("CLOCK_STATS_RETENTION_DAYS", "1e400"),
        ("CLOCK_PURGE_INTERVAL_S", "nan"),
        ("CLOCK_RETENTION_DAYS", "nan"),
        ("CLOCK_WEBHOOK_TIMEOUT_S", "nan"),
        ("CLOCK_PORT", "70000"),
    ],
)
def test_the_server_refuses_to_start_with_exit_code_2_and_no_traceback(
    tmp_path: Path, variable: str, raw: str
):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CLOCK_")}
    env.update(
        {
            variable: raw,
            "CLOCK_DATABASE_URL": f"sqlite:///{tmp_path / 'clock.db'}",
            "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "clock_client" / "src")]),
        }
    )
    started = subprocess.run(
        [sys.executable, "-m", "clock_server.runtime.cli", "serve"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode == 2, started.stderr
    assert started.stderr.startswith(f"clock-server: bad configuration: {variable}")
    assert "Traceback" not in started.stderr and started.stdout == ""
    assert not (tmp_path / "clock.db").exists()
