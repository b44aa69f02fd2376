"""Finding and reading workload definitions: the only I/O of the workload package.

- `locate_workload`: what `atlas:workload` (or a CLI's `--workload`) names, to a workload.yaml:
  a folder under this repository's `workloads/`, or a path to a definition or to a folder
  holding one, anywhere (a researcher's own repository beside Atlas);
- `load_workload`: read and validate it; a definition outside this repository may only use what
  does not depend on Atlas's own tree (`source.folder` or `source.repository` without a patch,
  and Atlas's runtime image);
- `folder_files`: the files of a folder source, checked against `FOLDER_LIMITS`.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from infra.workload.model import FOLDER_LIMITS, FolderSource, Workload, WorkloadError
from infra.workload.parse import check_outside_repository, parse_workload_text

DEFINITION = "workload.yaml"
REPO_ROOT = Path(__file__).resolve().parents[2]
SHIPPED = REPO_ROOT / "workloads"
# Never staged from a folder source: version control and caches, which are not the program.
SKIPPED_NAMES = frozenset({".git", ".hg", ".svn", "__pycache__", ".pytest_cache", ".mypy_cache", ".venv"})


def shipped_workloads(root: Path = SHIPPED) -> tuple[str, ...]:
    """The workloads that ship with Atlas: the folders under workloads/ that hold a definition."""
    return tuple(sorted(p.parent.name for p in root.glob(f"*/{DEFINITION}")))


def locate_workload(
    value: str, project_dir: Path, key: str = "atlas:workload", shipped_root: Path | None = None
) -> Path:
    """The workload.yaml `value` names: a folder name under `shipped_root` (default the project's
    workloads/, beside Pulumi.yaml), or a path (relative to `project_dir`) to a definition or to a
    folder holding one. Raises WorkloadError naming `key`."""
    shipped_root = shipped_root or project_dir / "workloads"
    shipped = shipped_workloads(shipped_root)
    fix = (
        f"name a workload that ships ({', '.join(shipped)}) or the path of your own workload.yaml "
        "(or of the folder holding it), e.g. `pulumi config set atlas:workload ../my-pipeline`"
    )
    if not isinstance(value, str) or not value.strip() or "\n" in value or "\0" in value:
        raise WorkloadError(f"{key}: expected a workload name or path, found {value!r}; {fix}")
    if "/" not in value and not value.endswith((".yaml", ".yml")) and value not in (".", ".."):
        if value in shipped:
            return shipped_root / value / DEFINITION
        raise WorkloadError(f"{key}: {value!r} is not a workload that ships with Atlas; {fix}")
    path = Path(os.path.expanduser(value))
    path = path if path.is_absolute() else project_dir / path
    if path.is_dir():
        path = path / DEFINITION
    if not path.is_file():
        raise WorkloadError(f"{key}: {path} does not exist; {fix}")
    if path.suffix not in (".yaml", ".yml"):
        raise WorkloadError(f"{key}: {path} is not a workload definition (a .yaml file); {fix}")
    return path.resolve()


def is_inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True


def load_workload(path: Path, repo_root: Path | None = None) -> Workload:
    """Read and validate `path`; errors are prefixed with the file name. With `repo_root` (the
    stack program and `scripts/workload check`, which build from that tree), a definition outside
    it is held to what does not need Atlas's own files (parse.check_outside_repository); readers
    of a run that already stood up (compare, monitor, nodes) pass none."""
    try:
        workload = parse_workload_text(path.read_text())
        if repo_root is not None and not is_inside(path, repo_root):
            check_outside_repository(workload)
    except WorkloadError as error:
        raise WorkloadError(f"{path}: {error}") from None
    except OSError as error:
        raise WorkloadError(f"{path}: cannot be read ({error.strerror}); check the path") from None
    return dataclasses.replace(workload, definition_dir=str(path.resolve().parent))


def check_staged_size(sizes: list[int], what: str) -> None:
    """Code staged beside the runtime image stays within FOLDER_LIMITS (one ConfigMap on Kubernetes)."""
    if len(sizes) > FOLDER_LIMITS.max_files or sum(sizes) > FOLDER_LIMITS.max_bytes:
        raise WorkloadError(
            f"{what} holds more than {FOLDER_LIMITS.max_files} files or {FOLDER_LIMITS.max_bytes // 1024} KiB; "
            "code staged beside Atlas's runtime image travels in one ConfigMap, so move data to data.inputs "
            "(staged from a PVC, URL or S3) and build large code into an image of your own"
        )


@dataclass(frozen=True)
class FolderFile:
    """One file of a folder source: where it is here, where it goes (relative), its mode."""

    source: Path
    path: str
    mode: int
    size: int


def folder_root(workload: Workload) -> Path:
    if not isinstance(workload.source, FolderSource) or workload.definition_dir is None:
        raise WorkloadError("source.folder: the workload has no folder source read from a file")
    return Path(workload.definition_dir) / workload.source.folder


def folder_files(workload: Workload) -> tuple[FolderFile, ...]:
    """Every file under the folder source (version control and caches left out), sorted; raises
    WorkloadError naming `source.folder` when it is missing, too large, or a link leads out."""
    root = folder_root(workload)
    key = "source.folder"
    if not root.is_dir():
        raise WorkloadError(f"{key}: {root} is not a folder; write the folder that holds the code, e.g. `.`")
    files: list[FolderFile] = []
    for directory, folders, names in os.walk(root):
        folders[:] = sorted(f for f in folders if f not in SKIPPED_NAMES)
        for name in sorted(names):
            local = Path(directory) / name
            relative = local.relative_to(root).as_posix()
            if local.is_symlink() and not is_inside(local, root):
                raise WorkloadError(f"{key}: {relative} is a link out of {root}; copy the file in instead")
            info = local.stat()
            if not stat.S_ISREG(info.st_mode):
                raise WorkloadError(f"{key}: {relative} is not a regular file; remove it from {root}")
            if relative == DEFINITION:
                continue  # the definition is read here; the steps do not need it
            files.append(FolderFile(local, relative, 0o755 if info.st_mode & 0o111 else 0o644, info.st_size))
            check_staged_size([f.size for f in files], f"{key}: {root}")
    if not files:
        raise WorkloadError(f"{key}: {root} holds no file to stage; put the step's scripts there")
    return tuple(files)
