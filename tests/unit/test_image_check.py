"""Whether a workload's image builds as the stack builds it (infra/image_check.py): git status on
the build's files in a repository of the test's own, the warnings `scripts/workload check` prints,
and those the stack program logs for its own builder."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra import workload_check
from infra.config import parse_stack_config
from infra.image_check import (
    LOCAL_BASE_IMAGE,
    GitChange,
    GitUnavailable,
    build_paths,
    build_warnings,
    git_status,
    stack_build_warnings,
)
from infra.workload.load import load_workload
from infra.workload.model import Workload

CONTAINERFILE = """\
ARG BASE_IMAGE=docker.io/library/python:3.11-slim
FROM ${BASE_IMAGE}
COPY workloads/mine/ /opt/mine/
COPY tools/run.sh /usr/local/bin/run
"""


def git(repo: Path, *argv: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.email=t@example.org", "-c", "user.name=t", *argv],
                          check=True, capture_output=True, text=True).stdout


def definition() -> dict[str, Any]:
    step = {"nodes": 1, "gpus_per_node": 0, "cpus_per_task": 1, "memory": "64Mi", "walltime": "00:01:00"}
    return {
        "version": 1, "name": "mine", "source": {"folder": "."},
        "build": {"containerfile": "workloads/mine/Containerfile", "entrypoint": "tools/run.sh"},
        "steps": [{"name": "make", "command": ["sh", "make.sh"], "resources": step}],
        "logs": {"root": "logs"}, "telemetry": {"root": "telemetry"},
    }


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A repository standing in for Atlas's, everything committed: a workload with an image of its
    own, and a file its build does not read."""
    root = tmp_path / "atlas"
    files = {
        "workloads/mine/workload.yaml": yaml.safe_dump(definition()),
        "workloads/mine/Containerfile": CONTAINERFILE,
        "workloads/mine/make.sh": "true\n",
        "tools/run.sh": "exec \"$@\"\n",
        "README.md": "not in the image\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "all")
    return root


def mine(repo: Path) -> Workload:
    return load_workload(repo / "workloads/mine/workload.yaml", repo)


# --- git status, through one function ----------------------------------------------------------


def test_git_status_lists_what_is_not_committed_under_the_paths(repo: Path) -> None:
    assert git_status(repo, ["."]) == ()
    (repo / "workloads/mine/make.sh").write_text("false\n")  # modified
    (repo / "tools/run.sh").write_text("changed\n")
    git(repo, "add", "tools/run.sh")  # staged, not committed
    (repo / "workloads/mine/new/deep").mkdir(parents=True)
    (repo / "workloads/mine/new/deep/a.py").write_text("")  # untracked, in an untracked folder
    (repo / "README.md").unlink()  # deleted
    assert git_status(repo, ["."]) == (
        GitChange(" D", "README.md"),
        GitChange("M ", "tools/run.sh"),
        GitChange(" M", "workloads/mine/make.sh"),
        GitChange("??", "workloads/mine/new/deep/a.py"),
    )
    assert [c.what for c in git_status(repo, ["."])] == [
        "deleted, not committed", "staged, not committed", "modified, not committed", "untracked"]
    # only under the paths asked about (Git pathspecs: folders and globs)
    assert git_status(repo, ["workloads/mine/make.sh", "tools"]) == (
        GitChange("M ", "tools/run.sh"), GitChange(" M", "workloads/mine/make.sh"))
    assert [c.path for c in git_status(repo, ["workloads/*.py"])] == ["workloads/mine/new/deep/a.py"]


def test_git_status_paths_are_relative_to_the_folder_asked_about(repo: Path) -> None:
    # Atlas inside a larger repository: paths are the folder's own, as build.context names them
    (repo / "workloads/mine/make.sh").write_text("false\n")
    git(repo, "mv", "tools/run.sh", "tools/start.sh")  # a rename: one entry, under its new name
    assert git_status(repo / "workloads", ["mine"]) == (GitChange(" M", "mine/make.sh"),)
    assert git_status(repo, ["tools"]) == (GitChange("R ", "tools/start.sh"),)


def test_git_status_outside_a_repository_says_so(tmp_path: Path) -> None:
    with pytest.raises(GitUnavailable, match=rf"^{tmp_path} is not in a Git repository \(fatal: not a git"):
        git_status(tmp_path, ["."])


# --- what the build reads ----------------------------------------------------------------------


def test_build_paths_are_the_containerfile_and_what_copy_reads(repo: Path) -> None:
    workload = mine(repo)
    assert build_paths(workload, ["workloads/mine/", "tools/run.sh"]) == [
        "tools/run.sh", "workloads/mine", "workloads/mine/Containerfile"]
    # `.` or a variable: the whole context
    assert build_paths(workload, ["tools/run.sh", "."]) == ["workloads/mine/Containerfile", "."]
    assert build_paths(workload, ["${SRC}/x"]) == ["workloads/mine/Containerfile", "."]


# --- the warnings -----------------------------------------------------------------------------


def test_a_committed_build_through_base_image_has_no_warning(repo: Path) -> None:
    assert build_warnings(mine(repo), repo) == []
    (repo / "README.md").write_text("edited\n")  # not read by the build: no warning
    (repo / "notes.txt").write_text("untracked, not read\n")
    assert build_warnings(mine(repo), repo) == []


def test_files_the_build_reads_that_are_not_committed_are_named_with_the_fix(repo: Path) -> None:
    (repo / "workloads/mine/Containerfile").write_text(CONTAINERFILE + "RUN true\n")
    (repo / "workloads/mine/helper.py").write_text("")
    (repo / "tools/run.sh").unlink()
    assert build_warnings(mine(repo), repo) == [
        "workloads/mine/Containerfile:4: copies tools/run.sh, which is not in the build context (.); copy a path "
        "relative to build.context (Atlas's repository root unless workload.yaml says)",
        "tools/run.sh: deleted, not committed, so the image will still have it: the BuildConfig builds "
        "image.build.git_uri at image.build.git_ref as committed; commit the deletion (git rm tools/run.sh; "
        "git commit) (and push it where image.build.git_uri is a remote) before `pulumi up`",
        "workloads/mine/Containerfile: modified, not committed, so the image will not have it: the BuildConfig "
        "builds image.build.git_uri at image.build.git_ref as committed; commit it (git add "
        "workloads/mine/Containerfile; git commit) (and push it where image.build.git_uri is a remote) before "
        "`pulumi up`",
        "workloads/mine/helper.py: untracked, so the image will not have it: the BuildConfig builds "
        "image.build.git_uri at image.build.git_ref as committed; commit it (git add workloads/mine/helper.py; "
        "git commit) (and push it where image.build.git_uri is a remote) before `pulumi up`",
    ]


def test_a_fixed_from_is_warned_with_its_line(repo: Path) -> None:
    (repo / "workloads/mine/Containerfile").write_text("FROM python:3.11-slim\nCOPY tools/run.sh /run\n")
    git(repo, "commit", "-q", "-am", "fixed")
    warnings = build_warnings(mine(repo), repo)
    assert [w.split(": ", 1)[0] for w in warnings] == ["workloads/mine/Containerfile:1"] * 2
    assert "no `ARG BASE_IMAGE` before the first FROM" in warnings[0]
    assert "FROM python:3.11-slim is a fixed image" in warnings[1]


def test_a_containerfile_that_cannot_be_read_or_parsed(repo: Path) -> None:
    (repo / "workloads/mine/Containerfile").unlink()
    assert build_warnings(mine(repo), repo) == [
        "workloads/mine/Containerfile: cannot be read (No such file or directory); check build.containerfile in "
        "workload.yaml (relative to Atlas's repository)"]
    (repo / "workloads/mine/Containerfile").write_text("FROM\n")
    assert build_warnings(mine(repo), repo) == [
        "workloads/mine/Containerfile: line 1: FROM names no image; write `FROM ${BASE_IMAGE}`"]


def test_outside_git_the_build_cannot_be_checked_and_says_so(repo: Path, tmp_path: Path) -> None:
    bare = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(repo), str(bare)], check=True)
    subprocess.run(["rm", "-rf", str(bare / ".git")], check=True)
    (warning,) = build_warnings(load_workload(bare / "workloads/mine/workload.yaml", bare), bare)
    assert warning.startswith(f"workloads/mine/Containerfile: the build's files cannot be checked against Git: "
                              f"{bare} is not in a Git repository")
    assert warning.endswith("keep Atlas in a Git repository and commit what the build reads")


# --- the stack's own build --------------------------------------------------------------------


def stack(repo: Path, image: dict[str, Any], enabled: bool = True) -> Any:
    (repo / "Pulumi.yaml").touch()
    openshift = {"flavour": "kubernetes", "namespace": "atlas-local", "enabled": enabled, "image": image}
    return parse_stack_config("local", {"workload": "workloads/mine", "openshift": openshift}, repo)


LOCAL_BUILD = {"build": {"builder": "atlas-local", "git_uri": "git://127.0.0.1:16418/atlas", "git_ref": "HEAD",
                         "base_image": f"127.0.0.1:16510/{LOCAL_BASE_IMAGE}"}}


def test_the_stack_warns_for_its_own_builder_and_base_image(repo: Path) -> None:
    (repo / "workloads/mine/Containerfile").write_text(CONTAINERFILE + "FROM docker.io/library/debian:12\n")
    warnings = stack_build_warnings(stack(repo, LOCAL_BUILD), mine(repo), repo)
    assert warnings == [
        "workloads/mine/Containerfile:5: FROM docker.io/library/debian:12 is a fixed image the local environment "
        "cannot pull (no registry outside this machine is reachable; its registry serves "
        "atlas/debian-python:bookworm); write `FROM ${BASE_IMAGE}` (with `ARG BASE_IMAGE=<default image>` above "
        "the first FROM) and set the image in the stack's image.build.base_image",
        # the local builder fetches HEAD of the served checkout: committed is enough, no push
        "workloads/mine/Containerfile: modified, not committed, so the image will not have it: the BuildConfig "
        "builds git://127.0.0.1:16418/atlas at HEAD as committed; commit it (git add workloads/mine/Containerfile; "
        "git commit) before `pulumi up`",
    ]
    public = {"build": {**LOCAL_BUILD["build"], "base_image": "docker.io/library/python:3.11-slim"}}
    assert any("image.build.base_image docker.io/library/python:3.11-slim is not an image the local" in w
               for w in stack_build_warnings(stack(repo, public), mine(repo), repo))


def test_a_stack_that_pulls_its_image_or_has_no_kubernetes_side_builds_nothing(repo: Path) -> None:
    (repo / "workloads/mine/Containerfile").write_text("FROM python:3.11-slim\n")
    assert stack_build_warnings(stack(repo, {"reference": "quay.io/me/mine:1"}), mine(repo), repo) == []
    hpc_only = parse_stack_config("local", {"workload": "workloads/mine", "hpc": {"site": {
        "scheduler": "slurm", "host": "login.example.org", "user": "me"}}, "openshift": {
        "namespace": "x", "enabled": False}}, repo)
    assert stack_build_warnings(hpc_only, mine(repo), repo) == []


# --- scripts/workload check ------------------------------------------------------------------


def test_workload_check_prints_the_warnings_on_stderr_and_exits_0(
    repo: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(workload_check, "REPO_ROOT", repo)
    assert workload_check.main(["check", str(repo / "workloads/mine"), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "image: the workload's own image, from workloads/mine/Containerfile (build context . of" in out
    assert "image: builds as it is" in out
    (repo / "workloads/mine/Containerfile").write_text("FROM python:3.11-slim\n")
    assert workload_check.main(["check", str(repo / "workloads/mine"), "--quiet"]) == 0
    captured = capsys.readouterr()
    assert "image: 3 warnings (on stderr): the build may fail or leave files out" in captured.out
    lines = captured.err.splitlines()
    assert [line.split(": ", 3)[2] for line in lines] == ["workloads/mine/Containerfile:1"] * 2 + [
        "workloads/mine/Containerfile"]
    assert all(line.startswith("workload check: warning: ") for line in lines)


def test_the_stack_in_a_copy_outside_git_warns_of_base_images_only(repo: Path, tmp_path: Path) -> None:
    # A project copied beside the repository the build fetches (as the end-to-end tests run it):
    # its files are not what is built, so only the Containerfile's base images are judged.
    bare = tmp_path / "copy"
    subprocess.run(["cp", "-r", str(repo), str(bare)], check=True)
    subprocess.run(["rm", "-rf", str(bare / ".git"), str(bare / "tools")], check=True)
    workload = load_workload(bare / "workloads/mine/workload.yaml", bare)
    assert stack_build_warnings(stack(bare, LOCAL_BUILD), workload, bare) == []
    (bare / "workloads/mine/Containerfile").write_text("FROM python:3.11-slim\n")
    assert [w.split(": ", 1)[0] for w in stack_build_warnings(stack(bare, LOCAL_BUILD), workload, bare)] == [
        "workloads/mine/Containerfile:1"] * 2
