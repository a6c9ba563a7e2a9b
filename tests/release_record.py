"""The releases as CHANGELOG.md records them: each `## <version> (<date>)` section names the
commit it was released from, so a clone without tags still knows where each release is."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SECTION = re.compile(r"^## (\S+)(?: \((\d{4}-\d\d-\d\d)\))?$", re.MULTILINE)
COMMIT = re.compile(r"^Released from commit `([0-9a-f]{40})`", re.MULTILINE)


@dataclass(frozen=True)
class Release:
    version: str
    date: str
    commit: str


def git(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(REPO), *args], capture_output=True, text=True, check=check
    )


def sections() -> list[tuple[str, str]]:
    return SECTION.findall((REPO / "CHANGELOG.md").read_text())


def releases() -> list[Release]:
    """Each released section, newest first, with the commit its first line names."""
    text = (REPO / "CHANGELOG.md").read_text()
    heads = list(SECTION.finditer(text))
    found = []
    for head, after in zip(heads, [*heads[1:], None], strict=False):
        version, date = head.groups()
        if version == "Unreleased":
            continue
        body = text[head.end() : after.start() if after else len(text)]
        commit = COMMIT.search(body)
        assert commit, f"## {version}: no 'Released from commit `<sha>`' line"
        found.append(Release(version, date or "", commit.group(1)))
    return found


def have_commit(release: Release) -> None:
    """Fail, saying why, when the clone lacks the release's commit (a shallow clone)."""
    if git("cat-file", "-e", f"{release.commit}^{{commit}}", check=False).returncode != 0:
        pytest.fail(
            f"commit {release.commit} of release {release.version} is not in {REPO}:"
            " fetch the whole history (git fetch --unshallow)"
        )
