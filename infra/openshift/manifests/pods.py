"""Pods and Jobs: what every pod of the run shares (context, security, pod spec) and the Job around one.

The GPU a pod asks for, and the memory quantities it states, are written here as the API reads them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi

from infra.openshift.manifests.labels import SKIP_AWAIT, Manifest, RunIdentity
from infra.openshift.manifests.volumes import Claims, SourceVolume
from infra.openshift.settings import GPU_PRODUCT_LABEL

# The taint key GPU nodes carry (the GPU operator's convention, and the local KWOK nodes').
GPU_TAINT_KEY = "nvidia.com/gpu"
# Where helper pods mount things; the steps use the image's working directory instead.
MOUNT_ROOT = "/atlas"
SCRIPTS_DIR = f"{MOUNT_ROOT}/scripts"

# What a GPU step's pod tolerates beside the run's own tolerations: the GPU nodes' taint.
GPU_TOLERATION = {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
POD_SECURITY = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
# The workload image sets NVIDIA_VISIBLE_DEVICES=all for its GPU steps; a pod that asked for no
# GPU must not get every GPU of its node from the NVIDIA runtime because of it.
NO_GPU_ENV = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}


@dataclass(frozen=True)
class PodContext:
    """What every pod of the run shares."""

    identity: RunIdentity
    namespace: pulumi.Input[str]
    image: pulumi.Input[str]
    service_account: pulumi.Input[str]
    claims: Claims
    workdir: str
    openshift: bool
    # Labels every pod must land on and taints every pod tolerates (settings.placement),
    # beside a GPU step's product and GPU toleration.
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[Mapping[str, str]] = ()
    # A folder source's ConfigMap (None: the code is in the image).
    source: SourceVolume | None = None
    # Atlas's entrypoint and sampler, for an image Atlas did not build (None: the image carries them).
    tools: SourceVolume | None = None
    # The UID every pod runs as, in group 0, where nothing assigns one (off OpenShift) and the image
    # may name root (one Atlas did not build): runAsNonRoot refuses a root image. None: the image's
    # own USER (Atlas's images: 1001), or OpenShift's arbitrary UID from the project's range.
    run_as_uid: int | None = None


def placement(
    selector: Mapping[str, str],
    tolerations: Sequence[Mapping[str, str]],
    own_selector: Mapping[str, str] | None = None,
    own_tolerations: Sequence[Mapping[str, str]] = (),
) -> tuple[dict[str, str], list[dict[str, str]]]:
    """A pod's node selector and tolerations: the run's (settings.placement), then the pod's own
    (a GPU step's product and GPU toleration), each toleration once."""
    merged = [dict(t) for t in tolerations]
    merged += [dict(t) for t in own_tolerations if dict(t) not in merged]
    return {**selector, **(own_selector or {})}, merged


def gpu_placement(
    selector: Mapping[str, str], tolerations: Sequence[Mapping[str, str]], product: str
) -> tuple[dict[str, str], list[dict[str, str]]]:
    """Where a GPU step's pod may go (step_jobs.py renders it so; the outputs record it for the
    monitor): the run's placement, nodes labelled with the GPU product, the GPU taint tolerated."""
    return placement(selector, tolerations, {GPU_PRODUCT_LABEL: product}, [GPU_TOLERATION])


def pod_spec(context: PodContext, containers: list[Manifest], volumes: list[Manifest], **extra: Any) -> Manifest:
    selector, tolerations = placement(
        context.node_selector, context.tolerations, extra.pop("nodeSelector", {}), extra.pop("tolerations", [])
    )
    if selector:
        extra["nodeSelector"] = selector
    if tolerations:
        extra["tolerations"] = tolerations
    security: Manifest = dict(POD_SECURITY)
    if context.run_as_uid is not None:
        # As OpenShift runs any image: a UID not the image's, in group 0.
        security.update(runAsUser=context.run_as_uid, runAsGroup=0)
    return {
        "serviceAccountName": context.service_account,
        "automountServiceAccountToken": False,
        # No runAsUser or fsGroup: OpenShift assigns them from the project's range.
        "securityContext": security,
        "containers": containers,
        "volumes": volumes,
        **extra,
    }


def job_manifest(
    metadata: Manifest, pod_labels: Mapping[str, str], spec: Manifest, backoff_limit: int, deadline_s: int
) -> Manifest:
    """One pod run to completion: never restarted in place, retried `backoff_limit` times."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        # Atlas waits for the Jobs it must itself (completion.py): sooner than pulumi-kubernetes,
        # which waits for the Job's Complete condition, a second after the pod succeeded.
        "metadata": {**metadata, "annotations": {**(metadata.get("annotations") or {}), SKIP_AWAIT: "true"}},
        "spec": {
            "backoffLimit": backoff_limit,
            "activeDeadlineSeconds": deadline_s,
            "completions": 1,
            "parallelism": 1,
            # No ttlSecondsAfterFinished: a Job that deletes itself is drift on every refresh.
            "template": {"metadata": {"labels": dict(pod_labels)}, "spec": {**spec, "restartPolicy": "Never"}},
        },
    }


def memory_text(value: int) -> str:
    """Bytes as the largest binary unit that divides them (`64Gi`), or plain bytes."""
    for suffix, factor in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if value % factor == 0:
            return f"{value // factor}{suffix}"
    return str(value)
