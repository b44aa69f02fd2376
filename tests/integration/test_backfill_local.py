"""Backfill that yields, on the local environment.

Kubernetes: backfill pods fill every free GPU of the KWOK nodes at a low PriorityClass; a real
GPU Job arrives; the cluster's own kube-scheduler preempts a backfill pod, the Job's pod runs
and completes, and the Deployment's replacement pod waits, then runs again once the GPU is free.

Slurm: one-GPU backfill jobs fill the local Slurm's GPUs in the preemptible partition; a real
job in `normal` preempts one, Slurm requeues it (its restart count goes up), the real job runs,
and the backfill job runs again afterwards.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from infra.hpc import ssh
from infra.hpc.registry import scheduler_for
from infra.hpc.scheduler import BACKFILL_QUEUE
from infra.monitor.kube import KubeClient
from infra.nodes import backfill, backfill_apply
from localenv import kube, kwok, satori
from localenv.layout import Layout
from tests.support import wait_until

pytestmark = pytest.mark.integration

GPU = "nvidia.com/gpu"
Runner = Callable[[str], ssh.RemoteResult]
# On KWOK's simulated GPU nodes, the fleet this test needs (the real node has only four GPUs).
WORK = backfill.BackfillWork(
    workload="h10test", argv=("sleep", "900"), image="busybox", cpus=1, memory_mib=256,
    node_selector=tuple(kwok.SIMULATED_PLACEMENT["nodeSelector"].items()),
    tolerations=tuple(tuple(t.items()) for t in kwok.SIMULATED_PLACEMENT["tolerations"]),
)


# --- Kubernetes ----------------------------------------------------------------------------------


def free_gpus(layout: Layout) -> int:
    """Free GPUs of the simulated nodes."""
    nodes = [n for n in kube.api_get(layout, "/api/v1/nodes")["items"] if n["metadata"]["labels"].get("type") == "kwok"]
    names = {n["metadata"]["name"] for n in nodes}
    pods = kube.api_get(layout, "/api/v1/pods")["items"]
    total = sum(int(n["status"]["allocatable"].get(GPU, 0)) for n in nodes)
    held = sum(
        int(c.get("resources", {}).get("limits", {}).get(GPU, 0))
        for p in pods
        if p["spec"].get("nodeName") in names and p["status"].get("phase") not in ("Succeeded", "Failed")
        for c in p["spec"]["containers"]
    )
    return total - held


def backfill_pods(layout: Layout) -> list[dict[str, Any]]:
    items = kube.api_get(layout, f"/api/v1/namespaces/{backfill.NAMESPACE}/pods")["items"]
    return [p for p in items if not p["metadata"].get("deletionTimestamp")]


@pytest.fixture
def real_namespace(kube_env: Layout) -> Iterator[str]:
    name = f"h10-real-{uuid.uuid4().hex[:6]}"
    kube.kubectl(kube_env, "create", "namespace", name)
    yield name
    kube.kubectl(kube_env, "delete", "namespace", name, "--wait=false")


def test_backfill_pods_are_preempted_when_a_gpu_job_arrives_and_the_job_runs(
    kube_env: Layout, real_namespace: str
) -> None:
    client = KubeClient(kube_env.kubeconfig)
    slots = free_gpus(kube_env)
    assert slots >= 2, "the local cluster has no free GPU to backfill"
    try:
        applied = backfill_apply.apply_kubernetes(client, WORK, slots)
        assert applied == ["PriorityClass/atlas-backfill", "Namespace/atlas-backfill", "Deployment/backfill-h10test"]
        wait_until(
            lambda: sum(p["status"].get("phase") == "Running" for p in backfill_pods(kube_env)) == slots,
            f"{slots} backfill pods running",
        )
        assert free_gpus(kube_env) == 0
        pod = backfill_pods(kube_env)[0]
        assert pod["spec"]["priority"] == backfill.PRIORITY_VALUE and pod["spec"]["preemptionPolicy"] == "Never"
        first = {p["metadata"]["uid"] for p in backfill_pods(kube_env)}

        job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "real-train", "namespace": real_namespace},
            "spec": {
                "backoffLimit": 0,
                "template": {
                    "metadata": {"annotations": {"atlas.dev/kwok-run-seconds": "4"}},
                    "spec": kwok.on_simulated_nodes({
                        "restartPolicy": "Never",
                        "tolerations": [{"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
                        "containers": [{"name": "main", "image": "busybox", "resources": {"limits": {GPU: "1"}}}],
                    }),
                },
            },
        }
        kube.kubectl(kube_env, "apply", "-f", "-", stdin=json.dumps(job))

        def job_pod() -> dict[str, Any] | None:
            pods = kube.api_get(kube_env, f"/api/v1/namespaces/{real_namespace}/pods")["items"]
            return pods[0] if pods and pods[0]["spec"].get("nodeName") else None

        placed = wait_until(job_pod, "the real job's pod to be placed on a GPU node", 60)
        assert placed["spec"]["priority"] == 0  # a real pod: default priority, above backfill

        # The namespace outlives a run (and events live an hour), so only this run's pods count:
        # events are matched on the uid of the pods that were running when the job arrived.
        def preemptions() -> list[str]:
            events = kube.api_get(kube_env, f"/api/v1/namespaces/{backfill.NAMESPACE}/events")["items"]
            return [
                e["involvedObject"]["name"]
                for e in events
                if e["reason"] == "Preempted" and e["involvedObject"].get("uid") in first
            ]

        victims = wait_until(preemptions, "a Preempted event for one of this run's backfill pods", 30)
        assert len(set(victims)) == 1, victims  # one GPU needed, one backfill pod gives way
        # The Deployment replaced the preempted pod; the replacement waits for a free GPU.
        waiting = wait_until(
            lambda: [p for p in backfill_pods(kube_env) if not p["spec"].get("nodeName")],
            "a pending replacement backfill pod",
            30,
        )
        assert waiting[0]["metadata"]["uid"] not in first

        def job_complete() -> bool:
            status = kube.api_get(kube_env, f"/apis/batch/v1/namespaces/{real_namespace}/jobs/real-train")["status"]
            return bool(status.get("succeeded"))

        wait_until(job_complete, "the real job to complete", 60)
        # Nothing lost: backfill is back on every GPU once the real job is done.
        wait_until(
            lambda: sum(p["status"].get("phase") == "Running" for p in backfill_pods(kube_env)) == slots,
            "backfill to fill the freed GPU again",
            60,
        )
    finally:
        assert backfill_apply.stop_kubernetes(client, WORK.workload)
        wait_until(lambda: not backfill_pods(kube_env), "backfill pods to go", 60)


# --- Slurm ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def login(satori_env: Layout) -> Iterator[Runner]:
    info = satori.status(satori_env)["ssh"]
    endpoint = ssh.SshEndpoint(
        host=info["host"],
        port=info["port"],
        user=info["user"],
        known_hosts=open(info["known_hosts_file"]).read(),  # noqa: SIM115 (read once)
        known_hosts_source=f"file {info['known_hosts_file']}",
        private_key_file=info["key_file"],
    )
    connection = ssh.connection(endpoint)

    def run(command: str) -> ssh.RemoteResult:
        return ssh.run_remote(connection, command, check=False, safe_to_retry=True, timeout=120)

    yield run
    ssh.close_all()


def job_fields(run: Runner, job_id: str) -> dict[str, str]:
    text = run(f"scontrol -o show job {job_id}").stdout
    return dict(re.findall(r"(\w+)=(\S*)", text))


def test_the_slurm_backfill_job_is_preempted_requeued_and_runs_again(login: Runner) -> None:
    run = login
    node = run("scontrol -d show node -o").stdout
    total = re.search(r"Gres=gpu(?::\w+)?:(\d+)", node)
    held = re.search(r"GresUsed=gpu(?::\w+)?:(\d+)", node)
    assert total, node
    free = int(total.group(1)) - (int(held.group(1)) if held else 0)
    assert free >= 1, f"no free GPU on the local Slurm: {node}"
    slurm = scheduler_for("slurm")
    scripts = backfill.backfill_scripts(slurm, WORK, "satori-slurm", "h10-backfill", free)
    ids = backfill_apply.submit_backfill(slurm, run, "h10-backfill", scripts)
    real = ""
    try:
        assert len(ids) == free
        wait_until(lambda: all(job_fields(run, i).get("JobState") == "RUNNING" for i in ids), "backfill running", 60)
        assert {job_fields(run, i)["Partition"] for i in ids} == {BACKFILL_QUEUE}
        submitted = run(
            "mkdir -p ~/h10-backfill && cd ~/h10-backfill && "
            "sbatch --parsable -p normal --gres=gpu:1 -t 2 --wrap 'sleep 4'"
        )
        assert submitted.exit_code == 0, submitted
        real = submitted.stdout.strip().split(";")[0]

        def preempted() -> list[str]:
            return [i for i in ids if int(job_fields(run, i).get("Restarts", "0")) >= 1]

        victims = wait_until(preempted, "a backfill job to be preempted and requeued", 60)
        assert len(victims) == 1  # one GPU needed, one backfill job gives way
        real_state = wait_until(
            lambda: job_fields(run, real).get("JobState") in ("RUNNING", "COMPLETED") and job_fields(run, real),
            "the real job to run",
            60,
        )
        assert real_state["Partition"] == "normal"
        wait_until(lambda: job_fields(run, real).get("JobState") == "COMPLETED", "the real job to complete", 60)
        # Requeued, not lost: the preempted job starts again once its GPU is free.
        wait_until(
            lambda: job_fields(run, victims[0]).get("JobState") == "RUNNING",
            "the requeued backfill job to run again",
            180,
            pause=2.0,
        )
        listed = {j.job_id: j for j in backfill_apply.backfill_jobs(slurm, run)}
        assert set(ids) <= set(listed)
        # Stopping cancels every copy (all unfinished now) and leaves none behind. (The check used to
        # sit in `finally` as `... or not cancelled`, which passed when nothing was cancelled.)
        assert set(ids) <= set(backfill_apply.stop_backfill(slurm, run))
        wait_until(lambda: not backfill_apply.backfill_jobs(slurm, run, finished=False), "backfill jobs to end", 30)
    finally:
        backfill_apply.stop_backfill(slurm, run)  # after a failure above; nothing is left to cancel otherwise
        if real:
            run(f"scancel {real}")
