"""The private names of pika that clock uses (clock_server/broker/pika_private.py), checked
against the pika installed, without a broker: each is still where clock expects it, a
method still takes the parameters clock gives it, and clock_server/broker uses, imports or
overrides no private name of pika left out of the list."""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import pika
import pytest
from pika.adapters.select_connection import IOLoop
from pika.adapters.utils import io_services_utils

from clock_server.broker import pika_private
from clock_server.broker.amqp_connection import PublishingConnection
from clock_server.broker.pika_private import (
    ATTRIBUTE,
    CLASS,
    METHOD,
    OVERRIDE,
    PRIVATE_NAMES,
    PikaName,
)
from tests.library_names import parameters, resolve

ROOT = Path(__file__).resolve().parent.parent
BROKER = ROOT / "clock_server" / "broker"
PIKA = Path(pika.__file__).resolve().parent
LIST = "clock_server/broker/pika_private.py"
_MISSING = object()


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


# Each name of the list against the pika installed.


class _NoLoop:
    """The one IO service a plain transport's constructor asks for."""

    def set_reader(self, fd: int, on_readable: object) -> None:
        pass


@contextlib.contextmanager
def offline(cls: type) -> Iterator[Any]:
    """An instance of a pika class, made without a broker, for the names set on instances."""
    if issubclass(cls, io_services_utils._AsyncTransportBase):
        left, right = socket.socketpair()
        with left, right:
            yield cls(left, None, _NoLoop())
    elif issubclass(cls, pika.SelectConnection):
        loop = IOLoop()
        try:
            yield cls(custom_ioloop=loop, internal_connection_workflow=False)
        finally:
            loop.close()
    else:
        raise LookupError(f"no instance of {cls.__qualname__} is made here: add it to offline()")


def problem(entry: PikaName) -> str | None:
    """What is wrong with `entry` in the pika installed; None when it is as listed."""
    version = f"pika {pika.__version__}"
    try:
        owner = resolve(entry.owner)
    except (ImportError, AttributeError) as error:
        return f"{version} has no {entry.owner}, where clock finds {entry.label}: {error}"
    if entry.kind == ATTRIBUTE:
        with offline(owner) as instance:
            found = vars(instance).get(entry.name, _MISSING)
    else:
        found = getattr(owner, entry.name, _MISSING)
    if found is _MISSING:
        return f"{version} has no {entry.label} ({entry.kind} of {entry.owner}), which clock uses"
    if entry.kind == CLASS and not isinstance(found, type):
        return f"{version}'s {entry.label} is no longer a class: {found!r}"
    if entry.kind in (METHOD, OVERRIDE):
        if not inspect.isfunction(found):
            return f"{version}'s {entry.label} is no longer a method: {found!r}"
        if parameters(found) != entry.signature:
            return (
                f"{version}'s {entry.label} takes {parameters(found)}, where clock expects "
                f"{entry.signature}"
            )
    return None


@pytest.mark.parametrize("entry", PRIVATE_NAMES, ids=lambda entry: entry.label)
def test_each_listed_name_is_in_pika_as_clock_uses_it(entry: PikaName) -> None:
    message = problem(entry)
    assert message is None, f"{message} (listed in {LIST})"


def test_the_list_is_of_the_pika_pinned() -> None:
    assert pika.__version__ == pika_private.PIKA_VERSION, (
        f"pika {pika.__version__} is installed; the private names in {LIST} were checked "
        f"against {pika_private.PIKA_VERSION}: check them again, then set PIKA_VERSION"
    )


def test_a_name_pika_drops_or_changes_fails_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    by_name = {entry.name: entry for entry in PRIVATE_NAMES}
    monkeypatch.delattr(pika.connection.Connection, "_output_marshaled_frames")
    message = problem(by_name["_output_marshaled_frames"])
    assert message and "SelectConnection._output_marshaled_frames" in message

    monkeypatch.setattr(
        pika.connection.Connection, "_on_data_available", lambda self, data_in, size: None
    )
    message = problem(by_name["_on_data_available"])
    assert message and "takes (self, data_in, size)" in message

    made = io_services_utils._AsyncPlaintextTransport.__init__

    def renamed(self: Any, *args: Any) -> None:
        made(self, *args)
        self._socket = self.__dict__.pop("_sock")

    monkeypatch.setattr(io_services_utils._AsyncPlaintextTransport, "__init__", renamed)
    message = problem(by_name["_sock"])
    assert message and "_AsyncPlaintextTransport._sock (attribute" in message

    monkeypatch.delattr(io_services_utils, "_AsyncPlaintextTransport")
    message = problem(by_name["_AsyncPlaintextTransport"])
    assert message and "io_services_utils._AsyncPlaintextTransport" in message
    message = problem(by_name["_on_socket_writable"])
    assert message and "_AsyncPlaintextTransport" in message


# What clock_server/broker uses of pika, read from its source.


class Use(NamedTuple):
    """A private name the source reads, calls or imports; `own` when it is an
    attribute of `self` that the enclosing class of the source defines itself."""

    where: str
    name: str
    own: bool = False


class _Uses(ast.NodeVisitor):
    def __init__(self, where: str) -> None:
        self.where = where
        self.uses: list[Use] = []
        self._classes: list[set[str]] = []  # the names each enclosing class defines
        self._selves: list[str | None] = []  # the first parameter of each enclosing method

    def _add(self, node: ast.AST, name: str, own: bool = False) -> None:
        if is_private(name):
            self.uses.append(Use(f"{self.where}:{getattr(node, 'lineno', 0)}", name, own))

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._classes.append(class_names(node))
        self._selves.append(None)
        self.generic_visit(node)
        self._selves.pop()
        self._classes.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        arguments = node.args.posonlyargs + node.args.args
        if self._classes and self._selves[-1] is None:  # a method: its first parameter
            self._selves.append(arguments[0].arg if arguments else None)
        else:  # a function inside a method sees the method's
            self._selves.append(self._self())
        self.generic_visit(node)
        self._selves.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Attribute(self, node: ast.Attribute) -> None:
        receiver = node.value
        on_self = isinstance(receiver, ast.Name) and receiver.id == self._self()
        on_super = (
            isinstance(receiver, ast.Call)
            and isinstance(receiver.func, ast.Name)
            and receiver.func.id == "super"
        )
        own = on_self and not on_super and node.attr in self._classes[-1]
        self._add(node, node.attr, own)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        reads = ("getattr", "setattr", "hasattr", "delattr")
        if isinstance(node.func, ast.Name) and node.func.id in reads and len(node.args) > 1:
            name = node.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str):
                self._add(node, name.value)
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if module.split(".")[0] == "pika":
            for part in module.split("."):
                self._add(node, part)
            for alias in node.names:
                self._add(node, alias.name)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name.split(".")[0] == "pika":
                for part in alias.name.split("."):
                    self._add(node, part)

    def _self(self) -> str | None:
        return self._selves[-1] if self._selves else None


def class_names(node: ast.ClassDef) -> set[str]:
    """What a class defines itself: its methods, its class attributes and what its methods
    assign to their first parameter (self)."""
    names: set[str] = set()
    for statement in node.body:
        if isinstance(statement, ast.FunctionDef | ast.AsyncFunctionDef):
            names.add(statement.name)
            arguments = statement.args.posonlyargs + statement.args.args
            first = arguments[0].arg if arguments else None
            for inner in ast.walk(statement):
                if (
                    isinstance(inner, ast.Attribute)
                    and isinstance(inner.ctx, ast.Store)
                    and isinstance(inner.value, ast.Name)
                    and inner.value.id == first
                ):
                    names.add(inner.attr)
        names |= assigned(statement)
    return names


def assigned(statement: ast.stmt) -> set[str]:
    if isinstance(statement, ast.Assign):
        targets = statement.targets
    elif isinstance(statement, ast.AnnAssign | ast.AugAssign):
        targets = [statement.target]
    else:
        return set()
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def uses(source: str, where: str) -> list[Use]:
    visitor = _Uses(where)
    visitor.visit(ast.parse(source))
    return visitor.uses


def pika_defines() -> set[str]:
    """Every private name pika's own source defines: modules, classes, functions, methods,
    and what it assigns, on instances too."""
    names = {path.stem for path in PIKA.rglob("*.py")}
    names |= {path.name for path in PIKA.rglob("*") if path.is_dir()}
    for path in PIKA.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return {name for name in names if is_private(name)}


def unlisted(found: list[Use], pika_names: set[str]) -> list[str]:
    """The uses of private names of pika that the list leaves out. A name pika does not
    define is clock's; one it does is clock's only as an attribute of `self` that the
    class around it defines (test_the_connection_overrides_only_listed_methods sees that
    such a name is no override)."""
    listed = {entry.name for entry in PRIVATE_NAMES}
    return [
        f"{use.where} uses {use.name}, a private name of pika {pika.__version__} that {LIST} "
        "does not list: list it there (and in its docstring and docs/design.md), or use "
        "something public"
        for use in found
        if use.name in pika_names and use.name not in listed and not use.own
    ]


def broker_uses() -> list[Use]:
    found = []
    for path in sorted(BROKER.glob("*.py")):
        found += uses(path.read_text(), str(path.relative_to(ROOT)))
    return found


def test_the_broker_uses_no_private_pika_name_the_list_leaves_out() -> None:
    found = unlisted(broker_uses(), pika_defines())
    assert not found, "\n".join(found)


def test_every_listed_name_is_used() -> None:
    used = {use.name for use in broker_uses()}
    stale = [entry.label for entry in PRIVATE_NAMES if entry.name not in used]
    assert stale == [], f"{LIST} lists names clock_server/broker no longer uses: {stale}"


def test_the_source_check_finds_a_private_pika_name_left_out() -> None:
    source = (
        "from pika.adapters.utils.io_services_utils import _AsyncSSLTransport\n"
        "class Connection:\n"
        "    def __init__(self):\n"
        "        self._heap = []\n"
        "    def look(self, transport):\n"
        "        getattr(self, '_channels')\n"
        "        return self._heap, self._tx_buffers, transport._tx_buffers, self._sock\n"
    )
    found = unlisted(uses(source, "example.py"), pika_defines())
    assert [line.split(" a private")[0] for line in found] == [
        "example.py:1 uses _AsyncSSLTransport,",
        "example.py:6 uses _channels,",
        "example.py:7 uses _tx_buffers,",
        "example.py:7 uses _tx_buffers,",
    ]


def pika_subclasses() -> list[type]:
    """clock_server/broker's classes derived from a pika class."""
    found = []
    for path in sorted(BROKER.glob("*.py")):
        module = importlib.import_module(f"clock_server.broker.{path.stem}")
        for value in vars(module).values():
            if (
                isinstance(value, type)
                and value.__module__ == module.__name__
                and any(base.__module__.split(".")[0] == "pika" for base in value.__mro__)
            ):
                found.append(value)
    return found


def overrides(cls: type) -> dict[str, type]:
    """The names `cls` defines that its pika base classes have too (instances included),
    with the first such pika class."""
    pika_bases = [base for base in cls.__mro__ if base.__module__.split(".")[0] == "pika"]
    with offline(pika_bases[0]) as instance:
        on_instances = set(vars(instance))
    found = {}
    for name in vars(cls):
        if name == "_abc_impl" or (name.startswith("__") and name.endswith("__")):  # Python's
            continue
        if name in on_instances:
            found[name] = pika_bases[0]
        for base in pika_bases:
            if name in vars(base):
                found[name] = base
                break
    return found


def test_the_connection_overrides_only_listed_methods() -> None:
    """A name a clock class defines over pika's replaces pika's: it must be a listed
    override, with pika's parameters."""
    assert pika_subclasses() == [PublishingConnection]
    listed = {entry.name: entry for entry in PRIVATE_NAMES if entry.kind == OVERRIDE}
    defined = set()
    for cls in pika_subclasses():
        for name, base in overrides(cls).items():
            where = f"{cls.__module__}.{cls.__qualname__}.{name}"
            entry = listed.get(name)
            assert entry is not None, (
                f"{where} replaces pika's {base.__qualname__}.{name}: rename it, or list it in "
                f"{LIST} as an override"
            )
            assert issubclass(cls, resolve(entry.owner)), f"{where} overrides {entry.owner}"
            assert parameters(vars(cls)[name]) == entry.signature, (
                f"{where} takes {parameters(vars(cls)[name])}, pika's {entry.signature}"
            )
            defined.add(name)
    assert defined == set(listed), f"{LIST} lists overrides no class makes: {set(listed) - defined}"


def test_the_override_check_finds_a_method_that_replaces_pikas() -> None:
    class Shadowing(pika.SelectConnection):
        def _on_stream_terminated(self, error: object = None) -> None:
            pass

        _frame_buffer = b""
        _watching = True

    assert set(overrides(Shadowing)) == {"_on_stream_terminated", "_frame_buffer"}


# The docs name every one.


def test_the_lists_docstring_and_the_design_doc_name_every_name() -> None:
    design = (ROOT / "docs" / "design.md").read_text()
    docstring = pika_private.__doc__ or ""
    for entry in PRIVATE_NAMES:
        assert entry.label in docstring, f"{LIST}'s docstring does not name {entry.label}"
        assert entry.label in design, f"docs/design.md does not name {entry.label}"
