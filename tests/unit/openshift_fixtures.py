"""Shared by the OpenShift tests: Pulumi mocks that record what a program registers (inputs,
dependencies, options), and the settings and workload the stacks use."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pulumi
import yaml
from pulumi.runtime.mocks import MockMonitor

from infra.openshift.settings import OpenShiftSettings
from infra.openshift.settings_parser import parse_openshift_settings
from infra.openshift.target import KubernetesTarget
from infra.workload.load import load_workload
from infra.workload.model import Workload

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "stacks" / "Pulumi.openshift-gpu.yaml"
BIGGAN = REPO / "workloads" / "biggan" / "workload.yaml"
KEY = "atlas:openshift"


@dataclass
class Registered:
    typ: str
    name: str
    urn: str
    inputs: dict[str, Any]
    dependencies: list[str] = field(default_factory=list)
    delete_before_replace: bool = False
    replace_on_changes: list[str] = field(default_factory=list)
    create_timeout: str = ""
    provider: str = ""

    @property
    def kind(self) -> str:
        return str(self.inputs.get("kind", ""))


class RecordingMocks(pulumi.runtime.Mocks):
    """Returns inputs as outputs, filling in what the Kubernetes provider would: an auto-name
    (`<name>-<suffix>`) where metadata.name is unset, and a uid."""

    def __init__(self) -> None:
        self.by_name: dict[str, Registered] = {}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str, dict[str, Any]]:
        outputs = copy.deepcopy(args.inputs)
        metadata = outputs.get("metadata")
        if isinstance(metadata, dict):
            metadata.setdefault("name", f"{args.name}-0a1b2c3d")
            metadata["uid"] = f"uid-{args.name}"
        return f"{args.name}-id", outputs

    def call(self, args: pulumi.runtime.MockCallArgs) -> dict[str, Any]:
        return {}


class RecordingMonitor(MockMonitor):
    def __init__(self, mocks: RecordingMocks) -> None:
        super().__init__(mocks)
        self.recording = mocks
        self.registered: list[Registered] = []

    def RegisterResource(self, request: Any) -> Any:
        response = super().RegisterResource(request)
        if request.type != "pulumi:pulumi:Stack":
            inputs = pulumi.runtime.rpc.deserialize_properties(request.object)
            self.registered.append(
                Registered(
                    typ=request.type,
                    name=request.name,
                    urn=response.urn,
                    inputs=_integral(inputs),
                    dependencies=list(request.dependencies),
                    delete_before_replace=bool(request.deleteBeforeReplace),
                    replace_on_changes=list(request.replaceOnChanges),
                    create_timeout=request.customTimeouts.create if request.HasField("customTimeouts") else "",
                    provider=request.provider,
                )
            )
        return response

    def named(self, name: str) -> Registered:
        (found,) = [r for r in self.registered if r.name == name]
        return found

    def of_kind(self, kind: str) -> list[Registered]:
        return [r for r in self.registered if r.kind == kind]

    def urn_of(self, name: str) -> str:
        return self.named(name).urn

    def depends_on(self, name: str) -> set[str]:
        """Every URN `name` waits for, directly or through what it depends on."""
        by_urn = {r.urn: r for r in self.registered}
        seen: set[str] = set()
        pending = list(self.named(name).dependencies)
        while pending:
            urn = pending.pop()
            if urn not in seen:
                seen.add(urn)
                pending += by_urn[urn].dependencies if urn in by_urn else []
        return seen


def _integral(value: Any) -> Any:
    """Numbers travel as doubles over gRPC; the provider sends whole ones to the API as integers."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral(v) for v in value]
    return value


def install_mocks() -> RecordingMonitor:
    mocks = RecordingMocks()
    monitor = RecordingMonitor(mocks)
    pulumi.runtime.set_mocks(mocks, preview=False, monitor=monitor)
    return monitor


# --- The stacks' inputs

FILLED_PLACEHOLDERS = {
    "REPLACE_WITH_OC_CONTEXT": "atlas-biggan/api-moc-example:6443/alice",
    "REPLACE_WITH_ATLAS_GIT_URL": "https://github.com/example/atlas.git",
    "REPLACE_WITH_PPC64LE_PYTORCH_IMAGE": "quay.io/example/pytorch-ppc64le:2.5.1-cuda12.4",
}


def example_raw(fill: bool = True) -> dict[str, Any]:
    """The openshift-gpu example's `atlas:openshift` object, with placeholders filled in."""
    text = EXAMPLE.read_text()
    if fill:
        for placeholder, value in FILLED_PLACEHOLDERS.items():
            text = text.replace(placeholder, value)
    return dict(yaml.safe_load(text)["config"][KEY])


def example_settings() -> OpenShiftSettings:
    return parse_openshift_settings(example_raw(), KEY)


def local_raw() -> dict[str, Any]:
    """What the local stack's OpenShift side would hold: plain Kubernetes, a pre-built image,
    no await on what KWOK cannot make ready."""
    return {
        "flavour": "kubernetes",
        "namespace": "atlas-local",
        "kubeconfig": ".state/localenv/kube/kubeconfig",
        "storage": {"class": "atlas-local", "data": {"size": "300Gi"}},
        "image": {"reference": "registry.local/atlas/biggan:dev"},
        "data": {"sources": {"imagenet-train": "https://data.example.org/imagenet/train.tar"}},
        "monitor": {"await": False},
    }


def biggan() -> Workload:
    return load_workload(BIGGAN)


def target_for(settings: OpenShiftSettings, namespace: str = "atlas-biggan") -> KubernetesTarget:
    return KubernetesTarget(flavour=settings.flavour, namespace=namespace, kubeconfig_path=None, context=None)


def modified(raw: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    copied = copy.deepcopy(raw)
    change(copied)
    return copied
