"""Every relative link in the project's markdown points to a file that exists, and a link
with a fragment to a heading of that file: a page moved or a section renamed fails here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^\s*(```|~~~)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")
_EXTERNAL = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def markdown_files() -> list[Path]:
    """The project's own pages: those at the top, under docs/ and under deploy/."""
    files = sorted(ROOT.glob("*.md"))
    for folder in ("docs", "deploy"):
        files += sorted((ROOT / folder).rglob("*.md"))
    return files


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if _FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def links(text: str) -> list[str]:
    """The targets of the links outside code blocks; a link's text may span lines."""
    return [match[1] for match in _LINK.finditer("\n".join(prose_lines(text)))]


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces as -."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(text: str) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in prose_lines(text):
        if match := _HEADING.match(line):
            base = slug(match[1])
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in links(page.read_text()):
        if _EXTERNAL.match(target):
            continue
        path, _, fragment = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(linked.read_text()):
            broken.append(f"{target}: no such heading")
    return broken


def test_every_relative_link_points_to_a_file_and_heading_that_exist() -> None:
    pages = markdown_files()
    assert ROOT / "README.md" in pages and len(pages) > 10
    broken = {str(page.relative_to(ROOT)): found for page in pages if (found := broken_links(page))}
    assert broken == {}


def test_the_check_finds_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    (tmp_path / "there.md").write_text("# A page\n\n## Its `first` part: here\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n"
        "[fine](there.md#its-first-part-here), [self](#page), [web](https://example.com/x.md)\n"
        "[gone](missing.md), ![gone too](img/missing.png), [no\npart](there.md#second)\n"
        "```\n[in code](not-checked.md)\n```\n"
    )
    assert broken_links(page) == [
        "missing.md: no such file",
        "img/missing.png: no such file",
        "there.md#second: no such heading",
    ]
