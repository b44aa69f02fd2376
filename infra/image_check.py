"""Whether a workload's image can be built as the stack builds it: its Containerfile's base images,
and the build's files not committed to Git.

A BuildConfig (OpenShift's, or the local environment's stand-in) builds `image.build.git_uri` at
`image.build.git_ref`: the repository as committed (and, for a remote, as pushed), never the
working tree. The local environment's registry serves only the base image Atlas made for it
(`LOCAL_BASE_IMAGE`), and the stack's `image.build.base_image` reaches the build only as the
`BASE_IMAGE` build argument. `build_warnings` says, naming the file, the line and the fix, what
of that a workload's Containerfile (its `build.containerfile`, or Atlas's runtime image's) runs
into; `scripts/workload check` prints the warnings, and `pulumi preview`/`up` logs them before
any resource. Warnings, not errors: a build may still succeed where the checks cannot see (a
cluster that mirrors a public image, a commit pushed from elsewhere).
"""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from infra.openshift.settings import LOCAL_BUILDER, ImageBuild
from infra.stack_config import StackConfig
from infra.workload.containerfile import (
    BuildSite,
    BuildWarning,
    ContainerfileError,
    ContextPath,
    base_image_warnings,
    parse_containerfile,
)
from infra.workload.model import Workload

# The base image the local environment's registry serves, made by localenv/images.py from Debian's
# archive (bookworm's Python 3, standing in for docker.io/library/python:3.11-slim), as
# `repository:tag` at the registry's host (127.0.0.1:<port base + 510>).
LOCAL_BASE_IMAGE = "atlas/debian-python:bookworm"
GIT_TIMEOUT_S = 30


@dataclass(frozen=True)
class GitChange:
    """A path `git status --porcelain` lists: its two-letter status and the path (relative to the
    folder asked about)."""

    status: str
    path: str

    @property
    def what(self) -> str:
        if self.status == "??":
            return "untracked"
        if "D" in self.status:
            return "deleted, not committed"
        return "modified, not committed" if self.status[1] != " " else "staged, not committed"


class GitUnavailable(Exception):
    """git is missing, or the folder is not in a Git repository (the message says which)."""


def git_status(root: Path, paths: Sequence[str]) -> tuple[GitChange, ...]:
    """What `git status --porcelain` lists under `paths` (relative to `root`, Git pathspecs):
    untracked files (each one, not their folder) and changes not committed, staged or not. The
    paths it returns are relative to `root`. Raises GitUnavailable."""
    def git(*argv: str) -> str:
        try:
            done = subprocess.run(["git", "-C", str(root), *argv], capture_output=True, text=True,
                                  timeout=GIT_TIMEOUT_S, check=False)
        except FileNotFoundError:
            raise GitUnavailable("git is not installed") from None
        except subprocess.TimeoutExpired:
            raise GitUnavailable(f"git {argv[0]} took more than {GIT_TIMEOUT_S} s in {root}") from None
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]
            raise GitUnavailable(f"{root} is not in a Git repository ({last})")
        return done.stdout

    top = Path(git("rev-parse", "--show-toplevel").strip())
    out = git("status", "--porcelain=v1", "-z", "--untracked-files=all", "--", *(paths or ["."]))
    changes = []
    entries = iter(out.split("\0"))
    for entry in entries:
        if len(entry) < 4:
            continue
        status, path = entry[:2], entry[3:]
        if status[0] in "RC":
            next(entries, None)  # a rename's or copy's second name: where it came from
        relative = (top / path).resolve()
        try:
            shown = relative.relative_to(root.resolve()).as_posix()
        except ValueError:
            shown = path
        changes.append(GitChange(status, shown))
    return tuple(changes)


def build_paths(workload: Workload, context_paths: Sequence[str]) -> list[str]:
    """What the build reads from the repository, relative to its root: the Containerfile and each
    path COPY and ADD read from the context (the whole context where one is `.` or uses a variable)."""
    context = PurePosixPath(workload.build.context)
    paths = [workload.build.containerfile]
    for source in context_paths:
        cleaned = source.lstrip("/")
        if "$" in source or PurePosixPath(cleaned or ".") == PurePosixPath("."):
            return [workload.build.containerfile, str(context)]
        paths.append(str(context / cleaned))
    return sorted(set(paths))


def site_of(build: ImageBuild | None) -> BuildSite:
    served = frozenset({LOCAL_BASE_IMAGE})
    if build is None:
        return BuildSite(served)
    return BuildSite(served, local=build.builder == LOCAL_BUILDER, base_image=build.base_image)


def build_warnings(
    workload: Workload, repo_root: Path, build: ImageBuild | None = None, require_git: bool = True
) -> list[str]:
    """The warnings for the image `workload` runs in on Kubernetes, built from `repo_root` (Atlas's
    repository); `build`: the stack's `image.build` (None: not known, as for `scripts/workload check`,
    which then warns of what fails on the local environment or on a real cluster). Where `repo_root`
    is in no Git repository, the build's files cannot be compared with what the BuildConfig fetches:
    one warning saying so, or, without `require_git` (the stack program, whose project may be a copy
    beside the repository the build fetches), only the base images' warnings."""
    path = workload.build.containerfile
    site = site_of(build)
    source = (
        f"{build.git_uri} at {build.git_ref}" if build is not None else "image.build.git_uri at image.build.git_ref"
    )
    try:
        text = (repo_root / path).read_text()
    except OSError as error:
        return [BuildWarning(path, None, f"cannot be read ({error.strerror})",
                             "check build.containerfile in workload.yaml (relative to Atlas's repository)").text()]
    try:
        parsed = parse_containerfile(text)
    except ContainerfileError as error:
        return [BuildWarning(path, None, str(error), "write `FROM ${BASE_IMAGE}`").text()]
    warnings = [finding.text() for finding in base_image_warnings(parsed, path, site)]
    try:
        changes = git_status(repo_root, build_paths(workload, [p.path for p in parsed.context_paths]))
    except GitUnavailable as error:
        if not require_git:
            return warnings
        return [*warnings, f"{path}: the build's files cannot be checked against Git: {error}; the BuildConfig "
                           f"builds {source}, so keep Atlas in a Git repository and commit what the build reads"]
    warnings += missing_sources(workload, repo_root, parsed.context_paths)
    push = {True: "", False: ", and push it", None: " (and push it where image.build.git_uri is a remote)"}[site.local]
    for change in changes:
        if change.what.startswith("deleted"):
            fix = f"commit the deletion (git rm {change.path}; git commit){push}"
            effect = "the image will still have it"
        else:
            add = f"git add {change.path}; " if change.status == "??" or change.status[1] != " " else ""
            fix = f"commit it ({add}git commit){push}"
            effect = "the image will not have it"
        warnings.append(f"{change.path}: {change.what}, so {effect}: the BuildConfig builds {source} as committed; "
                        f"{fix} before `pulumi up`")
    return warnings


def missing_sources(workload: Workload, repo_root: Path, context_paths: Sequence[ContextPath]) -> list[str]:
    """COPY and ADD sources (without wildcards or variables) that are not in the build context."""
    context = repo_root / workload.build.context
    found = []
    for source in context_paths:
        if any(c in source.path for c in "*?[$"):
            continue
        if not (context / source.path.lstrip("/")).exists():
            found.append(BuildWarning(
                workload.build.containerfile, source.line,
                f"copies {source.path}, which is not in the build context ({workload.build.context})",
                "copy a path relative to build.context (Atlas's repository root unless workload.yaml says)",
            ).text())
    return found


def stack_build_warnings(config: StackConfig, workload: Workload, repo_root: Path) -> list[str]:
    """`build_warnings` for the image this stack builds (its Kubernetes side enabled, with
    `image.build`), judged for its builder and base image; none where it pulls a built image."""
    settings = config.openshift_settings
    if config.openshift is None or settings is None or settings.image.build is None:
        return []
    return build_warnings(workload, repo_root, settings.image.build, require_git=False)
