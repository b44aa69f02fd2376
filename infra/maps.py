"""The folder map in docs/architecture.md, drawn from each module's own docstring.

`python -m infra.maps` prints it; `--write` replaces the block between the markers in
docs/architecture.md; `--check` exits 1 when that block is not what the code says
(tests/unit/test_maps.py runs the check). A module's line is the first paragraph of its
docstring, so the map changes where the code does, in the same commit.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
BEGIN = "<!-- folder map: drawn from the docstrings by `python -m infra.maps --write`; do not edit -->"
END = "<!-- end of folder map -->"


@dataclass(frozen=True)
class Entry:
    path: str  # from the repository's root; a package ends with "/"
    depth: int
    summary: str


def _summary(source: Path) -> str:
    doc = ast.get_docstring(ast.parse(source.read_text())) or ""
    first = doc.strip().split("\n\n")[0]
    # A package's docstring may list its files right under its first line: the map has them already.
    lead = []
    for line in first.splitlines():
        if line.lstrip().startswith("- "):
            break
        lead.append(line)
    return " ".join(" ".join(lead).split())


# The packages the map covers: the installed one, and the local environment beside it.
PACKAGES = ("infra", "localenv")


def all_entries() -> list[Entry]:
    """Every package of `PACKAGES`, each drawn by `entries`."""
    return [entry for name in PACKAGES for entry in entries(ROOT / name)]


def entries(package: Path = ROOT / "infra") -> list[Entry]:
    """The package, then its modules, then its subpackages (each the same way), by name."""
    found = [Entry(package.relative_to(ROOT).as_posix() + "/", _depth(package), _summary(package / "__init__.py"))]
    children = sorted(p for p in package.iterdir() if p.name != "__pycache__")
    for module in (p for p in children if p.suffix == ".py" and p.name != "__init__.py"):
        found.append(Entry(module.relative_to(ROOT).as_posix(), _depth(package) + 1, _summary(module)))
    for sub in (p for p in children if p.is_dir() and (p / "__init__.py").exists()):
        found.extend(entries(sub))
    return found


def _depth(package: Path) -> int:
    return len(package.relative_to(ROOT).parts) - 1


def render(found: list[Entry]) -> str:
    lines = []
    for entry in found:
        summary = entry.summary or "(no docstring: say what this is in its first line)"
        lines.append(f"{'  ' * entry.depth}- `{entry.path}`: {summary}")
    return "\n".join(lines)


def replace_block(document: str, block: str) -> str:
    try:
        head, rest = document.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
    except ValueError:
        raise SystemExit(f"{ARCHITECTURE}: the markers {BEGIN!r} and {END!r} are missing") from None
    return f"{head}{BEGIN}\n{block}\n{END}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.maps", description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite the block in docs/architecture.md")
    mode.add_argument("--check", action="store_true", help="exit 1 when the block is out of date")
    args = parser.parse_args(argv)
    block = render(all_entries())
    if not (args.write or args.check):
        print(block)
        return 0
    document = ARCHITECTURE.read_text()
    wanted = replace_block(document, block)
    if args.check:
        if wanted != document:
            print("docs/architecture.md's folder map is out of date: run `python -m infra.maps --write`")
            return 1
        return 0
    ARCHITECTURE.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
