"""The demo's path in a copy of the repository with nothing beside it, as a user's clone is:
`scripts/bootstrap` (the toolchain from the shared cache, the clone's own .venv), `scripts/localenv
up`, `pulumi preview -s local`, `scripts/localenv down`. Nothing outside the copy is read: there
is no ../shared next to it (tests/unit/test_stands_alone.py checks the code for such paths)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from infra.toolchain.pins import REPO_ROOT
from localenv.layout import Layout, Ports

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("root")]

PORT_BASE = 18600


def copy_of_the_repository(dest: Path) -> None:
    """What a clone has: tracked files and new files git does not ignore (no .venv, no .state)."""
    listing = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO_ROOT,
                             capture_output=True, check=True).stdout.decode()
    for name in filter(None, listing.split("\0")):
        source = REPO_ROOT / name
        if not source.is_file():
            continue  # deleted in the working tree, not yet in git
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
    # A stack file's encryptionsalt belongs to the machine whose passphrase made it, never to a
    # clone (docs/quickstart.md: not to be committed); a working copy may have one.
    for stack in (dest / "stacks").glob("Pulumi.*.yaml"):
        lines = stack.read_text().splitlines(keepends=True)
        stack.write_text("".join(line for line in lines if not line.startswith("encryptionsalt:")))


def fresh_shell_env(clone: Path) -> dict[str, str]:
    """A new user's shell: no Atlas or Pulumi variables, no toolchain or venv on PATH, and a Pulumi
    home with no login in it (the pulumi CLI would otherwise use the machine user's own: it reads
    its home from the user database, not $HOME), so activate chooses the clone's .state/."""
    keep = ("HOME", "USER", "LANG", "LC_ALL", "TERM", "GOPATH", "GOMODCACHE", "GOCACHE", "GOPROXY",
            "ATLAS_CACHE", "XDG_CACHE_HOME", "PIP_CONFIG_FILE", "PIP_INDEX_URL", "SSL_CERT_FILE",
            "REQUESTS_CA_BUNDLE")
    env = {k: v for k, v in os.environ.items() if k in keep}
    path = [p for p in os.environ.get("PATH", "").split(":") if ".venv" not in p and "/toolchain/" not in p]
    env["PATH"] = ":".join(path)
    env["ATLAS_LOCALENV_PORT_BASE"] = str(PORT_BASE)
    env["PULUMI_HOME"] = str(clone.parent / "pulumi-home")
    return env


@pytest.fixture
def clone() -> Iterator[Path]:
    # Under /tmp: the local Satori's login user must reach the clone's state folder.
    top = Path(tempfile.mkdtemp(prefix="atlas-alone-", dir="/tmp"))
    top.chmod(0o755)
    clone = top / "atlas"
    copy_of_the_repository(clone)
    yield clone
    subprocess.run(["bash", "-c", "source scripts/activate && scripts/localenv down"], cwd=clone,
                   env=fresh_shell_env(clone), capture_output=True, check=False, timeout=300)
    shutil.rmtree(top, ignore_errors=True)


def sh(clone: Path, command: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(["bash", "-c", command], cwd=clone, env=fresh_shell_env(clone),
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, f"{command} exited {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


def test_the_demo_path_runs_in_a_clone_with_nothing_beside_it(clone: Path):
    assert sorted(p.name for p in clone.parent.iterdir()) == ["atlas"]
    assert not (clone / ".venv").exists() and not (clone / ".state").exists()

    bootstrap = sh(clone, "scripts/bootstrap")
    assert "FAILED" not in bootstrap.stdout
    assert (clone / ".venv" / "bin" / "python").exists()
    # The clone's venv runs the clone's code, not the working copy's.
    where = sh(clone, ".venv/bin/python -c 'import infra, os; print(os.path.realpath(infra.__file__))'")
    assert where.stdout.strip() == str((clone / "infra" / "__init__.py").resolve())

    sh(clone, "source scripts/activate && scripts/localenv up")
    status = json.loads(sh(clone, "source scripts/activate && scripts/localenv status --json").stdout)
    assert status["kubernetes"]["ready"] and status["running"] and status["aws"]["ready"]
    assert status["state_dir"] == str(clone / ".state" / "localenv")

    # The stack as shipped, with its SSH port moved to where this environment listens.
    stack_file = clone / "stacks" / "Pulumi.local.yaml"
    stack = yaml.safe_load(stack_file.read_text())
    for env in stack["config"]["atlas:hpc"].values():
        env["port"] = status["ssh"]["port"]
    stack_file.write_text(yaml.safe_dump(stack, sort_keys=False))
    preview = sh(clone, "source scripts/activate && pulumi stack select local --create --non-interactive "
                        "&& pulumi preview -s local --non-interactive")
    for planned in ("kubernetes:core/v1:Namespace", "kubernetes:batch/v1:Job", "pulumi-python:dynamic/hpc:BatchJob"):
        assert planned in preview.stdout, preview.stdout[-3000:]

    down = sh(clone, "source scripts/activate && scripts/localenv down")
    assert "down" in down.stdout
    # Pid files live outside the state folder (localenv/layout.py: RECORDS_ROOT), by its path.
    pids = Layout(state_dir=(clone / ".state" / "localenv").resolve(), ports=Ports(0)).pids_dir
    left = [p.name for p in pids.glob("*.pid")] if pids.exists() else []
    assert left == []
