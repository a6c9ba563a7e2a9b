"""The README's promises about itself: CI runs exactly its test command, and every package
setup.cfg and the SDK's clock_client/pyproject.toml ask for has a line saying why."""

from __future__ import annotations

import configparser
import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
TEST_COMMAND = (
    "python3 -m venv .venv && .venv/bin/pip install -q -e './clock_client[amqp,async,webhooks]'"
    " -e '.[test]' && .venv/bin/python -m pytest"
)


def shell_blocks(text: str) -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)


def requirements() -> dict[str, list[str]]:
    """Package names by where setup.cfg lists them: install_requires and each extra."""
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    found = {"install_requires": config["options"]["install_requires"]}
    found.update(config["options.extras_require"])
    return {
        where: [Requirement(line.strip()).name for line in lines.splitlines() if line.strip()]
        for where, lines in found.items()
    }


def client_requirements() -> dict[str, list[str]]:
    """Package names by where the SDK's pyproject.toml lists them: its dependencies and each
    extra."""
    project = tomllib.loads((ROOT / "clock_client" / "pyproject.toml").read_text())["project"]
    found = {"client": project["dependencies"]}
    found.update(
        {f"client[{extra}]": lines for extra, lines in project["optional-dependencies"].items()}
    )
    return {where: [Requirement(line).name for line in lines] for where, lines in found.items()}


def packages_with_a_reason(text: str) -> set[str]:
    """The first cell of every two-column table row whose second cell says something."""
    rows = re.findall(r"^\| ([^|`]+?) \| ([^|]+) \|$", text, flags=re.MULTILINE)
    return {canonicalize_name(name) for name, why in rows if why.strip(" -") not in ("", "why")}


def test_ci_runs_the_readmes_test_command_exactly() -> None:
    readme_commands = [line for block in shell_blocks((ROOT / "README.md").read_text())
                       for line in block.splitlines()]  # fmt: skip
    assert TEST_COMMAND in readme_commands
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line.strip()]
    assert ci[-1] == TEST_COMMAND


def test_every_dependency_has_a_line_saying_why() -> None:
    explained = packages_with_a_reason((ROOT / "README.md").read_text())
    wanted = requirements() | client_requirements()
    assert set(wanted) >= {"install_requires", "test", "bench", "client", "client[amqp]"}
    missing = {
        where: [name for name in names if canonicalize_name(name) not in explained]
        for where, names in wanted.items()
    }
    assert missing == {where: [] for where in wanted}


def test_the_check_sees_a_dependency_without_a_reason() -> None:
    table = "| package | why |\n| --- | --- |\n| Flask | the HTTP API |\n| pika | - |\n"
    assert packages_with_a_reason(table) == {"flask"}
