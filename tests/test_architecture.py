"""The layers of clock_server, as setup.cfg's import-linter contracts state them, and no import
hidden inside a function without a comment saying why."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(root / "setup.cfg"), "--no-cache"],
        cwd=root,
        env={"PYTHONPATH": str(root), "PATH": str(LINT_IMPORTS.parent)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_import_contracts_hold() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("engine/heap.py", "import clock_server.store.claims", "through their interfaces"),
        ("engine/ringer.py", "import pika", "through their interfaces"),
        ("store/sql.py", "import clock_server.engine.heap", "Layers"),
        ("api/routes.py", "import sqlalchemy", "Only store/ talks SQL"),
        ("api/routes.py", "import clock_server.api.app", "No import cycles"),
        ("engine/maintenance.py", "import cronsim", "Only recurrence.py parses cron"),
    ],
)
def test_a_broken_contract_fails(tmp_path: Path, module: str, line: str, contract: str) -> None:
    shutil.copytree(ROOT / "clock_server", tmp_path / "clock_server")
    shutil.copy(ROOT / "setup.cfg", tmp_path / "setup.cfg")
    path = tmp_path / "clock_server" / module
    path.write_text(path.read_text() + f"\n{line}  # noqa\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0, result.stdout
    broken = [row for row in result.stdout.splitlines() if row.rstrip().endswith("BROKEN")]
    assert any(contract in row for row in broken), result.stdout


def _imports_inside_functions(source: str) -> list[int]:
    """Lines of imports inside a function whose line above is not a comment saying why."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.Import | ast.ImportFrom):
                above = lines[inner.lineno - 2].strip() if inner.lineno > 1 else ""
                if not above.startswith("#"):
                    found.append(inner.lineno)
    return found


def test_no_import_inside_a_function_without_a_comment_saying_why() -> None:
    hidden = {
        str(path.relative_to(ROOT)): lines
        for path in sorted((ROOT / "clock_server").rglob("*.py"))
        if (lines := _imports_inside_functions(path.read_text()))
    }
    assert hidden == {}


def test_the_import_check_sees_an_import_inside_a_function() -> None:
    source = "def f():\n    import os\n\n\ndef g():\n    # why\n    import os\n"
    assert _imports_inside_functions(source) == [2]
