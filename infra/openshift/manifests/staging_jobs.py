"""Before the pipeline: the Job that makes the volumes' directories, and one Job per data source that stages it."""

from __future__ import annotations

import pulumi

from infra.openshift.manifests.labels import Manifest, object_metadata
from infra.openshift.manifests.pods import (
    MOUNT_ROOT,
    NO_GPU_ENV,
    POD_SECURITY,
    READ_ONLY_CONTAINER_SECURITY,
    SCRATCH_DIR,
    SCRATCH_MOUNT,
    SCRATCH_VOLUME,
    SCRIPTS_DIR,
    PodContext,
    job_manifest,
    pod_spec,
)
from infra.openshift.manifests.volumes import VOLUME_ROLES, pvc_volume, volume_directories, volume_path
from infra.openshift.settings import STAGING_CPU, STAGING_MEMORY, DataSource, OpenShiftSettings
from infra.workload.model import Workload

STAGE_SCRIPT = "stage_data.py"


def _helper_container(
    context: PodContext, name: str, image: pulumi.Input[str], command: list[str], mounts: list[Manifest]
) -> Manifest:
    """A helper's container: its root filesystem read-only, HOME and temporary files on the scratch
    volume (`_helper_volumes`), the volumes it works on mounted as `mounts` say."""
    amounts = {"cpu": STAGING_CPU.text, "memory": STAGING_MEMORY.text}
    return {
        "name": name,
        "image": image,
        # command, not args: helpers do not need the workload entrypoint (and may use other images).
        "command": command,
        # HOME: OpenShift's arbitrary UID has none; aws-cli and Python caches write there.
        "env": [dict(NO_GPU_ENV), {"name": "HOME", "value": SCRATCH_DIR}, {"name": "TMPDIR", "value": SCRATCH_DIR}],
        "resources": {"requests": dict(amounts), "limits": dict(amounts)},
        "volumeMounts": [*mounts, dict(SCRATCH_MOUNT)],
        "securityContext": dict(READ_ONLY_CONTAINER_SECURITY),
    }


def _helper_volumes(volumes: list[Manifest]) -> list[Manifest]:
    return [*volumes, dict(SCRATCH_VOLUME)]


def prepare_volumes_job(workload: Workload, context: PodContext, deadline_s: int = 600) -> Manifest:
    """Create every subPath directory the steps mount, writable by the project's group."""
    directories = volume_directories(workload)
    paths = [f"{MOUNT_ROOT}/{role}/{d}" for role in VOLUME_ROLES for d in directories[role]]
    # A volume's own root is the provisioner's (root-owned, group-writable or with an fsGroup):
    # a pod may write there but only the owner may chmod it, so only the folders made here are.
    roots = " ".join(f"{MOUNT_ROOT}/{role}" for role in VOLUME_ROLES)
    script = (f'set -eu; for d in {roots}; do [ -w "$d" ] || {{ echo "volume $d is not writable by '
              f'uid $(id -u), groups $(id -G): its provisioner must make it group-writable" >&2; exit 1; }}; done')
    if paths:
        script += "; mkdir -p " + " ".join(paths) + "; chmod g+rwx " + " ".join(paths)
    mounts = [{"name": role, "mountPath": f"{MOUNT_ROOT}/{role}"} for role in VOLUME_ROLES]
    container = _helper_container(context, "prepare", context.image, ["/bin/sh", "-c", script], mounts)
    labels = context.identity.labels("prepare-volumes")
    volumes = _helper_volumes([pvc_volume(role, context.claims) for role in VOLUME_ROLES])
    spec = pod_spec(context, [container], volumes)
    return job_manifest(object_metadata(labels, context.namespace), labels, spec, 2, deadline_s)


def staging_job(
    source: DataSource,
    workload: Workload,
    settings: OpenShiftSettings,
    context: PodContext,
    scripts_config_map: pulumi.Input[str],
) -> Manifest:
    """Fill one workload data input on the data PVC from its configured source."""
    role, target_path = volume_path(workload, next(d.path for d in workload.data if d.name == source.input))
    destination = f"{MOUNT_ROOT}/{role}/{target_path}"
    mounts: list[Manifest] = [{"name": role, "mountPath": f"{MOUNT_ROOT}/{role}"}]
    volumes: list[Manifest] = [pvc_volume(role, context.claims)]
    pod_extra: Manifest = {}
    if source.scheme == "s3":
        command = ["aws", "s3", "sync" if source.url.endswith("/") else "cp", source.url, f"{destination}/"]
        command.append("--only-show-errors")
        if settings.data.s3.endpoint:
            command += ["--endpoint-url", settings.data.s3.endpoint]
        if settings.data.s3.credentials_secret is None:
            command.append("--no-sign-request")
        container = _helper_container(context, "stage", settings.data.s3.image, command, mounts)
        if settings.data.s3.credentials_secret is not None:
            container["envFrom"] = [{"secretRef": {"name": settings.data.s3.credentials_secret}}]
        if not context.openshift:
            # The aws-cli image runs as root; off OpenShift nothing assigns a UID, and
            # runAsNonRoot needs one. On OpenShift the project's range assigns it.
            pod_extra["securityContext"] = {**POD_SECURITY, "runAsUser": 1001, "runAsGroup": 0}
    else:
        if source.scheme == "pvc":
            from_path = f"{MOUNT_ROOT}/source/{source.path}".rstrip("/")
            mounts.append({"name": "source", "mountPath": f"{MOUNT_ROOT}/source", "readOnly": True})
            volumes.append({"name": "source", "persistentVolumeClaim": {"claimName": source.claim, "readOnly": True}})
        else:
            from_path = source.url
        command = ["python3", f"{SCRIPTS_DIR}/{STAGE_SCRIPT}", "--source", from_path, "--dest", destination]
        mounts.append({"name": "scripts", "mountPath": SCRIPTS_DIR, "readOnly": True})
        volumes.append({"name": "scripts", "configMap": {"name": scripts_config_map}})
        container = _helper_container(context, "stage", settings.data.image or context.image, command, mounts)
    labels = {**context.identity.labels("staging"), "atlas.dev/data-input": source.input}
    spec = pod_spec(context, [container], _helper_volumes(volumes))
    spec.update(pod_extra)
    return job_manifest(object_metadata(labels, context.namespace), labels, spec, 2, settings.data.timeout_seconds)
