"""`atlas monitor`, `nodes` and `compare` on a stack whose HPC side's login key is only a Pulumi
secret of the stack (as the real stacks keep it): no key file named anywhere, the key set with
`pulumi config set --secret --path atlas:hpc.<name>.private_key`, read back by the commands through
`pulumi config --show-secrets` (the real pulumi CLI, an isolated backend and passphrase) and used
for the local Satori's login over real OpenSSH. Run from a folder outside the project, the
relative --outputs and --out are that folder's; the key's material appears in nothing printed or
written. Without -s (outputs alone) the side is unreachable, and the message says to give it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from localenv import satori
from localenv.layout import Layout
from tests.e2e.pulumi_cli import PulumiProject, satori_ssh

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("root")]

STACK = "site-secret-key"


def atlas(project: PulumiProject, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`python -m infra.cli ARGS` as the installed `atlas` runs, from `cwd`, with the project's pulumi."""
    return subprocess.run(
        [project.env["PULUMI_PYTHON_CMD"], "-m", "infra.cli", *args],
        cwd=cwd, env=project.env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip


def test_the_commands_log_in_with_the_key_the_stack_holds_as_a_secret(satori_env: Layout, tmp_path: Path) -> None:
    info = satori.status(satori_env)["ssh"]
    key_text = Path(info["key_file"]).read_text()
    key_lines = [line for line in key_text.splitlines() if line and not line.startswith("-----")]
    project = PulumiProject.create(tmp_path)
    project.run("stack", "init", STACK)
    # The stack file: the login node, its host keys, the site's pace; no key, no key file.
    stack_file = project.root / "stacks" / f"Pulumi.{STACK}.yaml"
    document = yaml.safe_load(stack_file.read_text()) or {}  # stack init wrote the passphrase's salt
    document["config"] = {
        "atlas:workload": "probe",
        "atlas:hpc": {
            "site": {
                "scheduler": "slurm",
                "provenance": "local stand-in: Slurm on this host, mock GPUs, CPU run",
                "host": info["host"],
                "port": info["port"],
                "user": info["user"],
                "queue": "normal",
                "known_hosts_file": info["known_hosts_file"],
                "poll_interval_seconds": 1,
            }
        },
    }
    stack_file.write_text(yaml.safe_dump(document))
    subprocess.run(
        ["pulumi", "config", "set", "--secret", "--path", "atlas:hpc.site.private_key", "-s", STACK],
        cwd=project.root, env=project.env, input=key_text, capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    assert "private_key_file" not in stack_file.read_text() and key_lines[0] not in stack_file.read_text()

    # A job of the run, submitted by hand, and the outputs that name it.
    remote = f"atlas-cli-secret-{tmp_path.name}"
    job_id = satori_ssh(satori_env, f"mkdir -p {remote} && cd {remote} && sbatch --parsable -p normal "
                                    "--wrap 'sleep 1'").strip().split(";")[0]
    assert job_id.isdigit()
    outputs: dict[str, Any] = {
        "atlas": {"version": 2, "stack": STACK, "workload": "probe", "run_id": "1"},
        "environments": {"site": {
            "kind": "hpc", "version": 2, "scheduler": "slurm", "provenance": "local stand-in",
            "host": info["host"], "port": info["port"], "user": info["user"], "run_dir": remote, "run_id": "1",
            "steps": [{"name": "train", "job_id": job_id}], "gpus_requested": 1, "known_hosts": "",
            "telemetry": {"path": f"{remote}/telemetry", "pvc": ""}, "logs": {"path": f"{remote}/logs", "pvc": ""},
        }},
    }  # fmt: skip
    elsewhere = tmp_path / "my-folder"
    elsewhere.mkdir()
    (elsewhere / "outputs.json").write_text(json.dumps(outputs))
    printed: list[str] = []

    monitor = atlas(project, elsewhere, "monitor", "-s", STACK, "-C", str(project.root),
                    "--outputs", "outputs.json", "--once", "--json")
    printed.append(monitor.stdout + monitor.stderr)
    assert monitor.returncode == 0, monitor.stderr
    (site,) = json.loads(monitor.stdout)["environments"]
    assert site["name"] == "site" and not site.get("error"), site
    assert [s["job"] for s in site["steps"]] == [job_id] and site["nodes"], site
    assert json.loads(monitor.stdout)["interval_s"] == 1.0  # the site's poll_interval_seconds

    # Before any `pulumi up` the stack has no outputs: nodes reads where the site is from the stack
    # file, and logs in with the secret all the same.
    nodes = atlas(project, elsewhere, "nodes", "-s", STACK, "-C", str(project.root), "--json")
    printed.append(nodes.stdout + nodes.stderr)
    assert nodes.returncode == 0, nodes.stderr
    assert json.loads(nodes.stdout)["summary"]["nodes"] >= 1 and "site:" not in nodes.stderr, nodes.stderr

    compare = atlas(project, elsewhere, "compare", "-s", STACK, "-C", str(project.root),
                    "--outputs", "outputs.json", "--out", "report")
    printed.append(compare.stdout + compare.stderr)
    assert compare.returncode == 0, compare.stderr
    report = json.loads((elsewhere / "report" / "report.json").read_text())  # --out is where it ran
    (env,) = report["environments"]
    assert env["name"] == "site" and env["steps"] and not any("not collected" in n for n in env["notes"]), env

    # Outputs alone: nothing says how to log in, and the message names the fix.
    alone = atlas(project, elsewhere, "monitor", "--outputs", "outputs.json", "--once", "--json")
    printed.append(alone.stdout + alone.stderr)
    (site,) = json.loads(alone.stdout)["environments"]
    assert "give -s STACK (its config names them, a key held as a Pulumi secret included)" in site["error"]

    written = "\n".join(p.read_text(errors="replace") for p in (elsewhere / "report").rglob("*") if p.is_file()
                        and p.suffix in (".json", ".md", ".html", ".txt"))
    for line in key_lines:
        assert all(line not in text for text in printed), "key material printed"
        assert line not in written, "key material written into the report"
