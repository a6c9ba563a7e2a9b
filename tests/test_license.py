"""LICENSE is the MIT license of "the clock authors", and the packages' metadata says the same:
setup.cfg's `license` and `license_files`, the SDK's own pyproject.toml where there is one,
and the image ships the file."""

from __future__ import annotations

import configparser
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
LICENSE = ROOT / "LICENSE"
CLIENT_PROJECT = ROOT / "clock_client" / "pyproject.toml"
HOLDER = "the clock authors"

# The MIT license as the OSI and SPDX give it, after its copyright line.
MIT_BODY = """
Permission is hereby granted, free of charge, to any person obtaining a copy of this software
and associated documentation files (the "Software"), to deal in the Software without
restriction, including without limitation the rights to use, copy, modify, merge, publish,
distribute, sublicense, and/or sell copies of the Software, and to permit persons to whom the
Software is furnished to do so, subject to the following conditions:

The above copyright notice and this permission notice shall be included in all copies or
substantial portions of the Software.

THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR IMPLIED, INCLUDING
BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY, FITNESS FOR A PARTICULAR PURPOSE AND
NONINFRINGEMENT. IN NO EVENT SHALL THE AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM,
DAMAGES OR OTHER LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE SOFTWARE.
"""
_COPYRIGHT = re.compile(r"Copyright \(c\) (\d{4})(?:-(\d{4}))? (.+)")


def mit_problems(text: str, holder: str) -> list[str]:
    """What keeps `text` from being the MIT license with `holder`'s copyright: [] if nothing."""
    lines = [line.strip() for line in text.strip().splitlines()]
    problems = []
    if not lines or lines[0] != "MIT License":
        problems.append("the first line is not 'MIT License'")
    copyrights = [match for line in lines if (match := _COPYRIGHT.fullmatch(line))]
    if len(copyrights) != 1:
        problems.append("not exactly one 'Copyright (c) <year> <holder>' line")
    elif copyrights[0][3] != holder:
        problems.append(f"the copyright holder is {copyrights[0][3]!r}, not {holder!r}")
    elif copyrights[0][2] and copyrights[0][2] < copyrights[0][1]:
        problems.append("the copyright's years run backwards")
    after = next((i for i, line in enumerate(lines) if _COPYRIGHT.fullmatch(line)), 0)
    body = "\n".join(lines[after + 1 :])
    if body.split() != MIT_BODY.split():
        problems.append("the text after the copyright line is not the MIT license's")
    return problems


def setup_cfg() -> configparser.ConfigParser:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return config


def test_the_license_is_mit_of_the_clock_authors() -> None:
    assert mit_problems(LICENSE.read_text(), HOLDER) == []


def test_setup_cfg_declares_mit_and_ships_the_file() -> None:
    metadata = setup_cfg()["metadata"]
    assert metadata["license"] == "MIT"
    files = metadata["license_files"].split()
    assert [ROOT / name for name in files] == [LICENSE]


# What setuptools ships as license files when a pyproject.toml names none.
DEFAULT_LICENSE_FILES = ("LICEN[CS]E*", "COPYING*", "NOTICE*", "AUTHORS*")


def declared_license(project: dict[str, Any], folder: Path) -> tuple[str | None, list[Path]]:
    """A pyproject.toml's license: its SPDX expression (PEP 639's string, or the older table's
    `text`; None for the older table's `file`) and the license files its distribution ships."""
    table = project["project"]
    assert "license" in table, "the pyproject.toml declares no license"
    license = table["license"]
    if isinstance(license, dict) and "file" in license:
        return None, [folder / license["file"]]
    expression = str(license["text"] if isinstance(license, dict) else license)
    patterns = table.get("license-files", DEFAULT_LICENSE_FILES)
    return expression, sorted(path for pattern in patterns for path in folder.glob(pattern))


def test_the_sdk_distribution_declares_the_same_license() -> None:
    if not CLIENT_PROJECT.exists():  # the SDK ships inside the clock distribution: checked above
        assert "clock_client" in setup_cfg()["options"]["packages"].split()
        return
    project = tomllib.loads(CLIENT_PROJECT.read_text())
    expression, files = declared_license(project, CLIENT_PROJECT.parent)
    assert expression in ("MIT", None)
    assert files, f"{CLIENT_PROJECT}: its distribution ships no license file"
    for path in files:
        assert path.read_text() == LICENSE.read_text(), f"{path} differs from {LICENSE}"


def test_declared_license_reads_every_form(tmp_path: Path) -> None:
    (tmp_path / "LICENSE").write_text("MIT")
    (tmp_path / "COPYING.txt").write_text("MIT")
    assert declared_license({"project": {"license": "MIT"}}, tmp_path) == (
        "MIT", [tmp_path / "COPYING.txt", tmp_path / "LICENSE"]
    )  # fmt: skip
    assert declared_license(
        {"project": {"license": {"text": "MIT"}, "license-files": ["LICENSE"]}}, tmp_path
    ) == ("MIT", [tmp_path / "LICENSE"])
    assert declared_license({"project": {"license": {"file": "COPYING.txt"}}}, tmp_path) == (
        None, [tmp_path / "COPYING.txt"]
    )  # fmt: skip
    with pytest.raises(AssertionError, match="declares no license"):
        declared_license({"project": {}}, tmp_path)


def test_the_image_copies_the_license_it_installs_with() -> None:
    copies = [line.split()[1:-1] for line in (ROOT / "Dockerfile").read_text().splitlines()
              if line.startswith("COPY ")]  # fmt: skip
    assert "setup.cfg" in [name for sources in copies for name in sources]
    assert LICENSE.name in [name for sources in copies for name in sources]


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (
            "MIT License\n\nCopyright (c) 2026 someone else\n" + MIT_BODY,
            "the copyright holder is 'someone else', not 'the clock authors'",
        ),
        (
            "MIT License\n\nCopyright (c) 2026 the clock authors\n"
            + MIT_BODY.replace("free of charge", "for a fee"),
            "the text after the copyright line is not the MIT license's",
        ),
        (
            "Apache License\n\nCopyright (c) 2026 the clock authors\n" + MIT_BODY,
            "the first line is not 'MIT License'",
        ),
        ("MIT License\n\n" + MIT_BODY, "not exactly one 'Copyright (c) <year> <holder>' line"),
    ],
)
def test_the_check_finds_what_is_not_mit(text: str, problem: str) -> None:
    assert problem in mit_problems(text, HOLDER)
