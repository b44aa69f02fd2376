"""The build's commands: one `run` that raises with the command and its output, and Go's helpers.

`go_env` (cgo off, no workspace, the local Go only), wrapper go.mod files that pin what one tool
needs, `go get` (a step's fetch stage: network), `go build` (its compile stage: CPU), and pinned
module downloads (`download_module`, also used by the schema regeneration and the tests).
Standard library only, as bootstrap.py, which runs with the system Python before the venv exists.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from infra.toolchain.progress import Progress, elapsed_text
from infra.toolchain.recipes import ldflags_text, wrapper_go_mod

MIN_GO = (1, 26)
HEARTBEAT_S = 20.0


class BuildStepFailed(Exception):
    """A build step's command or check failed; the message names it and shows why."""


def run(
    cmd: Sequence[str],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    progress: Progress | None = None,
    label: str = "",
) -> str:
    """Run a command; on failure raise with the command, exit code and output tail.

    While it runs, print a heartbeat with the elapsed time and, for `go build -v`,
    how many packages have been compiled so far.
    """
    started = time.monotonic()
    proc = subprocess.Popen(
        list(cmd),
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines: list[str] = []
    done = threading.Event()

    def heartbeat() -> None:
        while not done.wait(HEARTBEAT_S):
            if progress is not None:
                progress.say(
                    f"    {label or cmd[0]}: still running, {elapsed_text(started)}, "
                    f"{len(lines)} lines of output so far"
                )

    beat = threading.Thread(target=heartbeat, daemon=True)
    beat.start()
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line.rstrip("\n"))
    code = proc.wait()
    done.set()
    output = "\n".join(lines)
    if code != 0:
        # `go build -v` interleaves package names with the errors: show the errors first.
        errors = [ln for ln in lines if re.search(r"\.go:\d+|error|cannot|not available|missing", ln)]
        shown = "\n".join(errors[:40]) if errors else "\n".join(lines[-40:])
        raise BuildStepFailed(f"command failed (exit {code}): {' '.join(cmd)}\n{shown}")
    return output


def go_env(cache: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "CGO_ENABLED": "0",
            "GOFLAGS": "-mod=mod -buildvcs=false",
            "GOWORK": "off",
            "GOTOOLCHAIN": "local",
        }
    )
    env.pop("GOPATH_OVERRIDE", None)
    return env


def check_go() -> str:
    go = shutil.which("go")
    if go is None:
        raise BuildStepFailed("`go` is not on PATH: install Go 1.26 or newer (docs/quickstart.md, 'What it needs')")
    out = subprocess.run([go, "version"], capture_output=True, text=True, check=True).stdout
    match = re.search(r"go(\d+)\.(\d+)", out)
    if not match or (int(match[1]), int(match[2])) < MIN_GO:
        raise BuildStepFailed(f"Go {MIN_GO[0]}.{MIN_GO[1]}+ is needed, found: {out.strip()}")
    return out.strip()


def module_dir(module: str, version: str, workdir: Path, env: dict[str, str]) -> Path:
    out = run(["go", "mod", "download", "-json", f"{module}@{version}"], cwd=workdir, env=env)
    return Path(json.loads(out)["Dir"])


def download_module(module: str, version: str) -> Path:
    """The folder of a pinned Go module, from the module cache or the Go module proxy (the same
    place the toolchain's sources come from); raises BuildStepFailed naming the module."""
    if shutil.which("go") is None:
        raise BuildStepFailed(f"`go` is not on PATH, needed for {module}@{version}: install Go 1.26 or newer")
    with tempfile.TemporaryDirectory(prefix="atlas-gomod-") as tmp:
        write_wrapper(Path(tmp), "download", {}, {})
        return module_dir(module, version, Path(tmp), go_env(Path(tmp)))


def write_wrapper(
    workdir: Path, name: str, requires: dict[str, str], replaces: dict[str, str]
) -> None:
    """A throwaway go.mod that pins exactly what this one tool needs."""
    (workdir / "go.mod").write_text(wrapper_go_mod(name, requires, replaces))


def go_get(workdir: Path, packages: Sequence[str], version: str, env: dict[str, str], progress: Progress,
           label: str) -> None:
    """Fetch stage: record the packages' requirements and checksums in the wrapper module and
    download every module their build needs. The version must be explicit: a bare `go get pkg`
    upgrades its module to the latest."""
    run(
        ["go", "get", *(f"{p}@{version}" for p in packages)],
        cwd=workdir, env=env, progress=progress, label=f"{label} (fetch)",
    )


def go_build(
    workdir: Path,
    out: Path,
    packages: Sequence[str],
    ldflags: dict[str, str],
    env: dict[str, str],
    progress: Progress,
    label: str,
) -> None:
    """Compile stage: the modules are already in the module cache."""
    target = str(out) + os.sep if len(packages) > 1 else str(out)
    run(
        ["go", "build", "-v", "-trimpath", "-ldflags", f"-s -w {ldflags_text(ldflags)}", "-o", target, *packages],
        cwd=workdir,
        env=env,
        progress=progress,
        label=f"{label} (compile)",
    )
