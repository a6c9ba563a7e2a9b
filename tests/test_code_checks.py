"""ruff's lint and format and mypy's types, as setup.cfg and ruff.toml configure them: run by
the test command, so that a change that breaks one fails CI."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


@pytest.mark.parametrize(
    "command",
    [("ruff", "check", "."), ("ruff", "format", "--check", "."), ("mypy",)],
    ids=["ruff-check", "ruff-format", "mypy"],
)
def test_the_check_finds_nothing(command: tuple[str, ...]) -> None:
    result = _run(*command)
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_type_error_fails_mypy(tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.py"
    wrong.write_text("def half(n: int) -> int:\n    return n / 2\n")
    result = _run("mypy", "--no-incremental", str(wrong))
    assert result.returncode == 1 and "Incompatible return value type" in result.stdout
