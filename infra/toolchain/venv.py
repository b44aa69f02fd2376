"""The stack's Python virtual environment (.venv): built from pyproject.toml, with bytecode for the project.

Rebuilt when what it is built from changes (`venv_key`: the Python, the declared dependencies
and extras); bootstrap.py builds it before the binaries. Standard library only, as bootstrap.py.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys

from infra.toolchain.go import run
from infra.toolchain.pins import REPO_ROOT, Pins
from infra.toolchain.progress import Progress

VENV_DIR = REPO_ROOT / ".venv"


def venv_key() -> str:
    """What the venv depends on: the declared dependencies, not lint settings."""
    import tomllib

    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    wanted = {"python": sys.version, "deps": project["dependencies"], "extras": project.get("optional-dependencies")}
    return hashlib.sha256(json.dumps(wanted, sort_keys=True).encode()).hexdigest()[:16]


def build_venv(pins: Pins, progress: Progress) -> None:
    python = os.environ.get("ATLAS_PYTHON", sys.executable)
    stamp = VENV_DIR / ".atlas-stamp"
    if VENV_DIR.exists():
        shutil.rmtree(VENV_DIR)
    run([python, "-m", "venv", str(VENV_DIR)], progress=progress, label="venv")
    pip = [str(VENV_DIR / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
    run([*pip, "install", "-q", "--upgrade", "pip"], progress=progress, label="pip upgrade")
    run([*pip, "install", "-q", "-e", f"{REPO_ROOT}[dev]"], progress=progress, label="pip install")
    stamp.write_text(venv_key())


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
