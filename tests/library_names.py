"""What the checks of a library's undocumented names share (tests/test_pika_private_names.py,
tests/test_waitress_names.py): finding a listed owner, and a method's parameters."""

from __future__ import annotations

import importlib
import inspect
from typing import Any


def resolve(owner: str) -> Any:
    """The module, or the class or function of a module, that `owner` names (``x.y:Class``)."""
    module_name, _, qualname = owner.partition(":")
    found: Any = importlib.import_module(module_name)
    for part in filter(None, qualname.split(".")):
        found = getattr(found, part)
    return found


def parameters(function: Any) -> str:
    """The parameters of `function` as inspect.signature shows them, without annotations."""
    signature = inspect.signature(function)
    plain = [p.replace(annotation=p.empty) for p in signature.parameters.values()]
    return str(signature.replace(parameters=plain, return_annotation=signature.empty))
