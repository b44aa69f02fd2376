"""The stack's Python virtual environment (.venv): the project with every extra, at the pins of constraints.txt.

`pip install -c constraints.txt -e '.[<every extra>]'`: pyproject.toml declares a library's ranges,
constraints.txt the exact versions CI runs. Rebuilt when what it is built from changes
(`venv_key`: the Python, the declared dependencies, extras and commands, the constraints);
bootstrap.py builds it before the binaries. Standard library only, as bootstrap.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
from typing import Any

from infra.toolchain.go import run
from infra.toolchain.pins import REPO_ROOT, Pins
from infra.toolchain.progress import Progress

VENV_DIR = REPO_ROOT / ".venv"
CONSTRAINTS = REPO_ROOT / "constraints.txt"
# Pulumi.yaml's `runtime.options.virtualenv` (.venv) as a pulumi CLI of the user's own reads it for
# the dynamic-provider host: against the program's folder (`main: stacks/`), not the project's.
PROGRAM_VENV_LINK = REPO_ROOT / "stacks" / ".venv"


def _project() -> dict[str, Any]:
    import tomllib

    return dict(tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"])


def extras() -> tuple[str, ...]:
    """Every extra pyproject.toml declares: CI runs everything, so the venv has all of them."""
    return tuple(sorted(_project().get("optional-dependencies", {})))


def venv_key() -> str:
    """What the venv depends on: the declared dependencies and commands and the pins, not lint settings."""
    project = _project()
    wanted = {
        "python": sys.version,
        "deps": project["dependencies"],
        "extras": project.get("optional-dependencies"),
        "scripts": project.get("scripts"),
        "constraints": CONSTRAINTS.read_text(),
    }
    return hashlib.sha256(json.dumps(wanted, sort_keys=True).encode()).hexdigest()[:16]


def build_venv(pins: Pins, progress: Progress) -> None:
    python = os.environ.get("ATLAS_PYTHON", sys.executable)
    stamp = VENV_DIR / ".atlas-stamp"
    if VENV_DIR.exists():
        shutil.rmtree(VENV_DIR)
    run([python, "-m", "venv", str(VENV_DIR)], progress=progress, label="venv")
    pip = [str(VENV_DIR / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    run([*pip, "install", "-q", "--upgrade", "pip"], progress=progress, label="pip upgrade")
    run([*pip, "install", "-q", "-c", str(CONSTRAINTS), "-e", f"{REPO_ROOT}[{','.join(extras())}]"],
        progress=progress, label="pip install")
    stamp.write_text(venv_key())


def link_program_venv() -> None:
    """stacks/.venv -> ../.venv, so `virtualenv: .venv` names the one environment from either folder
    (upstream's dynamic-provider launcher resolves it against its working folder, the program's)."""
    link = PROGRAM_VENV_LINK
    target = os.path.relpath(VENV_DIR, link.parent)
    if link.is_symlink() and os.readlink(link) == target:
        return
    if link.is_symlink() or link.is_file():
        link.unlink()
    elif link.exists():
        return  # a real folder someone made there: leave it
    link.symlink_to(target, target_is_directory=True)


def compile_project_bytecode() -> None:
    """Bytecode for the project's own modules, refreshed where a source changed.

    Every `pulumi up` starts the program and the dynamic-provider plugin as new Python
    processes; where PYTHONDONTWRITEBYTECODE is set (as on the machines Atlas is built on),
    Python would compile each module from source in every one of them. The variable stops
    Python writing .pyc files, not reading them, and compileall writes them regardless.
    """
    import compileall

    for folder in ("infra", "localenv", "stacks", "workloads"):
        compileall.compile_dir(str(REPO_ROOT / folder), quiet=1, workers=1)
