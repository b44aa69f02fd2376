"""Backfill that yields: fill free GPUs with low-priority work that real jobs push aside.

Kubernetes: a PriorityClass below every real workload's (value -10, `preemptionPolicy:
Never`, so backfill never pushes anything aside itself), a namespace of its own (so it never
counts against a run's ResourceQuota) and a Deployment of one-GPU pods. When a real GPU pod
cannot be placed, the cluster's own kube-scheduler preempts backfill pods; the Deployment
replaces each one, and the replacement waits, Pending, until GPUs are free again.

A batch scheduler that can (the registry's schedulers whose class leaves `backfill_unsupported`
empty: Slurm): one-GPU batch jobs in the preemptible queue (Slurm's partition `backfill` on the
local Satori: `PreemptType=preempt/partition_prio`, the real partitions a higher PriorityTier,
`PreemptMode=REQUEUE`). A real job that needs the GPUs preempts them; Slurm requeues them and
starts them again when the GPUs free up. The scripts are rendered by the one job-script renderer
for the target's scheduler; submitting, listing and stopping them are the scheduler's own commands.

Resuming: where the GPU step declares `resume_args` (the probe: `--resume --save_every 200`),
backfill appends them, so a restarted copy continues from its last checkpoint (and a first start,
with none yet, begins at iteration 0). Slurm's copies share one run folder, so each gets its own
experiment name (`<experiment>-backfill-<index>`) and so its own logs and checkpoint. On
Kubernetes the Deployment's replacement pod starts on a fresh filesystem (backfill pods mount no
volume), so there it finds no checkpoint and starts over. A step without `resume_args` (BigGAN,
whose `--resume` fails when there are no weights yet) restarts from the beginning everywhere.

LSF: preemption is a queue property set by the site (`PREEMPTION=PREEMPTABLE[...]` in
lsb.queues), which Atlas cannot see from outside: it declines LSF backfill, saying so
(`LsfScheduler.backfill_unsupported`), rather than pretend. The local LSF command set has no
such queue either.

Pure: the work, its Kubernetes objects and its batch scripts; infra.nodes.backfill_apply
applies and stops them (the API, the login node).
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass
from typing import Any

from infra.hpc.job_script import render_job_script
from infra.hpc.scheduler import BACKFILL_QUEUE, JobSpec, Scheduler
from infra.openshift.security_lint import CONTAINER_SECURITY, POD_SECURITY, POD_SECURITY_LABELS
from infra.workload.model import FolderSource, Workload
from infra.workload.render import render_step

PRIORITY_CLASS = "atlas-backfill"
PRIORITY_VALUE = -10
NAMESPACE = "atlas-backfill"
MANAGED_BY = "atlas-nodes"
BACKFILL_LABEL = "atlas.dev/backfill"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_TAINT_KEY = "nvidia.com/gpu"
JOBS_DIR = ".atlas/backfill"


class BackfillError(Exception):
    """Backfill cannot be placed here; the message says why and what to do."""


@dataclass(frozen=True)
class BackfillWork:
    """What backfill runs: the workload's GPU step, one GPU per copy."""

    workload: str
    argv: tuple[str, ...]
    experiment_name: str | None = None  # where argv ends with `--experiment_name <it>`
    image: str = ""  # Kubernetes: the image the run used
    cpus: int = 1
    memory_mib: int = 1024
    gpu_product: str | None = None  # Kubernetes: keep to the run's GPU model
    walltime_seconds: int | None = None
    # Kubernetes: where else the pods must land and what they tolerate (the run's placement).
    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[tuple[tuple[str, str], ...], ...] = ()
    # Kubernetes: the preparation steps each copy runs first, in its own container (a backfill
    # namespace has no claim on the run's data): set where the workload makes its data itself.
    prepare: tuple[tuple[str, ...], ...] = ()
    # Kubernetes: the UID the copies run as, in group 0, where nothing assigns one and the image may
    # name root (the run's own rule: infra/openshift/environment.py, ANY_IMAGE_UID). None: the
    # image's own USER, or OpenShift's arbitrary UID from the namespace's range.
    run_as_uid: int | None = None


def work_for(workload: Workload, environment: str, image: str = "", gpu_product: str | None = None) -> BackfillWork:
    """The workload's last GPU step as backfill, with its own experiment name where it takes one,
    so backfill never writes into the real run's logs or checkpoints."""
    if isinstance(workload.source, FolderSource):
        # Backfill's Deployment and its Slurm copies start from the image or a run folder alone;
        # a folder source reaches a run's own Jobs and scripts only (docs/workloads.md).
        raise BackfillError(
            f"workload {workload.name!r} has a folder source, which backfill does not stage; backfill with a "
            "workload whose code is in its image (source.repository or a shipped one)"
        )
    gpu_steps = [s for s in workload.steps if s.resources.gpus_per_node > 0]
    if not gpu_steps:
        raise BackfillError(f"workload {workload.name!r} has no GPU step to backfill with")
    step = render_step(workload, gpu_steps[-1].name, environment)
    # The step's resume arguments: a preempted copy, started again, continues from its checkpoint.
    argv = tuple(step.argv) + workload.step(step.name).resume_args
    # A workload that reads no outside data (the probe) makes it with its earlier steps: each
    # Kubernetes copy runs them first. One that reads outside data has nothing to prepare from.
    prepare: tuple[tuple[str, ...], ...] = ()
    produced = {name for s in workload.steps for name in s.outputs}
    if all(d.name in produced for d in workload.data):
        before = workload.steps[: workload.steps.index(workload.step(step.name))]
        prepare = tuple(tuple(render_step(workload, s.name, environment).argv) for s in before)
    experiment = None
    if "--experiment_name" in argv:
        experiment = f"{workload.logs.experiment or workload.name}-backfill"
        argv += ("--experiment_name", experiment)
    return BackfillWork(
        workload=workload.name,
        argv=argv,
        experiment_name=experiment,
        image=image,
        cpus=step.resources.cpus_per_task,
        memory_mib=step.resources.memory_mib,
        gpu_product=gpu_product,
        walltime_seconds=step.resources.walltime_seconds,
        prepare=prepare,
    )


# --- Kubernetes ----------------------------------------------------------------------------------


def priority_class(value: int = PRIORITY_VALUE, name: str = PRIORITY_CLASS) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": MANAGED_BY}},
        "value": value,
        "globalDefault": False,
        # Backfill waits for free GPUs; it never pushes anything aside itself.
        "preemptionPolicy": "Never",
        "description": "Atlas backfill: fills free GPUs; any pod of higher priority (every real job) preempts it",
    }


def backfill_pod_spec(work: BackfillWork, priority_class_name: str = PRIORITY_CLASS) -> dict[str, Any]:
    resources = {
        "requests": {"cpu": str(work.cpus), "memory": f"{work.memory_mib}Mi", GPU_RESOURCE: "1"},
        "limits": {"cpu": str(work.cpus), "memory": f"{work.memory_mib}Mi", GPU_RESOURCE: "1"},
    }
    pod_security: dict[str, Any] = dict(POD_SECURITY)
    if work.run_as_uid is not None:
        pod_security.update(runAsUser=work.run_as_uid, runAsGroup=0)
    spec: dict[str, Any] = {
        "priorityClassName": priority_class_name,
        # Backfill never calls the API: no token in its pods.
        "automountServiceAccountToken": False,
        "securityContext": pod_security,
        # Time to write a checkpoint on SIGTERM when preempted.
        "terminationGracePeriodSeconds": 30,
        "tolerations": [{"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"},
                        *(dict(t) for t in work.tolerations)],
        "containers": [
            {
                "name": "backfill",
                "image": work.image or "registry.invalid/atlas/backfill:unset",
                **_backfill_command(work),
                "resources": resources,
                # Not a read-only root filesystem: a copy writes in the image's working directory
                # (security_lint.EXEMPTIONS).
                "securityContext": dict(CONTAINER_SECURITY),
            }
        ],
    }
    selector = dict(work.node_selector)
    if work.gpu_product:
        selector["nvidia.com/gpu.product"] = work.gpu_product
    if selector:
        spec["nodeSelector"] = selector
    return spec


def _backfill_command(work: BackfillWork) -> dict[str, list[str]]:
    if not work.prepare:
        return {"command": list(work.argv[:1]), "args": list(work.argv[1:])}
    # Each copy makes its data in its own container (the image's writable WORKDIR), then trains.
    chain = " && ".join([*(shlex.join(p) for p in work.prepare), f"exec {shlex.join(work.argv)}"])
    return {"command": ["/bin/sh", "-c", chain]}


def backfill_deployment(
    work: BackfillWork, replicas: int, namespace: str = NAMESPACE, priority_class_name: str = PRIORITY_CLASS
) -> dict[str, Any]:
    labels = {"app.kubernetes.io/managed-by": MANAGED_BY, BACKFILL_LABEL: work.workload}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": f"backfill-{work.workload}", "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": backfill_pod_spec(work, priority_class_name)},
        },
    }


def backfill_namespace(namespace: str = NAMESPACE) -> dict[str, Any]:
    # The API server refuses any pod here that does not meet the restricted Pod Security Standard.
    labels = {"app.kubernetes.io/managed-by": MANAGED_BY, **POD_SECURITY_LABELS}
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace, "labels": labels}}


# --- a batch scheduler (Slurm) ---------------------------------------------------------------------


def slot_argv(work: BackfillWork, index: int) -> tuple[str, ...]:
    """One batch copy's command: its own experiment (logs, checkpoint), since the copies share a run
    folder and a requeued copy must resume its own checkpoint, not another's."""
    if work.experiment_name is None or work.argv[-2:] != ("--experiment_name", work.experiment_name):
        return work.argv
    return (*work.argv[:-1], f"{work.experiment_name}-{index}")


def backfill_job_name(environment: str, workload: str, index: int, run_dir: str) -> str:
    digest = hashlib.sha256("\0".join(("backfill", environment, workload, run_dir)).encode()).hexdigest()[:8]
    return f"atlas-backfill-{index}-{digest}"


def backfill_scripts(
    scheduler: Scheduler,
    work: BackfillWork,
    environment: str,
    run_dir: str,
    slots: int,
    queue: str = BACKFILL_QUEUE,
    telemetry: bool = False,
) -> list[tuple[str, str]]:
    """(job name, script) per one-GPU backfill job in the preemptible `queue`, rendered by the one
    job-script renderer for `scheduler`; BackfillError where the scheduler cannot take backfill."""
    if scheduler.backfill_unsupported:
        raise BackfillError(f"no backfill on {scheduler.label}: {scheduler.backfill_unsupported}")
    scripts = []
    for index in range(slots):
        name = backfill_job_name(environment, work.workload, index, run_dir)
        spec = JobSpec(
            job_name=name,
            step=f"backfill-{index}",
            workdir=run_dir,
            log_dir=f"{JOBS_DIR}/logs",
            command=slot_argv(work, index),
            gpus_per_node=1,
            cpus_per_task=work.cpus,
            memory_mib=work.memory_mib,
            walltime_seconds=work.walltime_seconds,
            queue=queue,
            telemetry_out=f"telemetry/backfill-{index}.jsonl" if telemetry else None,
            python_path=".atlas/python" if telemetry else None,
            description=f"Atlas backfill of {work.workload}: preemptible, requeued when a real job needs the GPU",
        )
        scripts.append((name, render_job_script(scheduler, spec)))
    return scripts
