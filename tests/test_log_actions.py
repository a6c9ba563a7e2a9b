"""Every log record an operator may search for carries an `action`, and docs/operations.md
lists each action."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SEARCHED_LEVELS = {"info", "warning", "error", "exception", "critical"}


def _log_calls(source: str) -> list[tuple[int, str | None]]:
    """(line, action) of each `log.<level>(...)` call at info or above; None without one."""
    calls = []
    for node in ast.walk(ast.parse(source)):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "log"
            and node.func.attr in SEARCHED_LEVELS
        ):
            continue
        action = None
        for keyword in node.keywords:
            if keyword.arg == "extra" and isinstance(keyword.value, ast.Dict):
                for key, value in zip(keyword.value.keys, keyword.value.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == "action":
                        action = value.value if isinstance(value, ast.Constant) else "?"
        calls.append((node.lineno, action))
    return calls


def _all_calls() -> dict[str, list[tuple[int, str | None]]]:
    return {
        str(path.relative_to(ROOT)): calls
        for path in sorted((ROOT / "clock_server").rglob("*.py"))
        if (calls := _log_calls(path.read_text()))
    }


def test_every_log_record_at_info_or_above_names_its_action() -> None:
    missing = {
        module: [line for line, action in calls if action is None]
        for module, calls in _all_calls().items()
        if any(action is None for _, action in calls)
    }
    assert missing == {}


def test_every_action_is_listed_in_the_operations_guide() -> None:
    guide = (ROOT / "docs" / "operations.md").read_text()
    actions = {action for calls in _all_calls().values() for _, action in calls if action}
    assert len(actions) > 40
    assert sorted(action for action in actions if f"`{action}`" not in guide) == []


def test_the_check_sees_a_record_without_an_action() -> None:
    source = (
        'log.info("a")\n'
        'log.warning("b", extra={"action": "b_happened"})\n'
        'log.debug("c")\n'
        'other.info("d")\n'
    )
    assert _log_calls(source) == [(1, None), (2, "b_happened")]
