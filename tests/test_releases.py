"""Releases agree: each `## <version> (<date>)` section of CHANGELOG.md names the commit it was
released from, a commit of that date whose setup.cfg says that version; a v* tag, where the
clone has one, is annotated and on that commit; and this tree's version is the next one's
while its top section is Unreleased."""

from __future__ import annotations

import configparser
import re

from clock_server import __version__
from tests.release_record import REPO, git, have_commit, releases, sections


def version_of(setup_cfg: str) -> str:
    parsed = configparser.ConfigParser()
    parsed.read_string(setup_cfg)
    return parsed["metadata"]["version"]


def release(version: str) -> tuple[int, ...]:
    """The release part of a version: 0.2.0.dev0 -> (0, 2, 0)."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split(".dev")[0]))


def test_this_tree_names_one_version_and_its_top_section_matches():
    assert version_of((REPO / "setup.cfg").read_text()) == __version__
    top, date = sections()[0]
    if ".dev" in __version__:
        assert (top, date) == ("Unreleased", ""), "a .dev version's changes are Unreleased"
    else:
        assert top == __version__ and date, f"release {__version__} needs its dated section"


def test_every_released_section_names_a_commit_of_its_date_and_version():
    recorded = releases()
    assert recorded, "CHANGELOG.md records no release"
    for each in recorded:
        have_commit(each)
        committed_on = git("log", "-1", "--format=%cd", "--date=short", each.commit).stdout.strip()
        assert committed_on == each.date, (
            f"{each.version}: commit of {committed_on}, not {each.date}"
        )
        assert version_of(git("show", f"{each.commit}:setup.cfg").stdout) == each.version
        ancestor = git("merge-base", "--is-ancestor", each.commit, "HEAD", check=False)
        assert ancestor.returncode == 0, f"{each.version}'s commit is not in this history"


def test_a_release_tag_where_the_clone_has_one_is_annotated_on_the_recorded_commit():
    recorded = {f"v{each.version}": each.commit for each in releases()}
    form = "--format=%(refname:short) %(objecttype) %(*objectname)"
    for line in git("for-each-ref", "refs/tags/v*", form).stdout.splitlines():
        name, kind, *target = line.split()
        assert name in recorded, f"tag {name} has no section in CHANGELOG.md"
        assert kind == "tag", f"{name} must be an annotated tag (git tag -a)"
        assert target == [recorded[name]], (
            f"{name} tags {target}, CHANGELOG.md says {recorded[name]}"
        )


def test_this_version_comes_after_every_release():
    newest = max(release(each.version) for each in releases())
    if ".dev" in __version__:
        assert release(__version__) > newest, f"{__version__} is not after {newest}"
    else:
        assert release(__version__) >= newest, f"{__version__} is before {newest}"
