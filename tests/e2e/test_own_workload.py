"""Bring your own workflow, end to end: the shipped shell pipeline (workloads/wordfreq) copied into
a folder outside Atlas's workloads/, named by path in `atlas:workload`, run by one `pulumi up -s
local` on every local side (the OpenShift side's Jobs in containers of Atlas's runtime image on
the local node; Satori over SSH with LSF and with Slurm), then compared by `scripts/compare`.

Checked through the systems themselves: the Jobs and the source ConfigMap through the Kubernetes
API, the results through SSH on the login node, the report's figures against the files the steps
wrote. The workload writes no BigGAN-style log: the report must say so, and show the workload's
own throughput line instead.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.cli import compare as cli
from infra.compare.records import NO_TRAINING_LOG
from infra.kinds import read_stack_outputs
from infra.workload.load import folder_files, load_workload
from localenv import kube
from localenv.layout import Layout
from tests.e2e.pulumi_cli import PulumiProject, local_access, local_hpc_sections, local_openshift
from tests.e2e.pulumi_cli import satori_ssh as ssh
from tests.support import REPO_ROOT, wait_until

pytestmark = pytest.mark.e2e
STACK = "local"
HPC = ("satori", "satori-slurm")



@pytest.fixture
def own_workload(tmp_path: Path) -> Path:
    """The researcher's own repository beside Atlas: the definition and its files, nothing else."""
    folder = tmp_path / "my-research" / "wordfreq"
    shutil.copytree(REPO_ROOT / "workloads" / "wordfreq", folder)
    return folder


@pytest.fixture
def deployed(tmp_path: Path, own_workload: Path, kube_env: Layout, satori_env: Layout) -> Any:
    proj = PulumiProject.create(tmp_path)
    run = uuid.uuid4().hex[:6]
    ns, remote = f"atlas-own-{run}", f"atlas-own-{run}"
    config = proj.stack_config(STACK)
    config["atlas:workload"] = str(own_workload)
    config["atlas:openshift"] = local_openshift(config["atlas:openshift"], kube_env, ns)
    local_hpc_sections(config, satori_env, HPC, remote)
    proj.set_stack_config(STACK, config)
    proj.run("stack", "init", STACK)
    yield proj, ns
    proj.run("destroy", "--yes", "-s", STACK, check=False)
    proj.run("stack", "rm", "--yes", "-s", STACK, check=False)
    ssh(satori_env, f"rm -rf ~/{remote}")


def states_everywhere(outputs: dict[str, Any], kube_env: Layout, satori_env: Layout) -> dict[str, Any]:
    """Each side's step states as its own system reports them (what a timed-out wait shows)."""
    envs = outputs["environments"]
    lsf_ids = " ".join(s["job_id"] for s in envs["satori"]["steps"])
    slurm_ids = ",".join(s["job_id"] for s in envs["satori-slurm"]["steps"])
    ns = envs["openshift"]["namespace"]
    jobs = kube.api_get(kube_env, f"/apis/batch/v1/namespaces/{ns}/jobs?labelSelector=atlas.dev/workload=wordfreq")
    return {
        "satori": json.loads(ssh(satori_env, f"bjobs -a -o 'jobid stat' -json {lsf_ids}"))["RECORDS"],
        "satori-slurm": ssh(satori_env, f"squeue -h -t all -o '%i|%T|%r' -j {slurm_ids}").split(),
        "openshift": {j["metadata"]["name"]: j["status"] for j in jobs["items"]},
    }


def finished_everywhere(outputs: dict[str, Any], kube_env: Layout, satori_env: Layout) -> bool:
    envs = outputs["environments"]
    lsf_ids = " ".join(s["job_id"] for s in envs["satori"]["steps"])
    slurm_ids = ",".join(s["job_id"] for s in envs["satori-slurm"]["steps"])
    lsf = json.loads(ssh(satori_env, f"bjobs -a -o 'jobid stat' -json {lsf_ids}"))["RECORDS"]
    slurm = ssh(satori_env, f"squeue -h -t all -o '%T' -j {slurm_ids}").split()
    ns = envs["openshift"]["namespace"]
    jobs = kube.api_get(kube_env, f"/apis/batch/v1/namespaces/{ns}/jobs?labelSelector=atlas.dev/workload=wordfreq")
    # The steps' own Jobs by name: the workload's label is on its data-staging Job too.
    done = {j["metadata"]["name"] for j in jobs["items"] if j["status"].get("succeeded") or j["status"].get("failed")}
    step_jobs = {s["job"] for s in envs["openshift"]["steps"]}
    return (
        all(r["STAT"] in ("DONE", "EXIT") for r in lsf)
        and all(s in ("COMPLETED", "FAILED") for s in slurm)
        and step_jobs <= done
    )


def test_a_workload_outside_atlas_runs_on_every_side_and_is_compared(
    deployed: Any, own_workload: Path, kube_env: Layout, satori_env: Layout, tmp_path: Path
) -> None:
    proj, ns = deployed
    workload = load_workload(own_workload / "workload.yaml")
    steps = [s.name for s in workload.steps]

    preview = proj.run("preview", "--diff", "-s", STACK).stdout
    # Each side's own form of the steps: the job scripts, and the source ConfigMap beside the Jobs.
    assert "sh steps/count.sh --in data/corpus.txt" in preview
    assert "kubernetes:core/v1:ConfigMap" in preview

    proj.run("up", "--yes", "--skip-preview", "-s", STACK)
    outputs = proj.outputs(STACK)
    atlas = outputs["atlas"]
    assert atlas["workload"] == "wordfreq" and atlas["definition"] == str(own_workload / "workload.yaml")
    assert atlas["report"]["step"] == "count" and atlas["report"]["training_log"] is False
    envs = outputs["environments"]
    assert set(envs) == {"openshift", *HPC}
    for side in envs.values():
        assert [s["name"] for s in side["steps"]] == steps

    # Kubernetes: the folder travelled in one ConfigMap holding every file, byte for byte.
    selector = "app.kubernetes.io/component=source"
    maps = kube.api_get(kube_env, f"/api/v1/namespaces/{ns}/configmaps?labelSelector={selector}")
    (source_map,) = maps["items"]
    staged = {f.path: f.source.read_bytes() for f in folder_files(workload)}
    job = kube.api_get(kube_env, f"/apis/batch/v1/namespaces/{ns}/jobs/{envs['openshift']['steps'][0]['job']}")
    (volume,) = [v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == "source"]
    items = volume["configMap"]["items"]
    carried = {item["path"]: base64.b64decode(source_map["binaryData"][item["key"]]) for item in items}
    assert carried == staged

    wait_until(lambda: finished_everywhere(outputs, kube_env, satori_env), "every step on every side to finish", 300,
               pause=2, detail=lambda: states_everywhere(outputs, kube_env, satori_env))

    # HPC: the pipeline ran in each run folder; the top words agree with the counts they came from.
    for name in HPC:
        run_dir = envs[name]["run_dir"]
        counts = ssh(satori_env, f"cat {run_dir}/results/counts.tsv")
        top = ssh(satori_env, f"cat {run_dir}/results/top.tsv")
        assert top.splitlines() == counts.splitlines()[:20], name

    access = local_access(kube_env, satori_env, HPC)
    _, written = cli.compare(read_stack_outputs(outputs), tmp_path / "report", access)
    data = json.loads(written.json.read_text())
    reported = {e["name"]: e for e in data["environments"]}
    assert set(reported) == set(envs)
    for name, env in reported.items():
        performance = env["performance"]
        assert performance["measured_step"] == "count", name
        # No BigGAN log: said, not zero.
        assert performance["iterations"]["value"] is None and performance["iterations"]["note"] == NO_TRAINING_LOG
        assert performance["images_per_s"]["note"] == NO_TRAINING_LOG, name
        # The workload's own rate, as its count step logged it, read on that side.
        rate = performance["workload_throughput"]
        assert rate["unit"] == "words/s" and rate["value"] > 0, (name, rate)
        logged = re.search(r"rate ([0-9.]+) words/s", rate["note"])
        assert logged is not None and float(logged.group(1)) == rate["value"], rate
        assert sorted(s["step"] for s in env["steps"]) == sorted(steps), name
    # The report's tables name the measured step and the rate.
    markdown = written.markdown.read_text()
    assert "the workload's own throughput (report.throughput)" in markdown
    assert yaml.safe_load((own_workload / "workload.yaml").read_text())["report"]["step"] == "count"
