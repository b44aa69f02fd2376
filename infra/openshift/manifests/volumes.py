"""Volumes: the run's claims, which of them each workload path is on, and the folder source's ConfigMap.

Layout on the volumes: every PVC's root mirrors the step's working directory, so a workload
path `data/ImageNet/train` is `<data PVC>/data/ImageNet/train`. Steps mount one subPath per
top-level directory the workload names (inputs on the data PVC, outputs on the results PVC,
the training logs on the logs PVC); staging and the monitor mount whole PVCs.

A folder source's files travel in one ConfigMap, mounted read-only into every step; so do Atlas's
entrypoint and sampler into the steps of an image Atlas did not build (TOOLS_DIR).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

import pulumi

from infra.openshift.manifests.labels import Manifest, RunIdentity
from infra.workload.model import Workload

VOLUME_ROLES = ("data", "results", "logs")


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
    """Inputs on the data PVC, outputs (and a sweep's results folder) on the results PVC, the
    training logs on the logs PVC, telemetry on the results PVC; one mount per top-level directory, first claim wins."""
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
    for step in workload.steps:
        if step.sweep is not None:
            # Each point's folder, under the sweep's results folder (declared as an output or not).
            claim(step.sweep.results, "results")
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


def pvc_volume(role: str, claims: Claims, read_only: bool = False) -> Manifest:
    source: Manifest = {"claimName": claims.of(role)}
    if read_only:
        source["readOnly"] = True
    return {"name": role, "persistentVolumeClaim": source}


# Where a folder source's files are mounted (read-only) in a step's container; the image's
# entrypoint copies them into the working directory before the step runs, as the HPC side
# stages them into the run directory.
SOURCE_DIR = "/opt/atlas/source"
SOURCE_ENV = "ATLAS_SOURCE_DIR"
# Where Atlas's entrypoint and the sampler's modules are mounted (read-only) in a step whose image
# Atlas did not build (infra/telemetry/bundle.py: pod_tools); Atlas's own images carry them.
TOOLS_DIR = "/opt/atlas/tools"


def tools_config_map_name(identity: RunIdentity) -> str:
    """The tools ConfigMap's exact name: one per run (stack and workload) in the namespace."""
    base = re.sub(r"[^a-z0-9-]+", "-", f"atlas-tools-{identity.workload}-{identity.stack}".lower())
    return base[:63].strip("-")


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
    """A ConfigMap of files (a folder source, or Atlas's tools) and the volume's items."""

    config_map: pulumi.Input[str]
    files: tuple[SourceFile, ...]

    def volume(self, name: str) -> Manifest:
        items = [{"key": f.key, "path": f.path, "mode": f.mode} for f in self.files]
        return {"name": name, "configMap": {"name": self.config_map, "items": items}}
