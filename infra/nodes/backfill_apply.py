"""Starts and stops backfill: apply/delete on the Kubernetes API, submit/cancel on a batch login node.

What is applied or submitted is rendered by infra.nodes.backfill; on a login node the commands
and how their answers read are the scheduler's own (its class of infra.hpc.registry: Slurm's
`sbatch --requeue`, `squeue -p`, `scancel`), and every one goes through the caller's runner
(infra.hpc.ssh.run_remote).
"""

from __future__ import annotations

import shlex
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from infra.hpc.remote import Runner
from infra.hpc.scheduler import BACKFILL_QUEUE, BackfillJob, Scheduler
from infra.kubeapi import KubeRequestError
from infra.monitor.kube import KubeClient
from infra.nodes.backfill import (
    JOBS_DIR,
    NAMESPACE,
    BackfillError,
    BackfillWork,
    backfill_deployment,
    backfill_namespace,
    priority_class,
)


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


def submit_backfill(
    scheduler: Scheduler, runner: Runner, run_dir: str, scripts: Sequence[tuple[str, str]]
) -> list[str]:
    """Write the scripts and submit each so that a preempted job is requeued (Slurm's `sbatch
    --parsable --requeue`); the job ids."""
    if scheduler.backfill_unsupported:
        raise BackfillError(f"no backfill on {scheduler.label}: {scheduler.backfill_unsupported}")
    job_dir = f"{run_dir}/{JOBS_DIR}"
    result = runner(f"mkdir -p -- {shlex.quote(job_dir)}/logs")
    if result.exit_code != 0:
        raise BackfillError(f"cannot create {job_dir} on the login node: {result.stderr.strip()}")
    ids = []
    for name, script in scripts:
        path = f"{JOBS_DIR}/{name}{scheduler.script_suffix}"
        write = runner(
            f"cd -- {shlex.quote(run_dir)} && cat > {shlex.quote(path)} <<'ATLAS_BACKFILL_EOF'\n"
            f"{script}ATLAS_BACKFILL_EOF"
        )
        if write.exit_code != 0:
            raise BackfillError(f"cannot write {run_dir}/{path}: {write.stderr.strip()}")
        ids.append(scheduler.parse_submission(runner(scheduler.backfill_submit_command(run_dir, path))))
    return ids


def stop_backfill(scheduler: Scheduler, runner: Runner, queue: str = BACKFILL_QUEUE) -> list[str]:
    """Cancel the login user's unfinished jobs in the backfill queue; the ids cancelled."""
    ids = [job.job_id for job in backfill_jobs(scheduler, runner, queue, finished=False)]
    if ids:
        runner(scheduler.cancel_command(*ids))
    return ids


def backfill_jobs(
    scheduler: Scheduler, runner: Runner, queue: str = BACKFILL_QUEUE, finished: bool = True
) -> list[BackfillJob]:
    """The login user's backfill jobs (with `finished`, the ended ones too): id, state, reason, name."""
    return scheduler.parse_backfill_jobs(runner(scheduler.backfill_jobs_query(queue, finished)))
