"""The Kubernetes and OpenShift objects of the OpenShift side, rendered as plain dicts.

Pure functions: the components in this package pass their results to pulumi-kubernetes, the
tests read them directly. Keys are the API's own (camelCase), so what a test checks, and
what the schema test validates against OpenShift's OpenAPI document, is what the API server
receives. Names of objects created in the same run (PVCs, the ServiceAccount, ConfigMaps)
arrive as `pulumi.Input[str]` and are placed as leaves, never used in computations, so the
same function serves preview (unknown names) and tests (plain strings).

Layout on the volumes: every PVC's root mirrors the step's working directory, so a workload
path `data/ImageNet/train` is `<data PVC>/data/ImageNet/train`. Steps mount one subPath per
top-level directory the workload names (inputs on the data PVC, outputs on the results PVC,
the training logs on the logs PVC); staging and the monitor mount whole PVCs.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

import pulumi

from infra.openshift.settings import (
    MONITOR_CPU,
    MONITOR_MEMORY,
    MONITOR_PROXY_CPU,
    MONITOR_PROXY_MEMORY,
    STAGING_CPU,
    STAGING_MEMORY,
    DataSource,
    ImageBuild,
    OpenShiftSettings,
    OpenShiftSettingsError,
    RequiredQuota,
    VolumeSettings,
    shm_bytes,
)
from infra.validation import Fields
from infra.workload.model import GitSource, Workload
from infra.workload.render import RenderedStep, kubernetes_args, with_sampler

Manifest = dict[str, Any]

MANAGED_BY = "atlas"
GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
# The taint key GPU nodes carry (the GPU operator's convention, and the local KWOK nodes').
GPU_TAINT_KEY = "nvidia.com/gpu"
INTERNAL_REGISTRY = "image-registry.openshift-image-registry.svc:5000"
SKIP_AWAIT = "pulumi.com/skipAwait"
WAIT_FOR = "pulumi.com/waitFor"
MONITOR_PORT = 8080
# OpenShift only: the oauth-proxy in front of the monitor (see "The monitor behind OpenShift's login").
MONITOR_PROXY_PORT = 8443
# Where helper pods mount things; the steps use the image's working directory instead.
MOUNT_ROOT = "/atlas"
SCRIPTS_DIR = f"{MOUNT_ROOT}/scripts"
MONITOR_APP = "monitor_app.py"
STAGE_SCRIPT = "stage_data.py"
VOLUME_ROLES = ("data", "results", "logs")


# ---------------------------------------------------------------------------------------------
# Labels


@dataclass(frozen=True)
class RunIdentity:
    """What ties every object to the stack and the run (labels, and thereby selectors)."""

    stack: str
    run_id: str
    workload: str

    def labels(self, component: str, step: str | None = None) -> dict[str, str]:
        labels = {
            "app.kubernetes.io/managed-by": MANAGED_BY,
            "app.kubernetes.io/part-of": "atlas",
            "app.kubernetes.io/component": component,
            "atlas.dev/stack": self.stack,
            "atlas.dev/run": self.run_id,
            "atlas.dev/workload": self.workload,
        }
        if step is not None:
            labels["atlas.dev/step"] = step
        return labels


def check_label_value(value: str, what: str) -> str:
    return Fields(OpenShiftSettingsError).label_value(value, what)


def _metadata(
    labels: Mapping[str, str],
    namespace: pulumi.Input[str] | None = None,
    annotations: Mapping[str, str] | None = None,
    name: pulumi.Input[str] | None = None,
) -> Manifest:
    metadata: Manifest = {"labels": dict(labels)}
    if name is not None:
        metadata["name"] = name
    if namespace is not None:
        metadata["namespace"] = namespace
    if annotations:
        metadata["annotations"] = dict(annotations)
    return metadata


# ---------------------------------------------------------------------------------------------
# The project and what constrains it


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
    # Never below the defaults given to containers that set no limits (the API refuses that).
    max_memory = max(max_memory, 1 << 30)
    largest_claim = max(
        (settings.storage.data.size, settings.storage.results.size, settings.storage.logs.size),
        key=lambda q: q.value,
    )
    return {
        "limits": [
            {
                "type": "Container",
                "max": {"cpu": str(max_cpu), "memory": _memory_text(max_memory)},
                "defaultRequest": {"cpu": "100m", "memory": "256Mi"},
                "default": {"cpu": "1", "memory": "1Gi"},
            },
            {"type": "PersistentVolumeClaim", "max": {"storage": largest_claim.text}},
        ]
    }


def _memory_text(value: int) -> str:
    for suffix, factor in (("Ti", 1 << 40), ("Gi", 1 << 30), ("Mi", 1 << 20), ("Ki", 1 << 10)):
        if value % factor == 0:
            return f"{value // factor}{suffix}"
    return str(value)


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
    return {"metadata": _metadata(labels, namespace), "automountServiceAccountToken": False}


# ---------------------------------------------------------------------------------------------
# The image


def image_stream_name(workload: str, stack: str) -> str:
    """One ImageStream per workload and stack, named exactly (see image.py for why)."""
    name = re.sub(r"[^a-z0-9-]+", "-", f"{workload}-{stack}".lower()).strip("-")
    return name[:63].rstrip("-") or "atlas"


def image_tag(workload: Workload, build: ImageBuild) -> str:
    """A tag that changes whenever what goes into the image changes, so that a change builds
    a new image and re-runs the Jobs that use it, while a no-change `up` changes nothing."""
    inputs = {
        "git_uri": build.git_uri,
        "git_ref": build.git_ref,
        "context": workload.build.context,
        "containerfile": workload.build.containerfile,
        "build_args": build_args(workload, build),
    }
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()
    return digest[:16]


def build_args(workload: Workload, build: ImageBuild) -> list[dict[str, str]]:
    """The Containerfile's ARGs: the workload's source pin, and the base image if configured."""
    args = []
    if isinstance(workload.source, GitSource):
        args += [
            {"name": "REPOSITORY", "value": workload.source.repository},
            {"name": "COMMIT", "value": workload.source.commit},
        ]
    if build.base_image:
        args.append({"name": "BASE_IMAGE", "value": build.base_image})
    return args


def internal_pull_spec(namespace: str, image_stream: str, tag: str) -> str:
    return f"{INTERNAL_REGISTRY}/{namespace}/{image_stream}:{tag}"


def pushed_image(status: Mapping[str, Any] | None, tag: str, fallback: str) -> str:
    """The newest image pushed to `tag`, by digest, as the ImageStream's status records it
    (`dockerImageReference`); `fallback` (the tag's pull spec) while none is recorded."""
    for entry in (status or {}).get("tags") or []:
        if entry.get("tag") == tag and entry.get("items"):
            reference = entry["items"][0].get("dockerImageReference")
            if reference:
                return str(reference)
    return fallback


def image_stream(
    labels: Mapping[str, str], namespace: pulumi.Input[str], name: str, tag: str, await_tag: bool, timeout_s: int
) -> Manifest:
    annotations: dict[str, str] = {}
    if await_tag:
        # Wait in `pulumi up` until the build has pushed this tag: the Jobs that pull it depend
        # on this ImageStream, so none starts with ImagePullBackOff while the build runs.
        annotations[WAIT_FOR] = f'jsonpath={{.status.tags[?(@.tag=="{tag}")].items[0].image}}'
        annotations["pulumi.com/timeoutSeconds"] = str(timeout_s)
    return {
        "apiVersion": "image.openshift.io/v1",
        "kind": "ImageStream",
        "metadata": _metadata(labels, namespace, annotations, name=name),
        "spec": {"lookupPolicy": {"local": False}},
    }


def build_config(
    workload: Workload, build: ImageBuild, labels: Mapping[str, str], namespace: pulumi.Input[str], output_tag: str
) -> Manifest:
    """Docker strategy over this repository (the build context holds the Containerfile and the
    sampler); the ConfigChange trigger builds once when the BuildConfig is created."""
    context = PurePosixPath(workload.build.context)
    containerfile = PurePosixPath(workload.build.containerfile)
    if str(context) != "." and not containerfile.is_relative_to(context):
        raise ValueError(
            f"build.containerfile: {containerfile} is outside build.context {context}; "
            "a BuildConfig reads the Containerfile from inside its context directory"
        )
    source: Manifest = {"type": "Git", "git": {"uri": build.git_uri, "ref": build.git_ref}}
    if str(context) != ".":
        source["contextDir"] = str(context)
    resources = {"cpu": build.cpu.text, "memory": build.memory.text}
    return {
        "apiVersion": "build.openshift.io/v1",
        "kind": "BuildConfig",
        "metadata": _metadata(labels, namespace),
        "spec": {
            "runPolicy": "Serial",
            "source": source,
            "strategy": {
                "type": "Docker",
                "dockerStrategy": {
                    "dockerfilePath": str(containerfile if str(context) == "." else containerfile.relative_to(context)),
                    "buildArgs": build_args(workload, build),
                },
            },
            "output": {"to": {"kind": "ImageStreamTag", "name": output_tag}},
            "triggers": [{"type": "ConfigChange"}],
            "resources": {"requests": resources, "limits": resources},
            "successfulBuildsHistoryLimit": 2,
            "failedBuildsHistoryLimit": 3,
        },
    }


# ---------------------------------------------------------------------------------------------
# Volumes


@dataclass(frozen=True)
class Claims:
    """The run's PVC names (known only after create when auto-named)."""

    data: pulumi.Input[str]
    results: pulumi.Input[str]
    logs: pulumi.Input[str]

    def of(self, role: str) -> pulumi.Input[str]:
        return {"data": self.data, "results": self.results, "logs": self.logs}[role]


@dataclass(frozen=True)
class StepMount:
    role: str  # "data", "results" or "logs": which PVC
    sub_path: str  # a top-level directory of the working directory, the same on the PVC


def step_mounts(workload: Workload) -> tuple[StepMount, ...]:
    """Inputs on the data PVC, outputs on the results PVC, the training logs on the logs PVC,
    telemetry on the results PVC; one mount per top-level directory, first claim wins."""
    by_top: dict[str, str] = {}

    def claim(path: str, role: str) -> None:
        by_top.setdefault(PurePosixPath(path).parts[0], role)

    inputs = {s for step in workload.steps for s in step.inputs}
    outputs = {s for step in workload.steps for s in step.outputs}
    external_inputs = inputs - outputs
    for data_path in workload.data:
        if data_path.name in external_inputs:
            claim(data_path.path, "data")
    for data_path in workload.data:
        if data_path.name in outputs:
            # An output beside the inputs (the HDF5 file under data/) stays on the data PVC.
            claim(data_path.path, "results")
    claim(workload.logs.root, "logs")
    claim(workload.telemetry.root, "results")
    return tuple(StepMount(role, top) for top, role in sorted(by_top.items()))


def volume_path(workload: Workload, path: str) -> tuple[str, str]:
    """Which PVC holds a workload path, and where it is relative to that PVC's root."""
    top = PurePosixPath(path).parts[0]
    for mount in step_mounts(workload):
        if mount.sub_path == top:
            return mount.role, path
    raise ValueError(f"{path!r} is on no volume; step_mounts covers every declared path")


def volume_directories(workload: Workload) -> dict[str, list[str]]:
    """The directories each PVC must hold before any step mounts them as subPaths: the
    kubelet would create missing ones owned by root, which the steps' arbitrary UID cannot
    write to."""
    directories: dict[str, list[str]] = {role: [] for role in VOLUME_ROLES}
    for mount in step_mounts(workload):
        directories[mount.role].append(mount.sub_path)
    return directories


def _pvc_volume(role: str, claims: Claims, read_only: bool = False) -> Manifest:
    source: Manifest = {"claimName": claims.of(role)}
    if read_only:
        source["readOnly"] = True
    return {"name": role, "persistentVolumeClaim": source}


# ---------------------------------------------------------------------------------------------
# Pods: shared pieces

POD_SECURITY = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
# The workload image sets NVIDIA_VISIBLE_DEVICES=all for its GPU steps; a pod that asked for no
# GPU must not get every GPU of its node from the NVIDIA runtime because of it.
NO_GPU_ENV = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}


# Where a folder source's files are mounted (read-only) in a step's container; the image's
# entrypoint copies them into the working directory before the step runs, as the HPC side
# stages them into the run directory.
SOURCE_DIR = "/opt/atlas/source"
SOURCE_ENV = "ATLAS_SOURCE_DIR"


@dataclass(frozen=True)
class SourceFile:
    """One file of a folder source in the source ConfigMap: its key there, its path, its mode."""

    key: str
    path: str
    mode: int


def source_config_map_data(files: Sequence[tuple[str, bytes, int]]) -> tuple[dict[str, str], tuple[SourceFile, ...]]:
    """A folder source's files (path, content, mode) as ConfigMap `binaryData` and the volume's
    items. Keys are numbered: a ConfigMap key allows no '/', the items put each file at its path."""
    data: dict[str, str] = {}
    items = []
    for index, (path, content, mode) in enumerate(sorted(files)):
        key = f"file-{index:04d}"
        data[key] = base64.b64encode(content).decode()
        items.append(SourceFile(key, path, mode))
    return data, tuple(items)


@dataclass(frozen=True)
class SourceVolume:
    config_map: pulumi.Input[str]
    files: tuple[SourceFile, ...]


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


def _pod_spec(context: PodContext, containers: list[Manifest], volumes: list[Manifest], **extra: Any) -> Manifest:
    selector = {**context.node_selector, **extra.pop("nodeSelector", {})}
    if selector:
        extra["nodeSelector"] = selector
    tolerations = [dict(t) for t in context.tolerations]
    tolerations += [t for t in extra.pop("tolerations", []) if t not in tolerations]
    if tolerations:
        extra["tolerations"] = tolerations
    return {
        "serviceAccountName": context.service_account,
        "automountServiceAccountToken": False,
        # No runAsUser or fsGroup: OpenShift assigns them from the project's range.
        "securityContext": dict(POD_SECURITY),
        "containers": containers,
        "volumes": volumes,
        **extra,
    }


def _job(
    metadata: Manifest, pod_labels: Mapping[str, str], pod_spec: Manifest, backoff_limit: int, deadline_s: int
) -> Manifest:
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
            "template": {"metadata": {"labels": dict(pod_labels)}, "spec": {**pod_spec, "restartPolicy": "Never"}},
        },
    }


# ---------------------------------------------------------------------------------------------
# The pipeline


def is_awaited(index: int, steps: Sequence[RenderedStep], settings: OpenShiftSettings) -> bool:
    """Preparation steps hold `pulumi up` until they complete; the last one (training) does not."""
    return index < len(steps) - 1 or settings.pipeline.await_last_step


def step_job(
    step: RenderedStep,
    workload: Workload,
    settings: OpenShiftSettings,
    context: PodContext,
) -> Manifest:
    """One step as a Job: the same argv as the HPC side, wrapped by the telemetry sampler."""
    resources = step.resources
    labels = context.identity.labels("step", step.name)
    telemetry_out = f"{workload.telemetry.root}/{step.name}.jsonl"
    argv = list(with_sampler(kubernetes_args(step), telemetry_out, workload.telemetry.interval_seconds))
    # The sampler names its records after the step; with_sampler leaves --step to the caller.
    separator = argv.index("--")
    argv[separator:separator] = ["--step", step.name]

    amounts: dict[str, str] = {"cpu": str(resources.cpus_per_task), "memory": resources.memory}
    env = [{"name": name, "value": value} for name, value in step.env]
    env.append({"name": "ATLAS_RUN", "value": context.identity.run_id})
    env.append({"name": "ATLAS_STEP", "value": step.name})
    extra: Manifest = {}
    if resources.gpus_per_node > 0:
        amounts[GPU_RESOURCE] = str(resources.gpus_per_node)
        # Not NVIDIA_VISIBLE_DEVICES: the device plugin sets it to the GPUs it allocated.
        env.append({"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "compute,utility"})
        extra["nodeSelector"] = {GPU_PRODUCT_LABEL: settings.gpu.product}
        extra["tolerations"] = [{"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]
    else:
        env.append(dict(NO_GPU_ENV))

    mounts: list[Manifest] = [
        {"name": m.role, "mountPath": f"{context.workdir}/{m.sub_path}", "subPath": m.sub_path}
        for m in step_mounts(workload)
    ]
    mounts.append({"name": "dshm", "mountPath": "/dev/shm"})  # noqa: S108 (a path in the container)
    roles = sorted({m.role for m in step_mounts(workload)})
    volumes = [_pvc_volume(role, context.claims) for role in roles]
    # PyTorch's DataLoader workers pass batches through /dev/shm; a container's default is 64 MiB.
    volumes.append(
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": _memory_text(shm_bytes(step, settings))}}
    )
    if context.source is not None:
        volumes.append(
            {
                "name": "source",
                "configMap": {
                    "name": context.source.config_map,
                    "items": [{"key": f.key, "path": f.path, "mode": f.mode} for f in context.source.files],
                },
            }
        )
        mounts.append({"name": "source", "mountPath": SOURCE_DIR, "readOnly": True})
        env.append({"name": SOURCE_ENV, "value": SOURCE_DIR})
    container = {
        "name": "step",
        "image": context.image,
        # args, not command: the image's entrypoint (arbitrary-UID passwd entry) runs first.
        "args": argv,
        "workingDir": context.workdir,
        "env": env,
        # Requests equal limits: Guaranteed QoS, no CPU throttling below the request, and the
        # LimitRange's defaults never apply to a step.
        "resources": {"requests": dict(amounts), "limits": dict(amounts)},
        "volumeMounts": mounts,
        "securityContext": dict(CONTAINER_SECURITY),
    }
    metadata = _metadata(labels, context.namespace)
    return _job(
        metadata,
        labels,
        _pod_spec(context, [container], volumes, **extra),
        settings.pipeline.backoff_limit,
        resources.walltime_seconds,
    )


# ---------------------------------------------------------------------------------------------
# Before the pipeline: the volumes' directories and the data


def _helper_container(context: PodContext, name: str, image: pulumi.Input[str], command: list[str]) -> Manifest:
    amounts = {"cpu": STAGING_CPU.text, "memory": STAGING_MEMORY.text}
    return {
        "name": name,
        "image": image,
        # command, not args: helpers do not need the workload entrypoint (and may use other images).
        "command": command,
        # HOME: OpenShift's arbitrary UID has none; aws-cli and Python caches write there.
        "env": [dict(NO_GPU_ENV), {"name": "HOME", "value": "/tmp"}],  # noqa: S108 (a path in the container)
        "resources": {"requests": dict(amounts), "limits": dict(amounts)},
        "securityContext": dict(CONTAINER_SECURITY),
    }


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
    container = _helper_container(context, "prepare", context.image, ["/bin/sh", "-c", script])
    container["volumeMounts"] = [{"name": role, "mountPath": f"{MOUNT_ROOT}/{role}"} for role in VOLUME_ROLES]
    labels = context.identity.labels("prepare-volumes")
    volumes = [_pvc_volume(role, context.claims) for role in VOLUME_ROLES]
    return _job(_metadata(labels, context.namespace), labels, _pod_spec(context, [container], volumes), 2, deadline_s)


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
    volumes: list[Manifest] = [_pvc_volume(role, context.claims)]
    pod_extra: Manifest = {}
    if source.scheme == "s3":
        command = ["aws", "s3", "sync" if source.url.endswith("/") else "cp", source.url, f"{destination}/"]
        command.append("--only-show-errors")
        if settings.data.s3.endpoint:
            command += ["--endpoint-url", settings.data.s3.endpoint]
        if settings.data.s3.credentials_secret is None:
            command.append("--no-sign-request")
        container = _helper_container(context, "stage", settings.data.s3.image, command)
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
        container = _helper_container(context, "stage", settings.data.image or context.image, command)
        mounts.append({"name": "scripts", "mountPath": SCRIPTS_DIR, "readOnly": True})
        volumes.append({"name": "scripts", "configMap": {"name": scripts_config_map}})
    container["volumeMounts"] = mounts
    labels = {**context.identity.labels("staging"), "atlas.dev/data-input": source.input}
    pod_spec = _pod_spec(context, [container], volumes)
    pod_spec.update(pod_extra)
    return _job(_metadata(labels, context.namespace), labels, pod_spec, 2, settings.data.timeout_seconds)


# ---------------------------------------------------------------------------------------------
# The monitor


# ---------------------------------------------------------------------------------------------
# Network policy: nothing reaches the run's pods but the monitor, from where it is read

# OpenShift labels the router's namespace, and host-network traffic (kubelet probes, a host-network
# router), with these policy groups (OpenShift's "allow from the ingress controller" policies).
OPENSHIFT_INGRESS_GROUP = {"policy-group.network.openshift.io/ingress": ""}
OPENSHIFT_HOST_NETWORK_GROUP = {"policy-group.network.openshift.io/host-network": ""}


def network_policies(
    settings: OpenShiftSettings, identity: RunIdentity, namespace: pulumi.Input[str]
) -> list[Manifest]:
    """Ingress denied to every pod of the namespace (steps, staging, builds); the monitor let in
    only from where it is read: on OpenShift its login proxy from the router, and the monitor's
    own port from host network alone (the API server's service proxy, the kubelet's probes); on
    plain Kubernetes from anywhere to that one port, because the API
    server's service proxy (how scripts/compare reads it) comes from the control plane's own
    network, which a NetworkPolicy cannot name portably; there no Ingress publishes it unless a
    host is configured. Egress is left open: steps fetch data, images and the API server."""
    labels = identity.labels("network-policy")
    policies: list[Manifest] = [
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": _metadata({**labels, "atlas.dev/policy": "deny-ingress"}, namespace),
            "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
        }
    ]
    if settings.monitor.enabled:
        rules: list[Manifest]
        if settings.is_openshift:
            router = [
                {"namespaceSelector": {"matchLabels": dict(group)}}
                for group in (OPENSHIFT_INGRESS_GROUP, OPENSHIFT_HOST_NETWORK_GROUP)
            ]
            host_network = [{"namespaceSelector": {"matchLabels": dict(OPENSHIFT_HOST_NETWORK_GROUP)}}]
            rules = [
                # The login proxy, from the router (a host-network router on some installs).
                {"ports": [_tcp(MONITOR_PROXY_PORT)], "from": router},
                # The monitor itself, only from host network: the API server's service proxy
                # (scripts/compare, with the user's own credentials) and the kubelet's probes.
                {"ports": [_tcp(MONITOR_PORT)], "from": host_network},
            ]
        else:
            rules = [{"ports": [_tcp(MONITOR_PORT)]}]
        policies.append(
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "metadata": _metadata({**labels, "atlas.dev/policy": "monitor-ingress"}, namespace),
                "spec": {
                    "podSelector": {"matchLabels": monitor_selector(identity)},
                    "policyTypes": ["Ingress"],
                    "ingress": rules,
                },
            }
        )
    return policies


def _tcp(port: int) -> Manifest:
    return {"protocol": "TCP", "port": port}


def monitor_selector(identity: RunIdentity) -> dict[str, str]:
    # Stable across runs: a Deployment's selector cannot change without replacing it.
    return {"app.kubernetes.io/component": "monitor", "atlas.dev/stack": identity.stack}


# How long `pulumi up` waits for the monitor to be ready (pulumi-kubernetes' default is 10
# minutes): it starts after the data is staged, so its image is on the node already, and a
# small HTTP server not ready in 3 minutes is a node or cluster fault worth reporting sooner.
MONITOR_AWAIT_S = 180
READINESS_PERIOD_S = 2


def _monitor_await(settings: OpenShiftSettings) -> dict[str, str]:
    """The monitor objects' await annotations: awaited for MONITOR_AWAIT_S, or not at all."""
    if settings.monitor.await_ready:
        return {"pulumi.com/timeoutSeconds": str(MONITOR_AWAIT_S)}
    return {SKIP_AWAIT: "true"}


def monitor_deployment(
    workload: Workload,
    settings: OpenShiftSettings,
    context: PodContext,
    app_config_map: pulumi.Input[str],
    namespace_name: str,
) -> Manifest:
    """A one-replica, read-only JSON view of the run's telemetry and training log; on OpenShift
    behind the oauth-proxy sidecar (`login_proxy`), which only it may reach from outside."""
    labels = context.identity.labels("monitor")
    telemetry_role, telemetry_path = volume_path(workload, workload.telemetry.root)
    logs_role, logs_path = volume_path(workload, workload.logs.root)
    read_roles = sorted({telemetry_role, logs_role})
    amounts = {"cpu": MONITOR_CPU.text, "memory": MONITOR_MEMORY.text}
    probe = {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 10}
    # Readiness every 2 s: the first check comes as the container starts, before the server
    # listens, and at 10 s the Deployment waited 10 s more to be available (bench/local_vs_script).
    readiness = {**probe, "periodSeconds": READINESS_PERIOD_S}
    container = {
        "name": "monitor",
        "image": settings.monitor.image or context.image,
        "command": [
            "python3",
            f"{SCRIPTS_DIR}/{MONITOR_APP}",
            "--port",
            str(MONITOR_PORT),
            "--telemetry-dir",
            f"{MOUNT_ROOT}/{telemetry_role}/{telemetry_path}",
            "--logs-dir",
            f"{MOUNT_ROOT}/{logs_role}/{logs_path}",
            *(["--experiment", workload.logs.experiment] if workload.logs.experiment is not None else []),
            "--run",
            context.identity.run_id,
        ],
        "ports": [{"name": "http", "containerPort": MONITOR_PORT, "protocol": "TCP"}],
        "env": [dict(NO_GPU_ENV)],
        "resources": {"requests": dict(amounts), "limits": {"cpu": "500m", "memory": MONITOR_MEMORY.text}},
        "readinessProbe": readiness,
        "livenessProbe": {**probe, "initialDelaySeconds": 10},
        "volumeMounts": [{"name": "app", "mountPath": SCRIPTS_DIR, "readOnly": True}]
        + [{"name": role, "mountPath": f"{MOUNT_ROOT}/{role}", "readOnly": True} for role in read_roles],
        "securityContext": {**CONTAINER_SECURITY, "readOnlyRootFilesystem": True},
    }
    volumes = [{"name": "app", "configMap": {"name": app_config_map}}]
    volumes += [_pvc_volume(role, context.claims, read_only=True) for role in read_roles]
    pod_extra: Manifest = {}
    containers = [container]
    if settings.is_openshift:
        proxy = login_proxy(settings, context, namespace_name, settings.monitor.image or context.image)
        containers.append(proxy.container)
        volumes += proxy.volumes
        # The ServiceAccount's token goes to the proxy alone (SERVICE_ACCOUNT_FILES), not
        # automounted into every container: the monitor never calls the API.
        pod_extra = {"initContainers": [proxy.init_container], "serviceAccountName": proxy.service_account}
    selector = monitor_selector(context.identity)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(labels, context.namespace, _monitor_await(settings)),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": selector},
            # Recreate: a second pod would wait for the RWO claims of a cluster without RWX.
            "strategy": {"type": "Recreate"},
            "template": {
                "metadata": {"labels": {**labels, **selector}},
                "spec": _pod_spec(context, containers, volumes, **pod_extra),
            },
        },
    }


def monitor_service(settings: OpenShiftSettings, context: PodContext) -> Manifest:
    # Never awaited: the Deployment's await already holds `up` until its pod is ready, and
    # pulumi-kubernetes' own wait for the Service's endpoints ended about 10 s after that.
    annotations = {SKIP_AWAIT: "true"}
    ports = [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}]
    if settings.is_openshift:
        # The service CA operator writes a certificate for <service>.<namespace>.svc into this
        # Secret: the proxy serves it, and the router trusts it for the reencrypt Route.
        annotations[SERVING_CERT_ANNOTATION] = monitor_names(context.identity).tls_secret
        ports.append({"name": "https", "port": 443, "targetPort": "https", "protocol": "TCP"})
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(context.identity.labels("monitor"), context.namespace, annotations),
        "spec": {"type": "ClusterIP", "selector": monitor_selector(context.identity), "ports": ports},
    }


def monitor_route(settings: OpenShiftSettings, context: PodContext, service: pulumi.Input[str]) -> Manifest:
    """TLS from the browser to the router and again from the router to the login proxy
    (reencrypt): the monitor's own plain-HTTP port is never what the Route reaches."""
    spec: Manifest = {
        "to": {"kind": "Service", "name": service, "weight": 100},
        "port": {"targetPort": "https"},
        "tls": {"termination": "reencrypt", "insecureEdgeTerminationPolicy": "Redirect"},
        "wildcardPolicy": "None",
    }
    if settings.monitor.host:
        spec["host"] = settings.monitor.host
    names = monitor_names(context.identity)
    return {
        "apiVersion": "route.openshift.io/v1",
        "kind": "Route",
        "metadata": _metadata(context.identity.labels("monitor"), context.namespace, name=names.route),
        "spec": spec,
    }


# ---------------------------------------------------------------------------------------------
# The monitor behind OpenShift's login
#
# OpenShift's oauth-proxy (github.com/openshift/oauth-proxy) runs beside the monitor: a browser
# is sent to the cluster's own login, and only a user who may `get` Services in the project is
# let through (a subject access review made with that user's token). The proxy is an OAuth
# client through its ServiceAccount, whose annotation names the Route the login returns to.

SERVING_CERT_ANNOTATION = "service.beta.openshift.io/serving-cert-secret-name"
OAUTH_REDIRECT_ANNOTATION = "serviceaccounts.openshift.io/oauth-redirectreference.primary"
PROXY_TLS_DIR = "/etc/tls/private"
PROXY_SESSION_DIR = "/etc/oauth-proxy"
PROXY_COOKIE_SECRET = f"{PROXY_SESSION_DIR}/cookie-secret"
# Written once per pod into memory by the init container: the session cookie's AES key never
# leaves the pod (not in Pulumi's state, not in a Secret); a new pod means logging in again.
# 16 random bytes as 32 hex characters: a 32-byte key, as oauth-proxy asks (16, 24 or 32).
COOKIE_SECRET_PROGRAM = (
    "import os, secrets; "
    f"fd = os.open({PROXY_COOKIE_SECRET!r}, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600); "
    "os.write(fd, secrets.token_hex(16).encode())"
)
# The Services `get` the proxy checks: who may see the project's Services may see its monitor.
MONITOR_ACCESS = {"resource": "services", "verb": "get"}


@dataclass(frozen=True)
class MonitorNames:
    """Names fixed in advance for the objects that name one another (the ServiceAccount's
    redirect names the Route, the proxy's flags the ServiceAccount, the Deployment the
    certificate Secret the Service's annotation asks for), so no name waits on a creation."""

    route: str
    service_account: str
    tls_secret: str


def monitor_names(identity: RunIdentity) -> MonitorNames:
    # The Route's generated host is <route>-<namespace>.<apps domain>, one DNS label of at most
    # 63 characters: the base is kept short to leave room for the namespace.
    base = image_stream_name(identity.workload, identity.stack)[:32].rstrip("-")
    return MonitorNames(
        route=f"{base}-monitor", service_account=f"{base}-monitor", tls_secret=f"{base}-monitor-tls"
    )


def monitor_service_account(context: PodContext) -> Manifest:
    """The proxy's OAuth client: OpenShift lets a ServiceAccount be one, returning logins to the
    Route its annotation names. It is bound to no role: the proxy checks users' own access."""
    names = monitor_names(context.identity)
    route = {"kind": "Route", "name": names.route}
    redirect = {"kind": "OAuthRedirectReference", "apiVersion": "v1", "reference": route}
    annotations = {OAUTH_REDIRECT_ANNOTATION: json.dumps(redirect, separators=(",", ":"))}
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _metadata(
            context.identity.labels("monitor"), context.namespace, annotations, name=names.service_account
        ),
    }


# Where a pod's ServiceAccount credentials are, and what OpenShift's own automount puts there
# (a bound token, the API server's CA, the service CA, the namespace); the proxy reads them as
# its OAuth client secret and to call the API.
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
SERVICE_ACCOUNT_FILES: Manifest = {
    "name": "oauth-client",
    "projected": {
        "sources": [
            {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
            {
                "configMap": {
                    "name": "openshift-service-ca.crt",
                    "items": [{"key": "service-ca.crt", "path": "service-ca.crt"}],
                }
            },
            {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
        ]
    },
}


@dataclass(frozen=True)
class LoginProxy:
    container: Manifest
    init_container: Manifest
    volumes: list[Manifest]
    service_account: str


def login_proxy(
    settings: OpenShiftSettings, context: PodContext, namespace_name: str, python_image: pulumi.Input[str]
) -> LoginProxy:
    """The oauth-proxy sidecar, the init container that writes its cookie key, their volumes."""
    names = monitor_names(context.identity)
    access = json.dumps({"namespace": namespace_name, **MONITOR_ACCESS}, separators=(",", ":"))
    resources = {
        "requests": {"cpu": MONITOR_PROXY_CPU.text, "memory": MONITOR_PROXY_MEMORY.text},
        "limits": {"cpu": "200m", "memory": MONITOR_PROXY_MEMORY.text},
    }
    probe = {"httpGet": {"path": "/oauth/healthz", "port": "https", "scheme": "HTTPS"}, "periodSeconds": 10}
    session_mount = {"name": "oauth-session", "mountPath": PROXY_SESSION_DIR}
    container = {
        "name": "oauth-proxy",
        "image": settings.monitor.proxy_image,
        "args": [
            "--provider=openshift",
            f"--openshift-service-account={names.service_account}",
            f"--https-address=:{MONITOR_PROXY_PORT}",
            "--http-address=",
            f"--upstream=http://localhost:{MONITOR_PORT}",
            f"--tls-cert={PROXY_TLS_DIR}/tls.crt",
            f"--tls-key={PROXY_TLS_DIR}/tls.key",
            f"--cookie-secret-file={PROXY_COOKIE_SECRET}",
            f"--openshift-sar={access}",
            "--skip-provider-button",
        ],
        "ports": [{"name": "https", "containerPort": MONITOR_PROXY_PORT, "protocol": "TCP"}],
        "resources": resources,
        "readinessProbe": {**probe, "periodSeconds": READINESS_PERIOD_S},
        "livenessProbe": {**probe, "initialDelaySeconds": 10},
        "volumeMounts": [
            {"name": "oauth-tls", "mountPath": PROXY_TLS_DIR, "readOnly": True},
            {**session_mount, "readOnly": True},
            {"name": "oauth-client", "mountPath": SERVICE_ACCOUNT_DIR, "readOnly": True},
        ],
        "securityContext": {**CONTAINER_SECURITY, "readOnlyRootFilesystem": True},
    }
    init_container = {
        "name": "oauth-cookie-secret",
        "image": python_image,
        "command": ["python3", "-c", COOKIE_SECRET_PROGRAM],
        "env": [dict(NO_GPU_ENV)],
        "resources": resources,
        "volumeMounts": [session_mount],
        "securityContext": {**CONTAINER_SECURITY, "readOnlyRootFilesystem": True},
    }
    volumes = [
        {"name": "oauth-tls", "secret": {"secretName": names.tls_secret}},
        {"name": "oauth-session", "emptyDir": {"medium": "Memory", "sizeLimit": "1Mi"}},
        SERVICE_ACCOUNT_FILES,
    ]
    return LoginProxy(container, init_container, volumes, names.service_account)


def monitor_ingress(settings: OpenShiftSettings, context: PodContext, service: pulumi.Input[str]) -> Manifest:
    rule: Manifest = {
        "http": {
            "paths": [
                {
                    "path": "/",
                    "pathType": "Prefix",
                    "backend": {"service": {"name": service, "port": {"name": "http"}}},
                }
            ]
        }
    }
    if settings.monitor.host:
        rule["host"] = settings.monitor.host
    spec: Manifest = {"rules": [rule]}
    if settings.monitor.ingress_class:
        spec["ingressClassName"] = settings.monitor.ingress_class
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        # An Ingress is awaited until a controller fills its status: none on the local cluster.
        "metadata": _metadata(context.identity.labels("monitor"), context.namespace, _monitor_await(settings)),
        "spec": spec,
    }
