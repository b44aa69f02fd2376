"""scripts/activate and the scripts/ wrappers with the real pulumi CLI: a backend and passphrase a
user keeps outside the repository are kept (the stack's state and secrets land there, nothing in
.state/), none means the file backend in .state/, and a backend that cannot be reached, a
passphrase that does not open the stack, end the command in one line naming the fix. And what a
pulumi CLI of one's own relies on: the engine hands Pulumi.yaml's `virtualenv` to the
dynamic-provider launcher as written, in the program's folder, where bootstrap's stacks/.venv link
makes it the project's .venv.

No local environment is needed; every run has its own PULUMI_HOME (the pulumi CLI takes its home
from the user database, not $HOME), so the user's own Pulumi login is never touched."""

from __future__ import annotations

import subprocess
from pathlib import Path

import paramiko
import pytest
import yaml

from infra.toolchain.pins import REPO_ROOT
from tests.e2e.pulumi_cli import PulumiProject, bash, shell_env
from tests.support import closed_port

pytestmark = pytest.mark.integration

Completed = subprocess.CompletedProcess[str]
PASSPHRASE = "a-team-passphrase-kept-in-a-file"


def test_a_backend_and_passphrase_of_ones_own_outside_the_repository_are_kept(tmp_path: Path) -> None:
    team = tmp_path / "team-state"
    team.mkdir()
    secrets = tmp_path / "secrets" / "passphrase"
    secrets.parent.mkdir()
    secrets.write_text(PASSPHRASE + "\n")
    env = shell_env(tmp_path, PULUMI_BACKEND_URL=f"file://{team}", PULUMI_CONFIG_PASSPHRASE_FILE=str(secrets))
    project = PulumiProject.create(tmp_path).root
    before = sorted(p.name for p in (REPO_ROOT / ".state" / "pulumi-backend").rglob("*.json")) if (
        REPO_ROOT / ".state" / "pulumi-backend").exists() else []
    proc = bash(
        f"source {REPO_ROOT}/scripts/activate && cd {project} && pulumi stack init team-own --non-interactive"
        " && printf 'a value\\n' | pulumi config set --secret atlas:probeSecret -s team-own"
        ' && printf "%s\\n" "$PULUMI_BACKEND_URL" "$PULUMI_CONFIG_PASSPHRASE_FILE"',
        env,
    )
    assert proc.returncode == 0, proc.stderr
    rest = proc.stdout.splitlines()
    line = proc.stderr.splitlines()[0]  # activate's line, on stderr: a sourcing script's stdout stays its own
    assert line == (f"atlas: Pulumi backend file://{team} (PULUMI_BACKEND_URL); secrets: the passphrase file "
                    f"{secrets} (PULUMI_CONFIG_PASSPHRASE_FILE)")
    assert rest[-2:] == [f"file://{team}", str(secrets)]
    assert PASSPHRASE not in proc.stdout + proc.stderr
    # The stack and its secrets are where the user keeps them, nothing in the repository's .state/.
    assert (team / ".pulumi" / "stacks" / "atlas" / "team-own.json").is_file()
    after = sorted(p.name for p in (REPO_ROOT / ".state" / "pulumi-backend").rglob("*.json")) if (
        REPO_ROOT / ".state" / "pulumi-backend").exists() else []
    assert after == before
    stack_file = (project / "stacks" / "Pulumi.team-own.yaml").read_text()
    assert "encryptionsalt" in stack_file and "a value" not in stack_file
    shown = bash(f"source {REPO_ROOT}/scripts/activate >/dev/null && cd {project} && "
                 "pulumi config get atlas:probeSecret -s team-own", env)
    assert shown.stdout.strip() == "a value", shown.stderr  # the kept passphrase opens it


def test_with_no_backend_of_ones_own_it_is_the_file_backend_in_state(tmp_path: Path) -> None:
    proc = bash('source scripts/activate && printf "%s\\n" "$PULUMI_BACKEND_URL" "$PULUMI_CONFIG_PASSPHRASE_FILE"'
                ' "${PULUMI_HOME:-}"', shell_env(tmp_path))
    assert proc.returncode == 0, proc.stderr
    url, passphrase_file, home = proc.stdout.splitlines()
    line = proc.stderr.splitlines()[0]
    state = REPO_ROOT / ".state"
    assert (url, passphrase_file, home) == (f"file://{state}/pulumi-backend", str(state / "passphrase"),
                                            str(tmp_path / "pulumi-home"))
    assert line.startswith(f"atlas: Pulumi backend file://{state}/pulumi-backend (the local default")
    assert (state / "passphrase").read_text().strip() not in proc.stdout


HOST_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"


def backend_failure(tmp_path: Path, script: str, **backend: str) -> list[str]:
    """A wrapper run from a folder outside the repository with the given backend; its stderr lines."""
    env = shell_env(tmp_path, **backend)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(exist_ok=True)
    proc = bash(f"{REPO_ROOT}/scripts/{script}", env, cwd=elsewhere, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    return proc.stderr.splitlines()


def test_a_backend_that_cannot_be_reached_ends_in_one_line_naming_the_fix(tmp_path: Path) -> None:
    port = closed_port()
    (line,) = backend_failure(tmp_path, "compare -s local", PULUMI_BACKEND_URL=f"https://127.0.0.1:{port}",
                              PULUMI_ACCESS_TOKEN="pul-not-a-real-token")
    assert line.startswith(f"compare: the Pulumi backend https://127.0.0.1:{port} (from PULUMI_BACKEND_URL) "
                           "cannot be reached (")
    assert "connection refused" in line and "choose another with PULUMI_BACKEND_URL or `pulumi login URL`" in line
    assert "pul-not-a-real-token" not in line
    (line,) = backend_failure(tmp_path, "monitor -s local --once", PULUMI_BACKEND_URL="file:///etc/hostname/state")
    assert line.startswith("monitor: the Pulumi backend file:///etc/hostname/state (from PULUMI_BACKEND_URL) cannot")
    assert "create the folder, or name the right one" in line


def test_a_passphrase_that_does_not_open_the_stack_ends_in_one_line(tmp_path: Path) -> None:
    team = tmp_path / "team-state"
    team.mkdir()
    project = PulumiProject.create(tmp_path).root
    env = shell_env(tmp_path, PULUMI_BACKEND_URL=f"file://{team}", PULUMI_CONFIG_PASSPHRASE=PASSPHRASE)
    made = bash(f"source {REPO_ROOT}/scripts/activate >/dev/null && cd {project} && "
                "pulumi stack init team-own --non-interactive && "
                "printf 'x\\n' | pulumi config set --secret atlas:probeSecret -s team-own", env)
    assert made.returncode == 0, made.stderr
    (line,) = backend_failure(tmp_path, f"compare -s team-own -C {project}", PULUMI_BACKEND_URL=f"file://{team}",
                              PULUMI_CONFIG_PASSPHRASE="not the one")
    assert line == ("compare: the passphrase given does not open stack team-own's secrets: set "
                    "PULUMI_CONFIG_PASSPHRASE or PULUMI_CONFIG_PASSPHRASE_FILE to the one it was made with "
                    "(scripts/activate prints the backend and secrets this shell uses)")


# What upstream's dynamic-provider launcher does with Pulumi.yaml's `virtualenv` (the engine hands it
# over as PULUMI_RUNTIME_VIRTUALENV): a relative path is taken from the launcher's working folder.
# This stand-in records what it was given, then runs the SDK's host from that environment.
FOLLOWS_VIRTUALENV = """#!/bin/sh
printf '%s\\n%s\\n' "$PWD" "${PULUMI_RUNTIME_VIRTUALENV:-}" > "$ATLAS_TEST_LAUNCH_RECORD"
case $PULUMI_RUNTIME_VIRTUALENV in
    /*) venv=$PULUMI_RUNTIME_VIRTUALENV ;;
    *) venv=$PWD/$PULUMI_RUNTIME_VIRTUALENV ;;
esac
exec "$venv/bin/python" -u -m infra.toolchain.dynamic_host "$@"
"""


def test_the_virtualenv_option_reaches_the_venv_from_the_dynamic_provider_launcher(tmp_path: Path) -> None:
    project = PulumiProject.create(tmp_path)
    # The copy's .venv is this checkout's; stacks/.venv is linked to it as bootstrap links it.
    (project.root / ".venv").symlink_to(REPO_ROOT / ".venv")
    (project.root / "stacks" / ".venv").symlink_to("../.venv")
    bindir = tmp_path / "launchers"
    bindir.mkdir()
    (bindir / "pulumi-resource-pulumi-python").write_text(FOLLOWS_VIRTUALENV)
    (bindir / "pulumi-resource-pulumi-python").chmod(0o755)
    record = tmp_path / "launch.txt"
    key = tmp_path / "id"
    paramiko.RSAKey.generate(2048).write_private_key_file(str(key))  # preview checks that a key is there to offer
    project.env.update(PATH=f"{bindir}:{project.env['PATH']}", ATLAS_TEST_LAUNCH_RECORD=str(record))
    project.run("stack", "init", "venv-check")
    stack_file = project.root / "stacks" / "Pulumi.venv-check.yaml"
    document = yaml.safe_load(stack_file.read_text()) or {}
    port = closed_port()
    document["config"] = {"atlas:workload": "probe", "atlas:hpc": {"site": {
        "scheduler": "slurm", "host": "127.0.0.1", "port": port, "user": "alex",
        "known_hosts": f"[127.0.0.1]:{port} {HOST_KEY}\n",
        "private_key_file": str(key)}}}  # fmt: skip
    stack_file.write_text(yaml.safe_dump(document))
    preview = project.run("preview", "-s", "venv-check")  # the BatchJobs' check runs in the launched host
    assert "pulumi-python:dynamic/hpc:BatchJob" in preview.stdout and f"from $PATH at {bindir}" in preview.stdout
    working, virtualenv = record.read_text().splitlines()
    assert (working, virtualenv) == (str(project.root / "stacks"), ".venv")  # the program's folder, as written
