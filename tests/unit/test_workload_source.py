"""infra/workload_source.py against real git repositories made in a temporary folder.

The materialiser is what the container build, the HPC staging and the device run use, so it is
tested end to end with git itself: a clone, a bundle, a commit that is not there, a patch that
does not apply. BigGAN's own code is never needed: a small repository stands in for it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from infra.workload.argparse_flags import UnknownParserError, parser_flags
from infra.workload_source import (
    MARKER,
    SourceError,
    check_local,
    classify_local,
    create_bundle,
    materialize,
    materialize_cached,
    staged_paths,
)

REPO = Path(__file__).resolve().parents[2]


def git(cwd: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.org",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.org",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "PATH": "/usr/bin:/bin:/usr/local/bin",
    }
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def upstream(tmp_path: Path) -> tuple[Path, str, Path]:
    """A repository with two commits on `satori`; returns (clone, the first commit, a patch for it)."""
    repo = tmp_path / "upstream"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "satori")
    (repo / "main.py").write_text("def f():\n    return 1\n")
    (repo / "LICENSE").write_text("MIT\n")
    (repo / "notes.txt").write_text("not staged\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "first")
    pinned = git(repo, "rev-parse", "HEAD")
    (repo / "main.py").write_text("def f():\n    return 2\n")
    git(repo, "commit", "-qam", "second")
    patch = tmp_path / "fix.patch"
    patch.write_text(
        "Reason 1: return the answer.\n\n"
        "diff --git a/main.py b/main.py\n--- a/main.py\n+++ b/main.py\n"
        "@@ -1,2 +1,2 @@\n def f():\n-    return 1\n+    return 42\n"
    )
    return repo, pinned, patch


def test_materialize_from_a_clone_applies_the_patch_and_records_the_tree(
    upstream: tuple[Path, str, Path], tmp_path: Path
) -> None:
    clone, commit, patch = upstream
    made = materialize("https://example.org/up", commit, tmp_path / "tree", patch, local=clone)
    assert (made.dest / "main.py").read_text() == "def f():\n    return 42\n"
    assert not (made.dest / ".git").exists()
    record = json.loads((made.dest / MARKER).read_text())
    assert record["commit"] == commit and record["origin"] == "local clone upstream"
    assert record["patch"] == "fix.patch" and len(record["patch_sha256"]) == 64


def test_materialize_from_a_bundle_equals_the_clone(upstream: tuple[Path, str, Path], tmp_path: Path) -> None:
    clone, commit, patch = upstream
    bundle = create_bundle(clone, commit, tmp_path / "carry" / "up.bundle")
    assert classify_local(bundle).kind == "bundle"
    a = materialize("https://example.org/up", commit, tmp_path / "a", patch, local=clone)
    b = materialize("https://example.org/up", commit, tmp_path / "b", patch, local=bundle)
    assert (a.dest / "main.py").read_text() == (b.dest / "main.py").read_text()
    assert b.record["origin"] == "local bundle up.bundle"


def test_materialize_from_the_repository_url(upstream: tuple[Path, str, Path], tmp_path: Path) -> None:
    clone, commit, _ = upstream
    made = materialize(clone.as_uri(), commit, tmp_path / "tree", keep_git=True)
    assert (made.dest / "main.py").read_text() == "def f():\n    return 1\n"
    assert git(made.dest, "rev-parse", "HEAD") == commit
    assert "patch" not in made.record


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda tmp: tmp / "nowhere", "does not exist"),
        (lambda tmp: _write(tmp / "plain.txt", "hello"), "not a git bundle"),
        (lambda tmp: _mkdir(tmp / "folder"), "not a git clone"),
    ],
)
def test_a_local_source_that_is_not_one_is_named_with_the_key(tmp_path: Path, make: object, message: str) -> None:
    path = make(tmp_path)  # type: ignore[operator]
    with pytest.raises(SourceError) as error:
        classify_local(path)
    assert str(error.value).startswith("atlas:workloadSource: ") and message in str(error.value)


def test_a_clone_or_bundle_without_the_pinned_commit_is_refused(
    upstream: tuple[Path, str, Path], tmp_path: Path
) -> None:
    clone, _, _ = upstream
    missing = "0123456789abcdef0123456789abcdef01234567"
    with pytest.raises(SourceError, match="does not contain commit 0123456789abcdef"):
        check_local(clone, missing)
    bundle = create_bundle(clone, git(clone, "rev-parse", "HEAD"), tmp_path / "b.bundle")
    with pytest.raises(SourceError, match="does not contain commit"):
        check_local(bundle, missing)
    with pytest.raises(SourceError, match="does not contain commit"):
        materialize("https://example.org/up", missing, tmp_path / "tree", local=bundle)


def test_a_patch_that_does_not_apply_names_the_commit(upstream: tuple[Path, str, Path], tmp_path: Path) -> None:
    clone, _, patch = upstream
    second = git(clone, "rev-parse", "HEAD")  # the patch was written against the first commit
    with pytest.raises(SourceError, match=f"does not apply to {second}"):
        materialize("https://example.org/up", second, tmp_path / "tree", patch, local=clone)


def test_materialize_refuses_a_folder_that_is_not_empty(upstream: tuple[Path, str, Path], tmp_path: Path) -> None:
    clone, commit, _ = upstream
    _write(tmp_path / "tree" / "old.py", "x = 1\n")
    with pytest.raises(SourceError, match="not empty"):
        materialize("https://example.org/up", commit, tmp_path / "tree", local=clone)


def test_the_cache_builds_once_per_commit_and_patch(upstream: tuple[Path, str, Path], tmp_path: Path) -> None:
    clone, commit, patch = upstream
    first = materialize_cached("biggan", "https://example.org/up", commit, tmp_path / "cache", patch, clone)
    (first.dest / "main.py").write_text("touched\n")  # a second call must reuse, not rebuild
    again = materialize_cached("biggan", "https://example.org/up", commit, tmp_path / "cache", patch, clone)
    assert again.dest == first.dest and (again.dest / "main.py").read_text() == "touched\n"
    unpatched = materialize_cached("biggan", "https://example.org/up", commit, tmp_path / "cache", None, clone)
    assert unpatched.dest != first.dest
    assert [p.as_posix() for p in staged_paths(first.dest)] == [MARKER, "LICENSE", "main.py"]


@pytest.mark.parametrize(
    ("sources", "script", "flags", "files"),
    [
        (  # the script's own prepare_parser (make_hdf5.py's shape)
            {"s.py": "def prepare_parser():\n    p = ArgumentParser()\n    p.add_argument('--a', type=int)\n"
             "    p.add_argument('-b', '--bee', action='store_true')\n    return p\n"
             "def main():\n    parser = prepare_parser()\n"},
            "s.py", {"--a", "-b", "--bee"}, ["s.py"],
        ),
        (  # a module's prepare_parser (main.py -> cfg.py); cfg's other parser functions are not used
            {"main.py": "import cfg\ndef main():\n    parser = cfg.prepare_parser()\n",
             "cfg.py": "def prepare_parser():\n    p = ArgumentParser()\n    p.add_argument('--world-size')\n"
             "    return p\n"
             "def add_sample_parser(p):\n    p.add_argument('--sample_npz')\n"},
            "main.py", {"--world-size"}, ["cfg.py"],
        ),
        (  # and an add_*_parser the script does call (sample.py's shape)
            {"sample.py": "import cfg\nparser = cfg.prepare_parser()\nparser = cfg.add_sample_parser(parser)\n",
             "cfg.py": "def prepare_parser():\n    p = ArgumentParser()\n    p.add_argument('--seed')\n    return p\n"
             "def add_sample_parser(p):\n    p.add_argument('--sample_npz')\n"},
            "sample.py", {"--seed", "--sample_npz"}, ["cfg.py"],
        ),
    ],
)  # fmt: skip
def test_parser_flags_reads_the_parser_a_script_builds(
    sources: dict[str, str], script: str, flags: set[str], files: list[str]
) -> None:
    assert parser_flags(sources, script) == (flags, files)


def test_parser_flags_refuses_a_script_without_a_known_parser() -> None:
    with pytest.raises(UnknownParserError, match="no prepare_parser"):
        parser_flags({"x.py": "import argparse\np = argparse.ArgumentParser()\n"}, "x.py")


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True)
    return path
