"""The private key stays secret through a real `pulumi up` of an HpcEnvironment.

Runs the real Pulumi CLI (isolated PULUMI_HOME, file backend, passphrase; never the user's
login) on a tiny program: an HpcEnvironment with a two-step workload against the local
Satori (Slurm), the key given as `pulumi config set --secret`. Then greps everything that
could leak it (the state export, the stack outputs, the CLI's own output) for the key's
material. Also checks the program's lifecycle: a second `up` changes nothing, destroy works.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from infra.toolchain.pins import REPO_ROOT
from localenv import satori
from localenv.layout import Layout, Ports
from tests.e2e.pulumi_cli import isolated_env

pytestmark = [
    pytest.mark.integration,
    pytest.mark.usefixtures("root"),
]

PORT_BASE = int(os.environ.get("ATLAS_TEST_HPC_SECRETS_PORT_BASE", "17300"))


WORKLOAD = {
    "version": 1,
    "name": "tiny",
    "description": "two small steps for the secrets test",
    "source": {"path": "workloads/probe"},
    "build": {"containerfile": "workloads/probe/Containerfile", "entrypoint": "workloads/probe/Containerfile"},
    "data": {"outputs": [{"name": "prepared", "path": "prepared.txt", "description": "-"}]},
    "steps": [
        {
            "name": "prep",
            "command": ["bash", "-c", "echo prepared > prepared.txt"],
            "outputs": ["prepared"],
            "resources": {
                "nodes": 1,
                "gpus_per_node": 1,
                "cpus_per_task": 1,
                "memory": "128Mi",
                "walltime": "00:05:00",
            },
        },
        {
            "name": "main",
            "command": ["bash", "-c", "cat prepared.txt; sleep 1"],
            "inputs": ["prepared"],
            "resources": {
                "nodes": 1,
                "gpus_per_node": 0,
                "cpus_per_task": 1,
                "memory": "128Mi",
                "walltime": "00:05:00",
            },
        },
    ],
    "logs": {"root": "logs", "experiment": "tiny"},
    "telemetry": {"root": "telemetry", "interval_seconds": 1},
}

PROGRAM = textwrap.dedent(
    """
    import json
    import pulumi
    from infra.hpc.components import HpcEnvironment, HpcEnvironmentArgs
    from infra.hpc.target_parser import parse_hpc_target
    from infra.workload.parse import parse_workload

    config = pulumi.Config("atlas")
    target = parse_hpc_target(config.require_object("satori"), "atlas:satori", private_key_from_secret=True)
    workload = parse_workload(json.loads(config.require("workload")))
    env = HpcEnvironment(
        "satori",
        HpcEnvironmentArgs(
            target=target,
            workload=workload,
            environment="satori",
            stack=pulumi.get_stack(),
            wait_for_steps=("prep",),
            wait_timeout_s=120,
            private_key=config.require_secret("satori_private_key"),
        ),
    )
    pulumi.export("environments", {"satori": env.outputs})
    """
)


@pytest.fixture(scope="module")
def layout() -> Iterator[Layout]:
    state = Path(tempfile.mkdtemp(prefix="atlas-hpc-secrets-", dir="/tmp"))
    state.chmod(0o755)
    lay = Layout(state_dir=state, ports=Ports(PORT_BASE))
    satori.up(lay)
    yield lay
    try:
        satori.down(lay)
    finally:
        shutil.rmtree(state, ignore_errors=True)


def test_private_key_never_in_plain_text(layout: Layout, tmp_path: Path) -> None:
    info = satori.status(layout)["ssh"]
    key_text = Path(info["key_file"]).read_text()
    # The base64 body lines of the key: any of them in plain text is a leak.
    key_lines = [line for line in key_text.splitlines() if line and not line.startswith("-----")]
    assert key_lines

    project = tmp_path / "project"
    project.mkdir()
    (project / "Pulumi.yaml").write_text(
        f"name: atlas-hpc-secrets\nruntime:\n  name: python\n  options:\n    virtualenv: {REPO_ROOT / '.venv'}\n"
    )
    (project / "__main__.py").write_text(PROGRAM)
    env = isolated_env(tmp_path, "hpc-secrets-test-passphrase")
    transcript: list[str] = []

    def pulumi(*args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["pulumi", *args, "--non-interactive"] if args[0] != "config" else ["pulumi", *args],
            cwd=project,
            env=env,
            input=stdin,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        transcript.append(proc.stdout + proc.stderr)
        if check and proc.returncode != 0:
            raise AssertionError(f"pulumi {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return proc

    pulumi("stack", "init", "secrets")
    target = {
        "host": info["host"],
        "port": info["port"],
        "user": info["user"],
        "scheduler": "slurm",
        "queue": "normal",
        "known_hosts": Path(info["known_hosts_file"]).read_text(),
        "poll_interval_seconds": 1,
        "remote_work_dir": "atlas-secrets-test",
    }
    # stack init wrote the passphrase's salt into the stack file: add the config beside it.
    stack_file = project / "Pulumi.secrets.yaml"
    document = yaml.safe_load(stack_file.read_text()) or {}
    document["config"] = {"atlas:satori": target, "atlas:workload": json.dumps(WORKLOAD)}
    stack_file.write_text(yaml.safe_dump(document))
    pulumi("config", "set", "--secret", "atlas:satori_private_key", stdin=key_text)

    preview = pulumi("preview", "--diff")
    assert "#SBATCH --job-name=atlas-prep-" in preview.stdout  # preview shows the job scripts
    up = pulumi("up", "--yes", "--skip-preview")
    outputs = json.loads(pulumi("stack", "output", "--json").stdout)
    satori_out = outputs["environments"]["satori"]
    assert satori_out["kind"] == "hpc" and satori_out["scheduler"] == "slurm"
    assert [s["name"] for s in satori_out["steps"]] == ["prep", "main"]
    assert all(s["job_id"].isdigit() for s in satori_out["steps"])
    assert "satori-prep" in up.stdout
    # The control for the second `up`'s checks below: Pulumi's summary, as they read it, counts what was created.
    assert re.search(r"\b\d+ created\b", up.stdout.rpartition("Resources:")[2]), up.stdout

    again = pulumi("up", "--yes", "--skip-preview")
    # Nothing created, replaced or deleted: a replaced job is a job submitted again. (This used to
    # read `"satori-prep" not in <the summary> or "unchanged" in <the output>`: the summary never
    # names a resource and every second `up` prints "unchanged", so it could not fail.)
    listed, _, summary = again.stdout.rpartition("Resources:")
    assert re.search(r"\b\d+ unchanged\b", summary), again.stdout
    assert not re.search(r"\b\d+ (created|replaced|deleted)\b", summary), again.stdout
    assert not re.search(r"satori-(prep|main)\b(?!-)", listed), again.stdout  # neither job's resource is touched
    assert json.loads(pulumi("stack", "output", "--json").stdout) == outputs  # nothing resubmitted

    state = pulumi("stack", "export").stdout
    assert "ssh_secret" in state and "4dabf18193072939515e22adb298388d" in state  # the secret signature
    pulumi("refresh", "--yes", "--skip-preview")
    state_after_refresh = pulumi("stack", "export").stdout
    pulumi("destroy", "--yes", "--skip-preview")

    everything = "\n".join([state, state_after_refresh, json.dumps(outputs), *transcript])
    for line in key_lines:
        assert line not in everything, "private key material found in plain text"
