"""The image installs the runtime dependencies from constraints.txt, each at an exact
version: every package setup.cfg requires, and each package those need in turn."""

from __future__ import annotations

import configparser
import re
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from clock_server.broker.pika_private import PIKA_VERSION

ROOT = Path(__file__).resolve().parent.parent
_PIN = re.compile(r"([A-Za-z0-9._-]+)==([0-9][A-Za-z0-9.+!-]*)")


def runtime_requirements() -> list[Requirement]:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    lines = config["options"]["install_requires"].strip().splitlines()
    return [Requirement(line.strip()) for line in lines if line.strip()]


def pins() -> dict[str, Version]:
    pinned: dict[str, Version] = {}
    for number, raw in enumerate((ROOT / "constraints.txt").read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = _PIN.fullmatch(line)
        assert match, f"constraints.txt line {number} is not <package>==<version>: {raw!r}"
        name = canonicalize_name(match[1])
        assert name not in pinned, f"constraints.txt pins {name} twice"
        pinned[name] = Version(match[2])
    return pinned


def applies(requirement: Requirement) -> bool:
    return requirement.marker is None or requirement.marker.evaluate({"extra": ""})


def test_every_runtime_dependency_is_pinned_to_a_version_it_accepts() -> None:
    pinned = pins()
    for requirement in runtime_requirements():
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{requirement.name} (setup.cfg) is not pinned in constraints.txt"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"constraints.txt pins {name}=={pinned[name]}, outside setup.cfg's {requirement}"
        )


def test_what_the_runtime_dependencies_need_is_pinned_too() -> None:
    """Walks the installed packages' own requirements (this environment was installed from
    setup.cfg): none of them is left for pip to choose."""
    pinned = pins()
    todo = [r for r in runtime_requirements() if applies(r)]
    seen: set[str] = set()
    while todo:
        requirement = todo.pop()
        name = canonicalize_name(requirement.name)
        if name in seen:
            continue
        seen.add(name)
        assert name in pinned, f"{name}, needed at run time, is not pinned in constraints.txt"
        try:
            needs = distribution(requirement.name).requires or []
        except PackageNotFoundError:
            continue
        todo.extend(r for r in map(Requirement, needs) if applies(r))


def test_the_image_installs_with_the_constraints() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "COPY setup.cfg pyproject.toml README.md LICENSE constraints.txt ./" in dockerfile
    installs = [line for line in dockerfile.splitlines() if "pip install" in line]
    assert installs and all("-c constraints.txt" in line for line in installs)


def test_pika_is_pinned_to_one_version() -> None:
    """clock's connection reaches into pika's private transport and methods
    (clock_server/broker/pika_private.py lists them), which any release may change: setup.cfg
    allows the one version they were checked against, the one constraints.txt installs."""
    (requirement,) = [r for r in runtime_requirements() if canonicalize_name(r.name) == "pika"]
    specifiers = list(requirement.specifier)
    assert [s.operator for s in specifiers] == ["=="], (
        f"setup.cfg must pin pika to one version (pika==X.Y.Z), not {requirement}"
    )
    assert Version(specifiers[0].version) == pins()["pika"], (
        f"setup.cfg's {requirement} and constraints.txt's pika=={pins()['pika']} differ"
    )
    assert Version(distribution("pika").version) == pins()["pika"], "pika installed is not pinned"
    assert Version(PIKA_VERSION) == pins()["pika"], (
        f"clock_server/broker/pika_private.py was checked against pika {PIKA_VERSION}"
    )
