"""Every log record of clock names its `action`, docs/operations.md lists each action, and
each action it lists is one the code has."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LEVELS = {"debug", "info", "warning", "error", "exception", "critical", "log"}


def _action_of(extra: ast.expr) -> str | None:
    """The action an `extra=` names: the "action" key of a dict, or the last positional
    argument, a string, of a call that builds it (`self.fields(node, "broker_connected")`)."""
    if isinstance(extra, ast.Dict):
        for key, value in zip(extra.keys, extra.values, strict=True):
            if isinstance(key, ast.Constant) and key.value == "action":
                return value.value if isinstance(value, ast.Constant) else "?"
    if isinstance(extra, ast.Call) and extra.args:
        last = extra.args[-1]
        if isinstance(last, ast.Constant) and isinstance(last.value, str):
            return last.value
    return None


def _log_calls(source: str) -> list[tuple[int, str | None]]:
    """(line, action) of each `log.<level>(...)` call, at any level; None without one."""
    calls = []
    for node in ast.walk(ast.parse(source)):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "log"
            and node.func.attr in LEVELS
        ):
            continue
        extras = [keyword.value for keyword in node.keywords if keyword.arg == "extra"]
        calls.append((node.lineno, _action_of(extras[0]) if extras else None))
    return calls


def _sources() -> dict[str, str]:
    return {
        str(path.relative_to(ROOT)): path.read_text()
        for path in sorted((ROOT / "clock_server").rglob("*.py"))
    }


def _all_calls() -> dict[str, list[tuple[int, str | None]]]:
    return {module: calls for module, source in _sources().items() if (calls := _log_calls(source))}


def _documented_actions() -> set[str]:
    """The actions in the first column of the table of docs/operations.md's "The actions"."""
    guide = (ROOT / "docs" / "operations.md").read_text()
    section = guide.split("\n### The actions\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([a-z_.]+)`", row.split(" | ")[0])}


def _string_constants() -> set[str]:
    return {
        node.value
        for source in _sources().values()
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    }


def test_every_log_record_names_its_action() -> None:
    missing = {
        module: [line for line, action in calls if action is None]
        for module, calls in _all_calls().items()
        if any(action is None for _, action in calls)
    }
    assert missing == {}


def test_every_action_is_listed_in_the_operations_guide() -> None:
    documented = _documented_actions()
    actions = {action for calls in _all_calls().values() for _, action in calls if action}
    assert len(actions) > 40
    assert sorted(actions - documented) == []


def test_every_action_the_guide_lists_is_in_the_code() -> None:
    documented = _documented_actions()
    assert {"http_request", "broker_reconnected", "library"} <= documented
    assert sorted(documented - _string_constants()) == []


def test_the_check_sees_a_record_without_an_action() -> None:
    source = (
        'log.info("a")\n'
        'log.warning("b", extra={"action": "b_happened"})\n'
        'log.debug("c")\n'
        'other.info("d")\n'
        'log.log(level, "e", extra=self.fields(node, "e_happened"))\n'
        'log.error("f", extra=fields)\n'
    )
    assert _log_calls(source) == [
        (1, None), (2, "b_happened"), (3, None), (5, "e_happened"), (6, None)]  # fmt: skip
