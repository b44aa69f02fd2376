"""`atlas:backfill` with the real CLI: `pulumi up` declares backfill beside the run (a PriorityClass,
a namespace and a Deployment on the local cluster; preemptible batch jobs on the local Slurm),
and `pulumi destroy` removes all of it. Checked through the Kubernetes API and over SSH."""

from __future__ import annotations

import re
import urllib.error
import uuid
from typing import Any

import pytest

from localenv import kube, satori
from localenv.layout import Layout
from tests.e2e.pulumi_cli import PulumiProject, local_openshift
from tests.e2e.pulumi_cli import satori_ssh as ssh
from tests.support import wait_until

pytestmark = pytest.mark.e2e
STACK = "local"


def api(layout: Layout, path: str) -> Any:
    try:
        return kube.api_get(layout, path)
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return None
        raise



@pytest.fixture
def stack(tmp_path, kube_env, satori_env):
    proj = PulumiProject.create(tmp_path)
    run = uuid.uuid4().hex[:6]
    info = satori.status(satori_env)["ssh"]
    config = proj.stack_config(STACK)
    config["atlas:openshift"] = local_openshift(config["atlas:openshift"], kube_env, f"atlas-e2e-{run}")
    config["atlas:hpc"]["satori"] = {**config["atlas:hpc"]["satori"], "enabled": False}
    config["atlas:hpc"]["satori-slurm"] = {
        **config["atlas:hpc"]["satori-slurm"],
        "port": info["port"],
        "known_hosts_file": info["known_hosts_file"],
        "private_key_file": info["key_file"],
        "remote_work_dir": f"atlas-e2e-{run}",
    }
    config["atlas:backfill"] = {"gpus": 1, "namespace": f"atlas-backfill-{run}"}
    proj.set_stack_config(STACK, config)
    proj.run("stack", "init", STACK)
    yield proj, run
    proj.run("destroy", "--yes", "-s", STACK, check=False)
    proj.run("stack", "rm", "--yes", "-s", STACK, check=False)
    ssh(satori_env, f"scancel -p backfill -u atlas; rm -rf ~/atlas-e2e-{run}")


def test_backfill_goes_up_with_the_stack_and_destroy_removes_it(stack, kube_env, satori_env):
    proj, run = stack
    preview = proj.run("preview", "--diff", "-s", STACK).stdout
    assert "atlas:nodes:Backfill" in preview and "#SBATCH --partition=backfill" in preview

    proj.run("up", "--yes", "--skip-preview", "-s", STACK)
    outputs = proj.outputs(STACK)["backfill"]
    k8s = outputs["kubernetes"]
    assert k8s["namespace"] == f"atlas-backfill-{run}" and k8s["priority"] == -10
    priority = api(kube_env, f"/apis/scheduling.k8s.io/v1/priorityclasses/{k8s['priority_class']}")
    assert priority["value"] == -10 and priority["preemptionPolicy"] == "Never"
    pods = wait_until(
        lambda: [
            p
            for p in api(kube_env, f"/api/v1/namespaces/{k8s['namespace']}/pods")["items"]
            if p["status"].get("phase") == "Running"
        ],
        "the backfill pod to run",
    )
    assert pods[0]["spec"]["priority"] == -10 and pods[0]["spec"]["priorityClassName"] == k8s["priority_class"]
    (job_id,) = outputs["slurm"]["satori-slurm"]
    shown = ssh(satori_env, f"scontrol -o show job {job_id}")
    assert re.search(r"Partition=backfill\b", shown), shown
    assert re.search(r"JobName=atlas-backfill-0-", shown), shown

    proj.run("destroy", "--yes", "-s", STACK)
    wait_until(lambda: api(kube_env, f"/api/v1/namespaces/{k8s['namespace']}") is None, "the namespace to go", 120)
    assert api(kube_env, f"/apis/scheduling.k8s.io/v1/priorityclasses/{k8s['priority_class']}") is None
    state = ssh(satori_env, f"squeue -h -t all -j {job_id} -o %T").strip()
    assert state in ("CANCELLED", "COMPLETED", "FAILED", ""), state
