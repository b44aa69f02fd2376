"""The project and what constrains it: ProjectRequest, quota, limits, the claims' specs, the steps' ServiceAccount.

The quota and the limits are sized from the workload unless the settings give them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pulumi

from infra.openshift.manifests.labels import Manifest, object_metadata
from infra.openshift.manifests.pods import memory_text
from infra.openshift.settings import (
    GPU_RESOURCE,
    STAGING_CPU,
    STAGING_MEMORY,
    OpenShiftSettings,
    RequiredQuota,
    VolumeSettings,
)
from infra.workload.render import RenderedStep


def project_request(
    name: str, labels: Mapping[str, str], display_name: str | None, description: str | None
) -> Manifest:
    """An OpenShift ProjectRequest: what `oc new-project` sends; a self-provisioner may create
    one, while Namespaces (and Projects) are for cluster admins."""
    manifest: Manifest = {
        "apiVersion": "project.openshift.io/v1",
        "kind": "ProjectRequest",
        "metadata": {"name": name, "labels": dict(labels)},
    }
    if display_name:
        manifest["displayName"] = display_name
    if description:
        manifest["description"] = description
    return manifest


def quota_hard(settings: OpenShiftSettings, needed: RequiredQuota) -> dict[str, str]:
    """The ResourceQuota's `hard`: the configured values, else what the workload needs."""
    quota = settings.quota
    return {
        f"requests.{GPU_RESOURCE}": str(quota.gpus if quota.gpus is not None else needed.gpus),
        "requests.cpu": quota.cpu.text if quota.cpu else needed.cpu,
        "requests.memory": quota.memory.text if quota.memory else needed.memory,
        "requests.storage": quota.storage.text if quota.storage else needed.storage,
        "persistentvolumeclaims": str(quota.pvcs if quota.pvcs is not None else needed.pvcs),
    }


def limit_range_spec(steps: Sequence[RenderedStep], settings: OpenShiftSettings) -> Manifest:
    """Per-container bounds sized from the largest step, defaults for containers that set none
    (OpenShift's build pods among them), and no claim larger than the largest PVC."""
    max_cpu = max((s.resources.cpus_per_task for s in steps), default=1)
    max_memory = max((s.resources.memory_bytes for s in steps), default=1 << 30)
    if settings.image.build is not None:
        max_cpu = max(max_cpu, int(-(-settings.image.build.cpu.value // 1)))
        max_memory = max(max_memory, int(settings.image.build.memory.value))
    # Never below the defaults given to containers that set no limits (the API refuses that), nor
    # below the staging pods' limits: the volumes' preparation runs in every run, and without a
    # build (an `image.reference`) nothing else lifted the bound above a small workload's steps.
    max_cpu = max(max_cpu, int(-(-STAGING_CPU.value // 1)))
    max_memory = max(max_memory, 1 << 30, int(STAGING_MEMORY.value))
    largest_claim = max(
        (settings.storage.data.size, settings.storage.results.size, settings.storage.logs.size),
        key=lambda q: q.value,
    )
    return {
        "limits": [
            {
                "type": "Container",
                "max": {"cpu": str(max_cpu), "memory": memory_text(max_memory)},
                "defaultRequest": {"cpu": "100m", "memory": "256Mi"},
                "default": {"cpu": "1", "memory": "1Gi"},
            },
            {"type": "PersistentVolumeClaim", "max": {"storage": largest_claim.text}},
        ]
    }


def pvc_spec(volume: VolumeSettings) -> Manifest:
    spec: Manifest = {
        "accessModes": [volume.access_mode],
        "resources": {"requests": {"storage": volume.size.text}},
        "volumeMode": "Filesystem",
    }
    if volume.storage_class is not None:
        spec["storageClassName"] = volume.storage_class
    return spec


def service_account(labels: Mapping[str, str], namespace: pulumi.Input[str]) -> Manifest:
    # The steps never call the API: no token in their pods.
    return {"metadata": object_metadata(labels, namespace), "automountServiceAccountToken": False}
