"""The README and docs/ a newcomer reads: the README stays short (issue 31: about 12 KB, its first
screen saying who Atlas is for and the way to one's own site), and every relative link in README.md
and docs/*.md leads to a file that exists and, where it names one, to a heading of that file."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCUMENTS = sorted([README, *(ROOT / "docs").glob("*.md")])
README_MAX_BYTES = 12_500
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def prose(text: str) -> str:
    """The text without fenced code blocks and code spans, where a `[x](y)` is no link."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """A heading's anchor as GitHub renders it: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").lower()
    kept = "".join(c for c in text if c in " -_" or unicodedata.category(c)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a Markdown file offers: its headings' slugs (a repeated one with -1, -2, ...)."""
    seen: dict[str, int] = {}
    found = set()
    for heading in HEADING.findall(FENCE.sub("", path.read_text())):
        base = slug(heading)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def test_slugs_are_githubs() -> None:
    assert slug("Before the first up: `atlas doctor`") == "before-the-first-up-atlas-doctor"
    # GitHub drops a '/' without a hyphen in its place.
    assert slug("How `scripts/compare`, `monitor` and `nodes` read a stack") == (
        "how-scriptscompare-monitor-and-nodes-read-a-stack"
    )
    assert slug("The toolchain, and what it cost to build here") == "the-toolchain-and-what-it-cost-to-build-here"


def test_the_readme_is_short() -> None:
    size = len(README.read_bytes())
    assert size <= README_MAX_BYTES, (
        f"README.md is {size:,} bytes, over {README_MAX_BYTES:,}: move the detail into docs/ and link to it"
    )


def test_the_readme_first_screen_leads_to_ones_own_site() -> None:
    first_screen = "\n".join(README.read_text().splitlines()[:40])
    assert "scripts/demo" in first_screen and "scripts/test" in first_screen
    assert "root" in first_screen and "Debian" in first_screen and "Go 1.26" in first_screen
    assert "[Run on your own clusters](docs/own-clusters.md)" in first_screen


def links(path: Path) -> list[str]:
    return [target for target in LINK.findall(prose(path.read_text())) if not re.match(r"^[a-z]+:", target)]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(document: Path) -> None:
    broken = []
    for target in links(document):
        file_part, _, anchor = target.partition("#")
        path = (document.parent / file_part).resolve() if file_part else document
        if not path.exists():
            broken.append(f"{target}: no file {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(f"{target}: no heading '#{anchor}' in {path.relative_to(ROOT)}")
    assert not broken, f"{document.relative_to(ROOT)} has links that lead nowhere:\n" + "\n".join(broken)


def test_the_link_check_finds_a_broken_link_and_a_missing_heading(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## A `code` heading\n\n[ok](#a-code-heading) [gone](missing.md) [bad](#nowhere)\n"
                    "`[not a link](nowhere.md)`\n```\n[nor this](nowhere.md)\n```\n")
    assert links(page) == ["#a-code-heading", "missing.md", "#nowhere"]
    assert anchors(page) == {"title", "a-code-heading"}
