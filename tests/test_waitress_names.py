"""The undocumented names of waitress that clock uses (clock_server/runtime/waitress_private.py),
checked against the waitress installed: each is still where clock expects it, and a method
still takes the parameters clock gives it."""

from __future__ import annotations

import inspect
import re
from importlib.metadata import version

import pytest

from clock_server.runtime import waitress_private
from clock_server.runtime.waitress_private import (
    ATTRIBUTE,
    CLASS_ATTRIBUTE,
    METHOD,
    NAMES,
    PARAMETER,
    WaitressName,
)
from tests.library_names import parameters, resolve

LIST = "clock_server/runtime/waitress_private.py"
_MISSING = object()


def sets_on_instances(cls: type, name: str) -> bool:
    """Whether a method of `cls` or of a base sets `self.<name>`, alone or in a tuple."""
    pattern = re.compile(rf"\bself\.{re.escape(name)}\s*(=[^=]|,)")
    return any(pattern.search(inspect.getsource(base)) for base in cls.__mro__
               if base.__module__.startswith("waitress"))  # fmt: skip


def problem(entry: WaitressName) -> str | None:
    """What is wrong with `entry` in the waitress installed; None when it is as listed."""
    label = f"waitress {version('waitress')}'s {entry.owner.split(':')[1]}.{entry.name}"
    try:
        owner = resolve(entry.owner)
    except (ImportError, AttributeError) as error:
        return f"waitress {version('waitress')} has no {entry.owner}: {error}"
    if entry.kind == PARAMETER:
        if entry.name not in inspect.signature(owner).parameters:
            return f"{label} is not a parameter any more"
        return None
    if entry.kind == ATTRIBUTE:
        return None if sets_on_instances(owner, entry.name) else f"{label} is set no more"
    found = inspect.getattr_static(owner, entry.name, _MISSING)
    if found is _MISSING:
        return f"{label} ({entry.kind}) is gone"
    if entry.kind == METHOD:
        if not inspect.isfunction(found):
            return f"{label} is no longer a method: {found!r}"
        if parameters(found) != entry.signature:
            return f"{label} takes {parameters(found)}, where clock expects {entry.signature}"
    return None


@pytest.mark.parametrize("entry", NAMES, ids=lambda entry: f"{entry.owner}.{entry.name}")
def test_each_listed_name_is_in_waitress_as_clock_uses_it(entry: WaitressName) -> None:
    message = problem(entry)
    assert message is None, f"{message} (listed in {LIST})"


def test_the_list_is_of_the_waitress_pinned() -> None:
    assert version("waitress") == waitress_private.WAITRESS_VERSION, (
        f"waitress {version('waitress')} is installed; the names in {LIST} were checked "
        f"against {waitress_private.WAITRESS_VERSION}: check them again, then set "
        "WAITRESS_VERSION"
    )


@pytest.mark.parametrize(
    "entry",
    [
        WaitressName("waitress.channel:HTTPChannel", "no_such_class_name", CLASS_ATTRIBUTE),
        WaitressName("waitress.parser:HTTPRequestParser", "no_such_state", ATTRIBUTE),
        WaitressName("waitress.task:WSGITask", "get_environment", METHOD, "(self, extra)"),
        WaitressName("waitress.server:create_server", "_no_such_parameter", PARAMETER),
        WaitressName("waitress.no_such_module:Class", "name", CLASS_ATTRIBUTE),
    ],
)
def test_a_name_waitress_drops_or_changes_fails_naming_it(entry: WaitressName) -> None:
    message = problem(entry)
    assert message is not None and (entry.name in message or entry.owner in message)
