"""The maps a newcomer reads first stay true to the code: `docs/architecture.md`'s folder list and
each package's `__init__.py` docstring name only files that exist, and the folder list names
every module and package of `infra/` and `localenv/`."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from infra import maps

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (ROOT / "infra", ROOT / "localenv")
ARCHITECTURE = ROOT / "docs" / "architecture.md"
TOP_LEVEL = (
    "infra/", "localenv/", "examples/", "stacks/", "workloads/", "scripts/", "tests/", "bench/", "docs/", "toolchain/",
)
# A backticked path, optionally with a glob or placeholder part (`Pulumi.<stack>.yaml`).
BACKTICKED = re.compile(r"`([\w./<>*-]+)`")
PY_NAME = re.compile(r"\b([\w/]+\.py)\b")


def _folders_section() -> str:
    text = ARCHITECTURE.read_text()
    start = text.index("\n## Folders")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def _concrete(path: str) -> bool:
    return not any(ch in path for ch in "<>*")


def test_every_path_the_architecture_names_exists() -> None:
    named = [p for p in BACKTICKED.findall(ARCHITECTURE.read_text()) if p.startswith(TOP_LEVEL)]
    assert named, "docs/architecture.md names no paths: the pattern no longer matches its style"
    missing = sorted({p for p in named if _concrete(p) and not (ROOT / p.rstrip("/")).exists()})
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_the_folder_map_is_drawn_from_the_code_as_it_is() -> None:
    document = ARCHITECTURE.read_text()
    assert maps.BEGIN in _folders_section(), "the folder map belongs in `## Folders`"
    assert maps.replace_block(document, maps.render(maps.all_entries())) == document, (
        "docs/architecture.md's folder map is out of date: run `python -m infra.maps --write`"
    )


def test_the_folder_map_names_every_module_with_what_it_is() -> None:
    found = maps.all_entries()
    modules = {
        p.relative_to(ROOT).as_posix()
        for package in PACKAGES
        for p in package.rglob("*.py")
        if "__pycache__" not in p.parts and p.name != "__init__.py"
    }
    assert modules <= {entry.path for entry in found}
    undocumented = [entry.path for entry in found if not entry.summary]
    assert not undocumented, f"these modules have no docstring to draw their line from: {undocumented}"


def test_the_map_check_fails_on_a_stale_block(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    stale = tmp_path / "architecture.md"
    stale.write_text(f"## Folders\n{maps.BEGIN}\n- `infra/`: gone\n{maps.END}\n## Next\n")
    monkeypatch.setattr(maps, "ARCHITECTURE", stale)
    assert maps.main(["--check"]) == 1
    assert maps.main(["--write"]) == 0
    assert maps.main(["--check"]) == 0
    assert "`infra/hpc/`" in stale.read_text()
    assert "`localenv/lsf/`" in stale.read_text()


@pytest.mark.parametrize(
    "init",
    sorted(
        p.relative_to(ROOT).as_posix()
        for package in PACKAGES
        for p in package.rglob("__init__.py")
        if "__pycache__" not in p.parts
    ),
)
def test_a_package_docstring_names_only_its_own_files(init: str) -> None:
    path = ROOT / init
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    # A name with a folder is from the repository's root (`localenv/crds.py`), a bare one
    # is the package's own file.
    missing = [
        name
        for name in PY_NAME.findall(doc)
        if not ((ROOT / name) if name.startswith(TOP_LEVEL) else (path.parent / name)).exists()
    ]
    assert not missing, f"{init}'s docstring names files that do not exist here: {missing}"
