"""The comparison report of a real `local` run, checked against the environments' own records.

One `pulumi up` of the local stack (the OpenShift side's steps in containers on the local node,
Satori over SSH with LSF and with Slurm), then `infra.cli.compare.compare` as scripts/compare
runs it. The report's lifecycle times are checked against records the collectors never read:

- Slurm (and the LSF stand-in, whose jobs are Slurm's): slurmctld's job-completion log
  (jobcomp/filetxt), written once per job at its end; the collector reads `squeue -O`.
  Both hold whole seconds of the same clock: they must be equal.
- Kubernetes: containerd's own record of each step's container (its CRI status checkpoint,
  nanoseconds); the collector reads the pod status the kubelet copied from it into the API
  server, whose RFC 3339 times drop the fraction: the report must be containerd's time cut
  to the second (0 <= containerd - report < 1 s). Only the Job's creation has no record
  outside the API server: checked against it, for equality.
- LSF: `bhist -l`'s event log too (the collector read `bjobs`), within 1 s as before. On the
  local stand-in both come from Slurm's squeue, so that check is not independent; the
  jobcomp one is.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
import subprocess
import tomllib
import uuid
from pathlib import Path
from typing import Any

import pytest

from infra.cli import compare as cli
from infra.compare import report_model
from infra.compare.charts import CHARTS
from infra.compare.render import report_tables
from infra.kinds import read_stack_outputs
from infra.workload.load import load_workload
from localenv import kube, node, satori
from localenv.layout import Layout
from tests import references
from tests.e2e.pulumi_cli import PulumiProject, local_access, local_hpc_sections, local_openshift
from tests.e2e.pulumi_cli import satori_ssh as ssh
from tests.support import wait_until

pytestmark = pytest.mark.e2e
STACK = "local"
HPC = ("satori", "satori-slurm")
# bhist -l prints whole seconds; the report's LSF times come from other whole seconds (bjobs).
BHIST_TOLERANCE_S = 1.0
# The lifecycle times checked for every step of the workload, on every side.
LIFECYCLE_TIMES = ("requested_at", "started_at", "finished_at")
# How many independent records each side's times are checked against: LSF's against bhist -l and
# the jobcomp log, Slurm's against the jobcomp log, Kubernetes' against containerd (the creation
# against the API server).
RECORDS_PER_SIDE = {"satori": 2, "satori-slurm": 1, "openshift": 1}



def epoch(text: str, fmt: str) -> float:
    return dt.datetime.strptime(text, fmt).replace(tzinfo=dt.UTC).timestamp()


def rfc3339(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


@pytest.fixture
def deployed(tmp_path: Path, kube_env: Layout, satori_env: Layout) -> Any:
    proj = PulumiProject.create(tmp_path)
    run = uuid.uuid4().hex[:6]
    ns, remote = f"atlas-cmp-{run}", f"atlas-cmp-{run}"
    config = proj.stack_config(STACK)
    config["atlas:openshift"] = local_openshift(config["atlas:openshift"], kube_env, ns)
    local_hpc_sections(config, satori_env, HPC, remote)
    proj.set_stack_config(STACK, config)
    proj.run("stack", "init", STACK)
    proj.run("up", "--yes", "--skip-preview", "-s", STACK)
    yield proj, proj.outputs(STACK)
    proj.run("destroy", "--yes", "-s", STACK, check=False)
    proj.run("stack", "rm", "--yes", "-s", STACK, check=False)
    ssh(satori_env, f"rm -rf ~/{remote}")


def wait_until_finished(outputs: dict[str, Any], kube_env: Layout, satori_env: Layout) -> None:
    """`up` waits for the preparation steps only: let every training step finish first."""
    lsf_ids = " ".join(s["job_id"] for s in outputs["environments"]["satori"]["steps"])
    slurm_ids = ",".join(s["job_id"] for s in outputs["environments"]["satori-slurm"]["steps"])
    ns = outputs["environments"]["openshift"]["namespace"]

    seen: dict[str, Any] = {}

    def finished() -> bool:
        lsf = json.loads(ssh(satori_env, f"bjobs -a -o 'jobid stat' -json {lsf_ids}"))["RECORDS"]
        slurm = ssh(satori_env, f"squeue -h -t all -o '%i %T %r' -j {slurm_ids}").splitlines()
        jobs = kube.api_get(kube_env, f"/apis/batch/v1/namespaces/{ns}/jobs")["items"]
        steps = [j for j in jobs if (j["metadata"].get("labels") or {}).get("app.kubernetes.io/component") == "step"]
        seen.update(
            lsf={r["JOBID"]: r.get("STAT") for r in lsf},
            slurm=slurm,
            kube={j["metadata"]["name"]: j["status"] for j in steps},
        )
        return (
            all(r["STAT"] in ("DONE", "EXIT") for r in lsf)
            and all(line.split()[1] in ("COMPLETED", "FAILED") for line in slurm)
            and sum(bool(j["status"].get("completionTime")) for j in steps)
            == len(outputs["environments"]["openshift"]["steps"])
        )

    # Each side's steps in turn, on a 2-core machine: minutes, more while anything else runs.
    wait_until(finished, "every training step to finish", 480, pause=2, detail=lambda: seen)


def test_report_lifecycle_times_agree_with_the_schedulers_and_the_api(
    deployed: Any, kube_env: Layout, satori_env: Layout, tmp_path: Path
) -> None:
    project, outputs = deployed
    workload = load_workload(project.root / "workloads" / outputs["atlas"]["workload"] / "workload.yaml")
    wait_until_finished(outputs, kube_env, satori_env)
    access = local_access(kube_env, satori_env, HPC)
    report, written = cli.compare(read_stack_outputs(outputs), tmp_path / "report", access)
    data = json.loads(written.json.read_text())
    envs = {e["name"]: e for e in data["environments"]}
    assert set(envs) == {"openshift", *HPC} == set(RECORDS_PER_SIDE)
    # Every step of the workload is in the report, on every side (the count below relies on it).
    for name, env in envs.items():
        assert sorted(s["step"] for s in env["steps"]) == sorted(s.name for s in workload.steps), name
    assert data["comparability"]["comparable"], data["comparability"]
    # What ran where: one digest on every side (the build's), the node's containerd on the
    # OpenShift side, Apptainer on both HPC sides, and their one conversion shown once.
    ran = data["what_ran_where"]
    digest = outputs["environments"]["openshift"]["image"].split("@", 1)[1]
    rows = {r["environment"]: r for r in ran["rows"]}
    assert {name: row["digest"] for name, row in rows.items()} == dict.fromkeys(("openshift", *HPC), digest)
    assert ran["same_image"] is True, ran["digests"]
    assert rows["openshift"]["runtime"].startswith("containerd"), rows["openshift"]
    assert all(rows[name]["runtime"].lower().startswith("apptainer 1.4.0") for name in HPC), rows
    assert [c["digest"] for c in ran["conversions"]] == [digest]
    assert ran["conversions"][0]["seconds"]["value"] > 0, ran["conversions"]
    assert sorted(ran["conversions"][0]["environments"]) == sorted(HPC)
    checked = 0

    def near(report_value: dict[str, Any], truth: float | None, what: str, tolerance: float) -> None:
        nonlocal checked
        assert report_value["value"] is not None, f"{what}: {report_value['note']}"
        assert truth is not None, f"{what}: the reference has no such time"
        assert abs(report_value["value"] - truth) <= tolerance, f"{what}: report {report_value}, record {truth}"
        checked += 1

    def cut_to_second(report_value: dict[str, Any], truth: float | None, what: str) -> None:
        nonlocal checked
        assert report_value["value"] is not None, f"{what}: {report_value['note']}"
        assert truth is not None, f"{what}: containerd has no such time"
        assert report_value["value"] == math.floor(truth), f"{what}: report {report_value}, containerd {truth:.9f}"
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
        near(step["requested_at"], events["Submitted"], f"lsf {step['step']} submitted", BHIST_TOLERANCE_S)
        near(step["started_at"], events["Starting"], f"lsf {step['step']} started", BHIST_TOLERANCE_S)
        near(step["finished_at"], events["Done"], f"lsf {step['step']} finished", BHIST_TOLERANCE_S)
    # Slurm, and the LSF stand-in's jobs (Slurm jobs under LSF's commands): the job-completion
    # log (the collector read squeue -O). Its times are in slurmctld's local zone: the
    # daemon's own TZ, else the machine's.
    slurm = satori.status(satori_env)
    environ = Path(f"/proc/{slurm['daemons']['slurmctld']['pid']}/environ").read_bytes()
    zone = references.process_zone(references.parse_environ(environ))
    jobcomp = references.parse_jobcomp_log(Path(slurm["slurm"]["jobcomp_log"]).read_text(), zone)
    for env_name, label in (("satori-slurm", "slurm"), ("satori", "lsf stand-in")):
        for step in envs[env_name]["steps"]:
            record = jobcomp.get(int(step["job"]))
            assert record is not None, (
                f"{label} {step['step']}: job {step['job']} not in {slurm['slurm']['jobcomp_log']}"
            )
            # Job ids restart only with a new slurmctld state: this record is this run's job.
            assert record.name.startswith(f"atlas-{step['step']}-"), record
            assert record.state == "COMPLETED", record
            # The collector falls back to `sacct -c` (this very log) for jobs squeue has forgotten:
            # then the check would compare the log with itself. Here the jobs are minutes old.
            assert "sacct" not in step["finished_at"]["source"], step["finished_at"]["source"]
            near(step["requested_at"], record.submitted_at, f"{label} {step['step']} submitted (jobcomp)", 0.0)
            near(step["started_at"], record.started_at, f"{label} {step['step']} started (jobcomp)", 0.0)
            near(step["finished_at"], record.ended_at, f"{label} {step['step']} finished (jobcomp)", 0.0)
    # Kubernetes: each step container's start and exit from containerd (its CRI status file under
    # the root the node's containerd.toml gives it), the container found by the id in the step's
    # last pod and confirmed by containerd's own labels (`ctr containers info`). The kubelet keeps
    # a Succeeded pod's container until the pod is deleted (the fixture's destroy, after this).
    config = tomllib.loads(node.NodePaths(kube_env).containerd_config.read_text())
    containerd_root = Path(config["root"])
    socket = config["plugins"]["io.containerd.server.v1.grpc"]["address"]
    ns = outputs["environments"]["openshift"]["namespace"]
    for step in envs["openshift"]["steps"]:
        job = kube.api_get(kube_env, f"/apis/batch/v1/namespaces/{ns}/jobs/{step['job']}")
        pods = kube.api_get(kube_env, f"/api/v1/namespaces/{ns}/pods?labelSelector=job-name={step['job']}")["items"]
        pod = max(pods, key=lambda p: p["metadata"]["creationTimestamp"])
        container = pod["status"]["containerStatuses"][0]
        ident = references.container_id(container["containerID"])
        info = subprocess.run(
            [str(kube.bin_dir() / "ctr"), "--address", socket, "-n", "k8s.io", "containers", "info", ident],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        assert info.returncode == 0, f"kube {step['step']}: containerd has no container {ident}: {info.stderr}"
        labels = json.loads(info.stdout)["Labels"]
        pod_keys = ("io.kubernetes.pod.namespace", "io.kubernetes.pod.name", "io.kubernetes.container.name")
        assert tuple(labels[k] for k in pod_keys) == (ns, pod["metadata"]["name"], container["name"]), labels
        status = references.parse_cri_status(references.cri_status_path(containerd_root, ident).read_text())
        assert status.exit_code == 0, status
        near(step["requested_at"], rfc3339(job["metadata"]["creationTimestamp"]), f"kube {step['step']} created", 0.0)
        cut_to_second(step["started_at"], status.started_at, f"kube {step['step']} started (containerd)")
        cut_to_second(step["finished_at"], status.finished_at, f"kube {step['step']} finished (containerd)")
        assert not step["requested_at"]["simulated"], "the steps ran on the real node, not KWOK's"
    assert checked == len(workload.steps) * len(LIFECYCLE_TIMES) * sum(RECORDS_PER_SIDE.values())
    page = written.html.read_text()
    # Every chart infra.compare.charts draws, embedded once under the section that names it.
    shown = [name for section in report_tables(report) for name in section.charts]
    assert len(shown) == len(set(shown)) == len(CHARTS)
    assert page.count("data:image/png;base64,") == len(shown)
    markdown = written.markdown.read_text()
    # The OpenShift side ran in containers on the local node: measured, and labelled for what it is.
    assert "local node: kubelet, containerd, runc; mock GPUs" in markdown
    openshift = envs["openshift"]
    # Labels from facts (infra/provenance.py): what Atlas observed of each side, never "real".
    assert openshift["provenance"].startswith("local stand-in: Kubernetes API on loopback (https://127.0.0.1:")
    assert openshift["provenance"].endswith(
        "a node of Atlas's local environment (label atlas.dev/node-kind=kubelet); mock GPUs (node label "
        "atlas.dev/gpu-mock=true)"
    )
    hpc_gpus = {"satori": "mock GPUs (LSF gpu_model Mock_TeslaV100_SXM2_32GB)",
                "satori-slurm": "mock GPUs (Slurm GRES type mock_v100)"}  # fmt: skip
    for side, gpus in hpc_gpus.items():
        assert envs[side]["provenance"].startswith("local stand-in: ") and gpus in envs[side]["provenance"], side
        assert "login node on loopback (127.0.0.1)" in envs[side]["provenance"], side
        # Mock GPUs: their use is not read, their hours are not priced.
        assert envs[side]["performance"]["gpu_utilization_mean"]["note"] == report_model.MOCK_GPU, side
        assert envs[side]["economics"]["cost_per_run"]["value"] is None, side
        assert envs[side]["economics"]["cost_per_run"]["note"].startswith("not priced: the GPUs were mock"), side
        # The job itself was told (the local Slurm's TaskProlog): its sampler opened no GPU reader.
        start = json.loads((tmp_path / "report" / "raw" / side / "telemetry-train.jsonl").read_text().splitlines()[0])
        assert start["type"] == "start" and start["gpu_source"] == "mock", (side, start)
    assert openshift["performance"]["images_per_s"]["value"] > 0
    assert openshift["performance"]["cpu_tree_mean"]["value"] > 0
    assert openshift["performance"]["gpu_utilization_mean"]["value"] is None
    assert "mock GPU" in openshift["performance"]["gpu_utilization_mean"]["note"]
    # Each side's memory figure is its measured step's own cgroup's peak: the pod's on the node, the
    # Slurm job's on both HPC sides (the local Slurm's task/cgroup; the LSF stand-in's jobs are
    # Slurm's). Each of those cgroups is held to the step's request (the pod's limit, Slurm's
    # ConstrainRAMSpace), so its peak cannot pass it: a cgroup shared with slurmd or the node could.
    step = next(s for s in workload.steps if s.name == workload.measured_step)
    owners = {"openshift": "is Kubernetes pod ", "satori": "is Slurm job ", "satori-slurm": "is Slurm job "}
    for name, owner in owners.items():
        performance = envs[name]["performance"]
        basis, peak = performance["memory_peak_basis"], performance["memory_peak"]
        assert basis.startswith("the step's own memory cgroup's peak") and owner in basis, (name, basis)
        assert 0 < peak["value"] <= step.resources.memory_bytes, (name, peak)
