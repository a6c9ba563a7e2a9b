"""The tests' own rules, read from their source: no module of tests/ imports a test module
(what tests share lives in support modules: support.py, api_support.py, conftest.py, ...);
metric values are read through the registry's samples (support.metric_value), never through
prometheus_client's private `_value`; and a wait polls in support.eventually, not in a loop of
its own around time.sleep."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

TESTS = Path(__file__).resolve().parent

# Left in these files as they are: counts that may fall, never rise.
KNOWN: dict[tuple[str, str], int] = {}


def _package(path: Path) -> str:
    return ".".join(path.relative_to(TESTS.parent).parent.parts)


def imported_test_modules(source: str, package: str) -> list[str]:
    """The test modules that `source`, a module of `package`, imports."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - node.level + 1]) if node.level else ""
            module = ".".join(part for part in (base, node.module or "") if part)
            names = [module] + [f"{module}.{alias.name}" for alias in node.names]
        else:
            continue
        found += [name for name in names if name.rsplit(".", 1)[-1].startswith("test_")]
    return found


class _Offences(ast.NodeVisitor):
    """Reads of `._value`, and `while` loops that call time.sleep (but eventually's own)."""

    def __init__(self) -> None:
        self.found: Counter[str] = Counter()
        self._functions: list[str] = []

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._functions.append(node.name)
        self.generic_visit(node)
        self._functions.pop()

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if node.attr == "_value":
            self.found["_value"] += 1
        self.generic_visit(node)

    def visit_While(self, node: ast.While) -> None:
        sleeps = any(
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr == "sleep"
            and isinstance(call.func.value, ast.Name)
            and call.func.value.id == "time"
            for statement in node.body
            for call in ast.walk(statement)
        )
        if sleeps and self._functions[-1:] != ["eventually"]:
            self.found["sleep loop"] += 1
        self.generic_visit(node)


def offences(source: str) -> Counter[str]:
    visitor = _Offences()
    visitor.visit(ast.parse(source))
    return visitor.found


def _modules() -> list[Path]:
    return sorted(TESTS.rglob("*.py"))


def test_no_module_of_the_tests_imports_a_test_module() -> None:
    over = {}
    for path in _modules():
        name = str(path.relative_to(TESTS.parent))
        imported = imported_test_modules(path.read_text(), _package(path))
        if len(imported) > KNOWN.get(("test import", name), 0):
            over[name] = imported
    assert over == {}


def test_no_test_reads_private_metric_values_or_polls_in_a_loop_of_its_own() -> None:
    over = {}
    for path in _modules():
        name = str(path.relative_to(TESTS.parent))
        for kind, count in offences(path.read_text()).items():
            if count > KNOWN.get((kind, name), 0):
                over[(kind, name)] = count
    assert over == {}


def test_the_checks_find_what_they_look_for() -> None:
    source = (
        "from tests.test_api import body\n"
        "from . import test_pull\n"
        "from .support import eventually\n"
        "import tests.faults.test_faults\n"
        "value = metrics.rung.labels('a')._value.get()\n"
        "while not done():\n"
        "    time.sleep(0.01)\n"
        "def eventually():\n"
        "    while True:\n"
        "        time.sleep(0.01)\n"
    )
    assert imported_test_modules(source, "tests") == [
        "tests.test_api",
        "tests.test_pull",
        "tests.faults.test_faults",
    ]
    assert offences(source) == {"_value": 1, "sleep loop": 1}
