"""Starts and stops backfill: apply/delete on the Kubernetes API, sbatch/scancel on a Slurm login node.

What is applied or submitted is rendered by infra.nodes.backfill; every remote command goes
through infra.hpc.ssh.run_remote's runner.
"""

from __future__ import annotations

import shlex
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from infra.hpc.remote import RemoteResult
from infra.hpc.slurm import SlurmScheduler
from infra.kubeapi import KubeRequestError
from infra.monitor.kube import KubeClient
from infra.nodes.backfill import (
    JOBS_DIR,
    NAMESPACE,
    SLURM_PARTITION,
    BackfillError,
    BackfillWork,
    backfill_deployment,
    backfill_namespace,
    priority_class,
)

Runner = Callable[[str], RemoteResult]


def _object_path(obj: Mapping[str, Any]) -> str:
    kind, name = obj["kind"], urllib.parse.quote(obj["metadata"]["name"])
    namespace = urllib.parse.quote(str(obj["metadata"].get("namespace", "")))
    return {
        "PriorityClass": f"/apis/scheduling.k8s.io/v1/priorityclasses/{name}",
        "Namespace": f"/api/v1/namespaces/{name}",
        "Deployment": f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}",
    }[kind]


def apply_kubernetes(client: KubeClient, work: BackfillWork, replicas: int, namespace: str = NAMESPACE) -> list[str]:
    """Server-side apply of the PriorityClass, the namespace and the Deployment (idempotent)."""
    applied = []
    for obj in (priority_class(), backfill_namespace(namespace), backfill_deployment(work, replicas, namespace)):
        path = _object_path(obj) + "?fieldManager=atlas-nodes&force=true"
        client.request("PATCH", path, obj, content_type="application/apply-patch+yaml")
        applied.append(f"{obj['kind']}/{obj['metadata']['name']}")
    return applied


def stop_kubernetes(client: KubeClient, workload: str, namespace: str = NAMESPACE) -> bool:
    """Delete the backfill Deployment (its pods go with it); the PriorityClass and namespace stay."""
    path = (
        f"/apis/apps/v1/namespaces/{urllib.parse.quote(namespace)}/deployments/backfill-{urllib.parse.quote(workload)}"
    )
    try:
        client.request("DELETE", path, {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"})
    except KubeRequestError as error:
        if error.status == 404:
            return False
        raise
    return True


def submit_slurm(runner: Runner, run_dir: str, scripts: Sequence[tuple[str, str]]) -> list[str]:
    """Write the scripts and submit them with `sbatch --parsable --requeue`; the job ids."""
    scheduler = SlurmScheduler()
    job_dir = f"{run_dir}/{JOBS_DIR}"
    result = runner(f"mkdir -p -- {shlex.quote(job_dir)}/logs")
    if result.exit_code != 0:
        raise BackfillError(f"cannot create {job_dir} on the login node: {result.stderr.strip()}")
    ids = []
    for name, script in scripts:
        path = f"{JOBS_DIR}/{name}.sbatch"
        write = runner(
            f"cd -- {shlex.quote(run_dir)} && cat > {shlex.quote(path)} <<'ATLAS_BACKFILL_EOF'\n"
            f"{script}ATLAS_BACKFILL_EOF"
        )
        if write.exit_code != 0:
            raise BackfillError(f"cannot write {run_dir}/{path}: {write.stderr.strip()}")
        command = scheduler.submit_command(run_dir, path, ()).replace(
            "sbatch --parsable", "sbatch --parsable --requeue"
        )
        ids.append(scheduler.parse_submission(runner(command)))
    return ids


def stop_slurm(runner: Runner, partition: str = SLURM_PARTITION) -> list[str]:
    """Cancel this user's jobs in the backfill partition; the ids cancelled."""
    listing = runner(f'squeue -h -u "$USER" -p {shlex.quote(partition)} -o %i')
    ids = [line.strip() for line in listing.stdout.splitlines() if line.strip().isdigit()]
    if ids:
        runner(f"scancel {' '.join(ids)}")
    return ids


def slurm_backfill_jobs(runner: Runner, partition: str = SLURM_PARTITION) -> list[dict[str, str]]:
    """This user's backfill jobs: id, state, reason, restarts (`scontrol` counts requeues)."""
    result = runner(f"squeue -h -u \"$USER\" -p {shlex.quote(partition)} -t all -o '%i|%T|%r|%j'")
    jobs = []
    for line in result.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) == 4 and parts[0].isdigit():
            jobs.append({"job_id": parts[0], "state": parts[1], "reason": parts[2], "name": parts[3]})
    return jobs
