"""The pipeline: one Job per workload step, with the same argv as the HPC side, wrapped by the sampler.

In an image Atlas built, the image's entrypoint runs first and the sampler is the image's; in any
other image, Atlas's entrypoint and sampler come from the tools ConfigMap (`PodContext.tools`), the
container's `command` runs that entrypoint, which finds the image's python3 at run time.
"""

from __future__ import annotations

from collections.abc import Sequence

from infra.openshift.manifests.labels import Manifest, object_metadata
from infra.openshift.manifests.pods import (
    CONTAINER_SECURITY,
    GPU_TOLERATION,
    NO_GPU_ENV,
    PodContext,
    job_manifest,
    memory_text,
    pod_spec,
)
from infra.openshift.manifests.volumes import SOURCE_DIR, SOURCE_ENV, TOOLS_DIR, pvc_volume, step_mounts
from infra.openshift.settings import GPU_PRODUCT_LABEL, GPU_RESOURCE, OpenShiftSettings, shm_bytes
from infra.telemetry.bundle import ENTRYPOINT_NAME
from infra.workload.model import Workload
from infra.workload.render import RenderedStep, entrypoint_sampled, kubernetes_args, sampled_argv, telemetry_file


def is_awaited(index: int, steps: Sequence[RenderedStep], settings: OpenShiftSettings) -> bool:
    """Preparation steps hold `pulumi up` until they complete; the last one (training) does not."""
    return index < len(steps) - 1 or settings.pipeline.await_last_step


def step_job(
    step: RenderedStep,
    workload: Workload,
    settings: OpenShiftSettings,
    context: PodContext,
    program: Sequence[str] | None = None,
    telemetry_out: str | None = None,
) -> Manifest:
    """One step as a Job: the same argv as the HPC side, wrapped by the telemetry sampler.

    `program` and `telemetry_out` replace the step's argv and its telemetry file (a swept step's
    Indexed Job, sweep_jobs.py, runs a shell that picks the point)."""
    resources = step.resources
    labels = context.identity.labels("step", step.name)
    telemetry_out = telemetry_out or telemetry_file(workload, step.name)
    program = list(program) if program is not None else kubernetes_args(step)
    if context.tools is None:
        argv = list(sampled_argv(workload, step, program=program, telemetry_out=telemetry_out))
    else:
        argv = list(entrypoint_sampled(program, telemetry_out, workload.telemetry.interval_seconds, step.name))

    amounts: dict[str, str] = {"cpu": str(resources.cpus_per_task), "memory": resources.memory}
    env = [{"name": name, "value": value} for name, value in step.env]
    env.append({"name": "ATLAS_RUN", "value": context.identity.run_id})
    env.append({"name": "ATLAS_STEP", "value": step.name})
    extra: Manifest = {}
    if resources.gpus_per_node > 0:
        amounts[GPU_RESOURCE] = str(resources.gpus_per_node)
        # Not NVIDIA_VISIBLE_DEVICES: the device plugin sets it to the GPUs it allocated.
        env.append({"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"})
        # pod_spec adds the run's placement: together what gpu_placement says (the outputs' record).
        extra["nodeSelector"] = {GPU_PRODUCT_LABEL: settings.gpu.product}
        extra["tolerations"] = [dict(GPU_TOLERATION)]
    else:
        env.append(dict(NO_GPU_ENV))

    mounts: list[Manifest] = [
        {"name": m.role, "mountPath": f"{context.workdir}/{m.sub_path}", "subPath": m.sub_path}
        for m in step_mounts(workload)
    ]
    mounts.append({"name": "dshm", "mountPath": "/dev/shm"})  # noqa: S108 (a path in the container)
    roles = sorted({m.role for m in step_mounts(workload)})
    volumes = [pvc_volume(role, context.claims) for role in roles]
    # PyTorch's DataLoader workers pass batches through /dev/shm; a container's default is 64 MiB.
    volumes.append(
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": memory_text(shm_bytes(step, settings))}}
    )
    if context.source is not None:
        volumes.append(context.source.volume("source"))
        mounts.append({"name": "source", "mountPath": SOURCE_DIR, "readOnly": True})
        env.append({"name": SOURCE_ENV, "value": SOURCE_DIR})
    launch: Manifest = {}
    if context.tools is None:
        # args, not command: the image's entrypoint (arbitrary-UID passwd entry) runs first.
        launch["args"] = argv
    else:
        # Atlas's entrypoint from the tools volume, through the image's sh: it needs no exec bit, and
        # the image's own ENTRYPOINT (whatever it is) is not in the way.
        launch["command"] = ["/bin/sh", f"{TOOLS_DIR}/{ENTRYPOINT_NAME}"]
        launch["args"] = argv
        volumes.append(context.tools.volume("atlas-tools"))
        mounts.append({"name": "atlas-tools", "mountPath": TOOLS_DIR, "readOnly": True})
        if context.source is not None:
            # The entrypoint copies the folder into the working directory, which an image not made
            # for it may not have, or not let the pod's UID write: a folder of the pod's own.
            volumes.append({"name": "workdir", "emptyDir": {}})
            mounts.insert(0, {"name": "workdir", "mountPath": context.workdir})
    container = {
        "name": "step",
        "image": context.image,
        **launch,
        "workingDir": context.workdir,
        "env": env,
        # Requests equal limits: Guaranteed QoS, no CPU throttling below the request, and the
        # LimitRange's defaults never apply to a step.
        "resources": {"requests": dict(amounts), "limits": dict(amounts)},
        "volumeMounts": mounts,
        "securityContext": dict(CONTAINER_SECURITY),
    }
    metadata = object_metadata(labels, context.namespace)
    return job_manifest(
        metadata,
        labels,
        pod_spec(context, [container], volumes, **extra),
        settings.pipeline.backoff_limit,
        resources.walltime_seconds,
    )
