"""A clone runs with nothing beside it: no code, script or configuration outside tests/ refers
to a path outside the repository (the team's ../shared folder least of all). The e2e test
tests/e2e/test_clone_alone.py runs the demo's path in a copy with nothing beside it."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from infra.toolchain.pins import REPO_ROOT

# How code climbs out of the repository: the root's parent, `..` past the root, the team's folder.
OUTSIDE = [
    (re.compile(r"\b(REPO_ROOT|REPO|ROOT|repo_root)\.parent\b"), "the repository root's parent"),
    (re.compile(r"\.parents\[\d+\]\.parent\b"), "a parent above a parents[] lookup"),
    (re.compile(r"\$\{?(repo|ATLAS_REPO|_atlas_repo)\}?/\.\."), "the repository root's parent"),
    (re.compile(r"dirname\s+\"?\$\{?(repo|ATLAS_REPO|_atlas_repo)\b"), "the repository root's parent"),
    (re.compile(r"(?<![\w.-])(\.\./)+shared\b|\bshared/(notes|reference|design|seed)\b"),
     "the team's shared folder, which users do not have"),
]
TEXT_SUFFIXES = {".py", ".sh", ".toml", ".yaml", ".yml", ".cfg", ".ini", ".json", ""}


def tracked_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=REPO_ROOT,
                         capture_output=True, text=True, check=True).stdout
    return [REPO_ROOT / line for line in out.splitlines() if line and not line.startswith("tests/")]


def escapes(relative: str, base: Path) -> bool:
    """Whether a `../`-path written in a file leaves the repository, read from the file's folder."""
    root = REPO_ROOT.resolve()
    target = (base / relative).resolve()
    return target != root and root not in target.parents


def problems_in(path: Path) -> list[str]:
    if path.suffix not in TEXT_SUFFIXES and path.name not in ("Containerfile", "Dockerfile"):
        return []
    if not path.is_file() or path.stat().st_size > 2_000_000:
        return []
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        return []
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        where = f"{path.relative_to(REPO_ROOT)}:{number}"
        for pattern, what in OUTSIDE:
            if pattern.search(line):
                found.append(f"{where}: {what}: {line.strip()}")
        for match in re.finditer(r"(?<![\w.$}/-])((?:\.\./)+[\w.-]+)", line):
            if escapes(match[1], path.parent):
                found.append(f"{where}: {match[1]} leaves the repository: {line.strip()}")
    return found


def test_nothing_outside_tests_refers_to_a_path_outside_the_repository():
    files = tracked_files()
    assert len(files) > 100  # the listing worked
    problems = [p for f in files for p in problems_in(f)]
    assert problems == []


@pytest.mark.parametrize("line", [
    'OPENAPI = REPO_ROOT.parent / "shared" / "reference" / "openshift-openapi.json"',
    "see ../shared/notes/schedulers.md",
    'cp "$repo/../shared/x" .',
    "data = open('../../../etc/passwd')",
    "the notes in shared/notes/workload.md",
])
def test_the_check_catches_each_way_out(tmp_path: Path, line: str, monkeypatch: pytest.MonkeyPatch):
    # The negative control: each line, written in a file of the repository, is reported.
    probe = REPO_ROOT / "infra" / f".atlas-stands-alone-probe-{tmp_path.name}.py"
    probe.write_text(line + "\n")
    try:
        assert problems_in(probe) != []
    finally:
        probe.unlink()


def test_paths_inside_the_repository_pass(tmp_path: Path):
    probe = REPO_ROOT / "localenv" / "lsf" / f".atlas-stands-alone-probe-{tmp_path.name}.py"
    probe.write_text('LSF = "../hpc/lsf.py"  # a sibling package\nmode = "shared"\n')
    try:
        assert problems_in(probe) == []
    finally:
        probe.unlink()
