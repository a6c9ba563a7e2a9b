"""Releases agree: each `## <version> (<date>)` section of CHANGELOG.md has its annotated tag
v<version> on a commit of that date whose setup.cfg says that version, each release tag has
its section, and this tree's version is the next one's while its top section is Unreleased."""

from __future__ import annotations

import configparser
import re
import subprocess
from pathlib import Path

import pytest

from clock_server import __version__

REPO = Path(__file__).resolve().parent.parent
SECTION = re.compile(r"^## (\S+)(?: \((\d{4}-\d\d-\d\d)\))?$", re.MULTILINE)


def git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True
    ).stdout


def version_of(setup_cfg: str) -> str:
    parsed = configparser.ConfigParser()
    parsed.read_string(setup_cfg)
    return parsed["metadata"]["version"]


def release(version: str) -> tuple[int, ...]:
    """The release part of a version: 0.2.0.dev0 -> (0, 2, 0)."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split(".dev")[0]))


def sections() -> list[tuple[str, str | None]]:
    return SECTION.findall((REPO / "CHANGELOG.md").read_text())


def release_tags() -> dict[str, tuple[str, str]]:
    """Each v* tag: its object's type and the date of the commit it tags."""
    form = "--format=%(refname:short) %(objecttype) %(*committerdate:short)"
    tags = {}
    for line in git("for-each-ref", "refs/tags/v*", form).splitlines():
        name, kind, *date = line.split()
        tags[name] = (kind, date[0] if date else "")
    if not tags:
        pytest.fail(f"no release tag (v*) in {REPO}: fetch the tags (git fetch --tags)")
    return tags


def test_this_tree_names_one_version_and_its_top_section_matches():
    assert version_of((REPO / "setup.cfg").read_text()) == __version__
    top, date = sections()[0]
    if ".dev" in __version__:
        assert (top, date) == ("Unreleased", ""), "a .dev version's changes are Unreleased"
    else:
        assert top == __version__ and date, f"release {__version__} needs its dated section"


def test_every_released_section_has_its_tag_and_every_tag_its_section():
    tags = release_tags()
    released = {name: date for name, date in sections() if name != "Unreleased"}
    assert {f"v{name}" for name in released} == set(tags)
    for name, date in released.items():
        kind, tagged_on = tags[f"v{name}"]
        assert kind == "tag", f"v{name} must be an annotated tag (git tag -a)"
        assert tagged_on == date, f"v{name} tags a commit of {tagged_on}, CHANGELOG says {date}"
        assert version_of(git("show", f"v{name}:setup.cfg")) == name


def test_this_version_comes_after_every_release():
    newest = max(release(name.removeprefix("v")) for name in release_tags())
    if ".dev" in __version__:
        assert release(__version__) > newest, f"{__version__} is not after v{newest}"
    else:
        assert release(__version__) >= newest, f"{__version__} is before v{newest}"
