"""A workload's source from another repository, at its pinned commit, with Atlas's patch applied.

One materialiser for every place that needs the code, so every environment runs the same
tree: the container build (workloads/biggan/Containerfile runs `python3 -m
infra.workload_source materialize`), the HPC staging (`materialize_cached`, whose files are
staged over SFTP) and the device run (bench/biggan_h200.py).

Where the code comes from:
- the repository URL the workload names (`source.repository`), when there is a network;
- a local clone or a git bundle (`git bundle create`), where there is none: named in a stack
  by `atlas:workloadSource`, or passed as `--from`. It is checked before anything is
  registered: it must exist, be a clone or a bundle, and contain the pinned commit.

Stdlib only (and the `git` command): the container build and the device machine run it
without Atlas's dependencies.

    python3 -m infra.workload_source materialize --repository URL --commit SHA [--from CLONE|BUNDLE] \
        [--patch FILE] --dest DIR [--keep-git]
    python3 -m infra.workload_source check --commit SHA --from CLONE|BUNDLE
    python3 -m infra.workload_source bundle --from CLONE --commit SHA --out FILE.bundle
    python3 -m infra.workload_source flags --from CLONE|BUNDLE --commit SHA --script main.py ...
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

MARKER = ".atlas-source.json"
BUNDLE_HEADER = re.compile(rb"^# v[23] git bundle\n")
COMMIT = re.compile(r"^[0-9a-f]{40}$")
CONFIG_KEY = "atlas:workloadSource"
# A URL fetch that hangs (no network, a proxy that drops packets) must fail, not stall preview.
GIT_TIMEOUT_S = 600
# What the HPC side stages of a materialised tree: the code that runs and its licence.
STAGED_SUFFIXES = (".py",)
STAGED_NAMES = ("LICENSE", MARKER)


class SourceError(ValueError):
    """The source cannot be had as configured; the message says where to look and the fix."""


@dataclass(frozen=True)
class LocalSource:
    """A local clone or bundle that holds the pinned commit."""

    path: Path
    kind: str  # "clone" or "bundle"


@dataclass(frozen=True)
class Materialized:
    """A patched tree: where it is and what it was made from (also in its MARKER file)."""

    dest: Path
    record: dict[str, str]


# ---------------------------------------------------------------------------------------------
# git, always without prompts and with a time limit


def _git(
    args: Sequence[str], cwd: Path | None = None, timeout: float = GIT_TIMEOUT_S
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true", "LC_ALL": "C"}
    try:
        return subprocess.run(
            ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
        )
    except FileNotFoundError:
        raise SourceError("the `git` command is not installed; install git (apt-get install git)") from None
    except subprocess.TimeoutExpired:
        raise SourceError(f"`git {' '.join(args)}` took longer than {timeout:g} s (no network?)") from None


def _last_line(result: subprocess.CompletedProcess[str]) -> str:
    text = (result.stderr or result.stdout).strip().splitlines()
    return text[-1] if text else f"exit status {result.returncode}"


# ---------------------------------------------------------------------------------------------
# a local clone or bundle


def is_bundle(path: Path) -> bool:
    """A git bundle starts with '# v2 git bundle' or '# v3 git bundle'."""
    try:
        with path.open("rb") as handle:
            return bool(BUNDLE_HEADER.match(handle.read(32)))
    except OSError:
        return False


def classify_local(path: Path, key: str = CONFIG_KEY) -> LocalSource:
    """What `path` is, without running anything: a bundle file or a git clone (bare or not)."""
    if not path.exists():
        raise SourceError(
            f"{key}: {path} does not exist; point it at a clone of the workload's repository or at a bundle "
            "(`python3 -m infra.workload_source bundle --from CLONE --commit SHA --out FILE.bundle`)"
        )
    if path.is_file():
        if not is_bundle(path):
            raise SourceError(f"{key}: {path} is a file but not a git bundle (no '# v2 git bundle' header)")
        return LocalSource(path, "bundle")
    if (path / ".git").exists() or ((path / "objects").is_dir() and (path / "HEAD").is_file()):
        return LocalSource(path, "clone")
    raise SourceError(f"{key}: {path} is a folder but not a git clone (no .git, not a bare repository)")


def check_local(path: Path, commit: str, key: str = CONFIG_KEY) -> LocalSource:
    """`classify_local`, then ask git whether the pinned commit is there."""
    local = classify_local(path, key)
    if local.kind == "bundle":
        heads = _git(["bundle", "list-heads", str(path.resolve())])
        if heads.returncode != 0:
            raise SourceError(f"{key}: {path}: git cannot read the bundle ({_last_line(heads)})")
        # A bundle is fetched into a scratch repository to find out whether a head reaches the commit.
        with tempfile.TemporaryDirectory(prefix="atlas-source-check-") as scratch:
            _fetch_all(Path(scratch), str(path.resolve()), key)
            found = _git(["cat-file", "-e", f"{commit}^{{commit}}"], cwd=Path(scratch)).returncode == 0
    else:
        found = _git(["cat-file", "-e", f"{commit}^{{commit}}"], cwd=path).returncode == 0
    if not found:
        raise SourceError(
            f"{key}: {path} does not contain commit {commit} (workload.yaml source.commit); fetch it there "
            "(`git fetch origin <branch>`) or make the bundle from a clone that has it"
        )
    return local


def _fetch_all(repo: Path, origin: str, key: str) -> None:
    if not (repo / ".git").exists() and not (repo / "HEAD").exists():
        init = _git(["init", "-q", str(repo)])
        if init.returncode != 0:
            raise SourceError(f"cannot create a git repository in {repo}: {_last_line(init)}")
    fetched = _git(["fetch", "-q", "--no-tags", origin, "+refs/*:refs/atlas-source/*"], cwd=repo)
    if fetched.returncode != 0:
        raise SourceError(f"{key}: cannot fetch from {origin}: {_last_line(fetched)}")


def create_bundle(clone: Path, commit: str, out: Path) -> Path:
    """A bundle of every ref of `clone` that contains `commit`: what a machine without network is given."""
    check_local(clone, commit, "--from")
    refs = _git(["for-each-ref", "--contains", commit, "--format=%(refname)"], cwd=clone)
    names = [r for r in refs.stdout.split() if r]
    if refs.returncode != 0 or not names:
        raise SourceError(f"--from: no branch or tag of {clone} contains {commit}; a bundle needs a ref")
    out.parent.mkdir(parents=True, exist_ok=True)
    made = _git(["bundle", "create", str(out.resolve()), names[0]], cwd=clone)
    if made.returncode != 0:
        raise SourceError(f"git bundle create failed: {_last_line(made)}")
    return out


# ---------------------------------------------------------------------------------------------
# materialising


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def source_record(repository: str, commit: str, origin: str, patch: Path | None) -> dict[str, str]:
    """What the MARKER file says: enough to tell two trees apart, and nothing that changes per run."""
    record = {"repository": repository, "commit": commit, "origin": origin}
    if patch is not None:
        record["patch"] = patch.name
        record["patch_sha256"] = sha256_file(patch)
    return record


def materialize(
    repository: str,
    commit: str,
    dest: Path,
    patch: Path | None = None,
    local: Path | None = None,
    keep_git: bool = False,
    key: str = CONFIG_KEY,
) -> Materialized:
    """Check out `commit` into the new folder `dest` (from `local` if given, else `repository`) and
    apply `patch`. The result holds MARKER; `.git` is removed unless `keep_git`."""
    if not COMMIT.match(commit):
        raise SourceError(f"commit {commit!r} is not a full 40-hex-digit commit id")
    if patch is not None and not patch.is_file():
        raise SourceError(f"source.patch: {patch} is not a file (paths are relative to the Atlas repository)")
    if dest.exists() and any(dest.iterdir()):
        raise SourceError(f"{dest} exists and is not empty; materialise into a new folder")
    origin = repository
    described = repository
    if local is not None:
        found = classify_local(local, key)
        origin = str(found.path.resolve())
        # The file's name, not its path: the record is staged, and must not change from machine to machine.
        described = f"local {found.kind} {found.path.resolve().name}"
    dest.mkdir(parents=True, exist_ok=True)
    init = _git(["init", "-q", "."], cwd=dest)
    if init.returncode != 0:
        raise SourceError(f"cannot create a git repository in {dest}: {_last_line(init)}")
    if local is not None:
        _fetch_all(dest, origin, key)
    else:
        # A commit id: most hosts serve it directly; otherwise every branch, then look for it.
        shallow = _git(["fetch", "-q", "--no-tags", "--depth", "1", origin, commit], cwd=dest)
        if shallow.returncode != 0:
            _fetch_all(dest, origin, "source.repository")
    if _git(["cat-file", "-e", f"{commit}^{{commit}}"], cwd=dest).returncode != 0:
        where = key if local is not None else "source.repository"
        raise SourceError(f"{where}: {origin} does not contain commit {commit} (workload.yaml source.commit)")
    checkout = _git(["-c", "advice.detachedHead=false", "checkout", "-q", "--detach", commit], cwd=dest)
    head = _git(["rev-parse", "HEAD"], cwd=dest).stdout.strip()
    if checkout.returncode != 0 or head != commit:
        raise SourceError(f"checkout of {commit} in {dest} failed: {_last_line(checkout)}")
    if patch is not None:
        checked = _git(["apply", "--check", str(patch.resolve())], cwd=dest)
        if checked.returncode != 0:
            raise SourceError(
                f"source.patch: {patch} does not apply to {commit}: {_last_line(checked)}; "
                "regenerate it against this commit"
            )
        _git(["apply", str(patch.resolve())], cwd=dest)
    record = source_record(repository, commit, described, patch)
    (dest / MARKER).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
    if not keep_git:
        shutil.rmtree(dest / ".git")
    return Materialized(dest, record)


def cache_folder(cache_root: Path, name: str, commit: str, patch: Path | None) -> Path:
    """One folder per (commit, patch content): a changed patch is a new tree."""
    suffix = sha256_file(patch)[:12] if patch is not None else "unpatched"
    return cache_root / f"{name}-{commit[:12]}-{suffix}"


def materialize_cached(
    name: str, repository: str, commit: str, cache_root: Path, patch: Path | None = None, local: Path | None = None
) -> Materialized:
    """`materialize` once per (commit, patch) under `cache_root`; later calls reuse the tree.

    Built in a scratch folder and renamed into place, so an interrupted run leaves no half tree."""
    folder = cache_folder(cache_root, name, commit, patch)
    marker = folder / MARKER
    if marker.is_file():
        record = json.loads(marker.read_text())
        if record.get("commit") == commit:
            return Materialized(folder, record)
    cache_root.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{folder.name}-", dir=cache_root))
    try:
        made = materialize(repository, commit, scratch / "tree", patch, local)
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(made.dest, folder)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return Materialized(folder, made.record)


def staged_paths(tree: Path) -> list[Path]:
    """The files of a materialised tree that the HPC side stages, relative, sorted."""
    result = []
    for path in sorted(tree.rglob("*")):
        if path.is_file() and (path.suffix in STAGED_SUFFIXES or path.name in STAGED_NAMES):
            result.append(path.relative_to(tree))
    return result


# ---------------------------------------------------------------------------------------------
# a pinned commit's files, read without checking it out


def read_tree_files(local: Path, commit: str, names: Iterable[str]) -> dict[str, str]:
    """Files of `commit` from a clone or bundle, by name (a bundle is fetched into a scratch repo)."""
    found = classify_local(local, "--from")
    with tempfile.TemporaryDirectory(prefix="atlas-source-read-") as scratch:
        repo = found.path
        if found.kind == "bundle":
            repo = Path(scratch)
            _fetch_all(repo, str(found.path.resolve()), "--from")
        listing = _git(["ls-tree", "--name-only", commit], cwd=repo)
        if listing.returncode != 0:
            raise SourceError(f"--from: {local} does not contain {commit}: {_last_line(listing)}")
        present = set(listing.stdout.split())
        wanted = set(names) | {n for n in present if n.endswith(".py")}
        return {n: _git(["show", f"{commit}:{n}"], cwd=repo).stdout for n in sorted(wanted & present)}


# ---------------------------------------------------------------------------------------------
# command line


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m infra.workload_source", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    make = sub.add_parser("materialize", help="check out the pinned commit into a new folder and apply the patch")
    make.add_argument("--repository", required=True)
    make.add_argument("--commit", required=True)
    make.add_argument("--from", dest="local", type=Path, help="a local clone or bundle instead of the repository")
    make.add_argument("--patch", type=Path)
    make.add_argument("--dest", type=Path, required=True)
    make.add_argument("--keep-git", action="store_true")
    check = sub.add_parser("check", help="is the pinned commit in this clone or bundle?")
    check.add_argument("--commit", required=True)
    check.add_argument("--from", dest="local", type=Path, required=True)
    bundle = sub.add_parser("bundle", help="write a bundle of a clone's refs that hold the commit")
    bundle.add_argument("--from", dest="local", type=Path, required=True)
    bundle.add_argument("--commit", required=True)
    bundle.add_argument("--out", type=Path, required=True)
    flags = sub.add_parser("flags", help="print, as JSON, the options each script's argument parser defines")
    flags.add_argument("--from", dest="local", type=Path, required=True)
    flags.add_argument("--commit", required=True)
    flags.add_argument("--repository", default="")
    flags.add_argument("--script", action="append", required=True)
    args = parser.parse_args(argv)
    try:
        if args.command == "materialize":
            made = materialize(args.repository, args.commit, args.dest, args.patch, args.local, args.keep_git, "--from")
            print(json.dumps({"dest": str(made.dest), **made.record}), flush=True)
        elif args.command == "check":
            found = check_local(args.local, args.commit, "--from")
            print(f"{found.path}: a {found.kind} holding {args.commit}")
        elif args.command == "bundle":
            print(create_bundle(args.local, args.commit, args.out))
        else:
            # Imported here: the container build copies this file alone and never asks for flags.
            from infra.workload.argparse_flags import UnknownParserError, parser_flags

            texts = read_tree_files(args.local, args.commit, args.script)
            scripts = {}
            for script in args.script:
                try:
                    options, files = parser_flags(texts, script)
                except UnknownParserError as error:
                    raise SourceError(str(error)) from None
                scripts[script] = {"parser_files": files, "flags": sorted(options)}
            document = {
                "repository": args.repository,
                "commit": args.commit,
                "generated_by": "python3 -m infra.workload_source flags --from CLONE_OR_BUNDLE "
                f"--commit {args.commit} --repository {args.repository} "
                + " ".join(f"--script {s}" for s in args.script),
                "scripts": scripts,
            }
            print(json.dumps(document, indent=2))
    except SourceError as error:
        print(f"workload_source: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
