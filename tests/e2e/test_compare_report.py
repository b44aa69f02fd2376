"""The comparison report of a real `local` run, checked against the environments' own records.

One `pulumi up` of the local stack (the OpenShift side on KWOK, Satori over SSH with LSF and
with Slurm), then `infra.compare.cli.compare` as scripts/compare runs it; the report's
lifecycle times must agree within 1 s with what the API server (pods, Jobs) and the
schedulers (`bhist -l`, `scontrol show job`: other commands than the collector's) say.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from infra.compare import cli
from infra.localenv import kube, satori
from infra.localenv.layout import Layout
from tests.e2e.pulumi_cli import PulumiProject, local_openshift

pytestmark = pytest.mark.e2e
STACK = "local"
HPC = ("satori", "satori-slurm")
TOLERANCE_S = 1.0


def ssh(layout: Layout, command: str) -> str:
    argv = satori.ssh_client_argv(satori.status(layout)["ssh"], command)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, f"{command}: {proc.stdout}{proc.stderr}"
    return proc.stdout


def epoch(text: str, fmt: str) -> float:
    return dt.datetime.strptime(text, fmt).replace(tzinfo=dt.UTC).timestamp()


def rfc3339(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@pytest.fixture
def deployed(tmp_path: Path, kube_env: Layout, satori_env: Layout) -> Any:
    proj = PulumiProject.create(tmp_path)
    run = uuid.uuid4().hex[:6]
    ns, remote = f"atlas-cmp-{run}", f"atlas-cmp-{run}"
    info = satori.status(satori_env)["ssh"]
    config = proj.stack_config(STACK)
    config["atlas:openshift"] = local_openshift(config["atlas:openshift"], kube_env, ns)
    for name in HPC:
        config["atlas:hpc"][name] = {
            **config["atlas:hpc"][name],
            "port": info["port"],
            "known_hosts_file": info["known_hosts_file"],
            "private_key_file": info["key_file"],
            "remote_work_dir": remote,
        }
    proj.set_stack_config(STACK, config)
    proj.run("stack", "init", STACK)
    proj.run("up", "--yes", "--skip-preview", "-s", STACK)
    yield proj, proj.outputs(STACK), info
    proj.run("destroy", "--yes", "-s", STACK, check=False)
    proj.run("stack", "rm", "--yes", "-s", STACK, check=False)
    ssh(satori_env, f"rm -rf ~/{remote}")


def wait_until_finished(outputs: dict[str, Any], kube_env: Layout, satori_env: Layout) -> None:
    """`up` waits for the preparation steps only: let every training step finish first."""
    deadline = time.monotonic() + 300
    lsf_ids = " ".join(s["job_id"] for s in outputs["environments"]["satori"]["steps"])
    slurm_ids = ",".join(s["job_id"] for s in outputs["environments"]["satori-slurm"]["steps"])
    ns = outputs["environments"]["openshift"]["namespace"]
    while time.monotonic() < deadline:
        lsf = json.loads(ssh(satori_env, f"bjobs -a -o 'jobid stat' -json {lsf_ids}"))["RECORDS"]
        slurm = ssh(satori_env, f"squeue -h -t all -o '%T' -j {slurm_ids}").split()
        jobs = kube.api_get(kube_env, f"/apis/batch/v1/namespaces/{ns}/jobs")["items"]
        done_jobs = [
            j
            for j in jobs
            if (j["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "step"
            and j["status"].get("completionTime")
        ]
        if (
            all(r["STAT"] in ("DONE", "EXIT") for r in lsf)
            and all(s in ("COMPLETED", "FAILED") for s in slurm)
            and len(done_jobs) == len(outputs["environments"]["openshift"]["steps"])
        ):
            return
        time.sleep(2)
    pytest.fail("the training steps did not finish in 300 s")


def test_report_lifecycle_times_agree_with_the_schedulers_and_the_api(
    deployed: Any, kube_env: Layout, satori_env: Layout, tmp_path: Path
) -> None:
    _project, outputs, info = deployed
    wait_until_finished(outputs, kube_env, satori_env)
    access = cli.Access(
        kubeconfig=kube_env.kubeconfig,
        ssh_keys={n: Path(info["key_file"]) for n in HPC},
        known_hosts={n: Path(info["known_hosts_file"]) for n in HPC},
    )
    _report, written = cli.compare(outputs, tmp_path / "report", access)
    data = json.loads(written.json.read_text())
    envs = {e["name"]: e for e in data["environments"]}
    assert set(envs) == {"openshift", *HPC}
    assert data["comparability"]["comparable"], data["comparability"]
    checked = 0

    def near(report_value: dict[str, Any], truth: float, what: str) -> None:
        nonlocal checked
        assert report_value["value"] is not None, f"{what}: {report_value['note']}"
        assert abs(report_value["value"] - truth) <= TOLERANCE_S, f"{what}: report {report_value}, record {truth}"
        checked += 1

    # LSF: bhist -l's event log (the collector read bjobs).
    history = ssh(
        satori_env, "TZ=UTC bhist -l " + " ".join(s["job_id"] for s in outputs["environments"]["satori"]["steps"])
    )
    year = dt.datetime.now(dt.UTC).year
    for step in envs["satori"]["steps"]:
        block = re.search(rf"Job <{step['job']}>.*?(?=\nJob <|\Z)", history, re.S)
        assert block, step["job"]
        events = {
            m[2].split()[0]: epoch(f"{year} {m[1]}", "%Y %b %d %H:%M:%S")
            for m in re.findall(r"^(\w{3}) (\w{3}\s+\d+ \d{2}:\d{2}:\d{2}): (\w+[^;,.]*)", block.group(0), re.M)
        }
        near(step["requested_at"], events["Submitted"], f"lsf {step['step']} submitted")
        near(step["started_at"], events["Starting"], f"lsf {step['step']} started")
        near(step["finished_at"], events["Done"], f"lsf {step['step']} finished")
    # Slurm: scontrol show job (the collector read squeue --json).
    for step in envs["satori-slurm"]["steps"]:
        text = ssh(satori_env, f"TZ=UTC scontrol show job {step['job']}")
        field = {k: v for k, v in re.findall(r"(\w+)=(\S+)", text)}
        fmt = "%Y-%m-%dT%H:%M:%S"
        near(step["requested_at"], epoch(field["SubmitTime"], fmt), f"slurm {step['step']} submitted")
        near(step["started_at"], epoch(field["StartTime"], fmt), f"slurm {step['step']} started")
        near(step["finished_at"], epoch(field["EndTime"], fmt), f"slurm {step['step']} finished")
    # Kubernetes: each step's Job and pod, read here straight from the API.
    ns = outputs["environments"]["openshift"]["namespace"]
    for step in envs["openshift"]["steps"]:
        job = kube.api_get(kube_env, f"/apis/batch/v1/namespaces/{ns}/jobs/{step['job']}")
        pods = kube.api_get(kube_env, f"/api/v1/namespaces/{ns}/pods?labelSelector=job-name={step['job']}")["items"]
        terminated = pods[-1]["status"]["containerStatuses"][0]["state"]["terminated"]
        near(step["requested_at"], rfc3339(job["metadata"]["creationTimestamp"]), f"kube {step['step']} created")
        near(step["started_at"], rfc3339(terminated["startedAt"]), f"kube {step['step']} started")
        near(step["finished_at"], rfc3339(terminated["finishedAt"]), f"kube {step['step']} finished")
        assert not step["requested_at"]["simulated"], "the steps ran on the real node, not KWOK's"
    assert checked == 27
    page = written.html.read_text()
    assert page.count("data:image/png;base64,") == 6
    markdown = written.markdown.read_text()
    # The OpenShift side ran in containers on the local node: measured, and labelled for what it is.
    assert "local node: kubelet, containerd, runc; mock GPUs" in markdown
    openshift = envs["openshift"]
    assert openshift["provenance"] == "local node, mock GPUs"
    assert openshift["performance"]["images_per_s"]["value"] > 0
    assert openshift["performance"]["cpu_tree_mean"]["value"] > 0
    assert openshift["performance"]["gpu_utilization_mean"]["value"] is None
    assert "mock GPU" in openshift["performance"]["gpu_utilization_mean"]["note"]

