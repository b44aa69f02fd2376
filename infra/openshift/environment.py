"""OpenShiftEnvironment: the project (or namespace) a workload runs in, and what it holds.

On OpenShift the project comes from a ProjectRequest; on plain Kubernetes (the local
cluster) it is a Namespace. Later parts (quota, storage, image build, pipeline Jobs,
monitor) hang off the same component.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from infra.config import KubernetesTarget

MANAGED_BY = "atlas"


@dataclass
class OpenShiftEnvironmentArgs:
    target: KubernetesTarget
    stack: str
    workload: str
    labels: dict[str, str] = field(default_factory=dict)


class OpenShiftEnvironment(pulumi.ComponentResource):
    namespace: pulumi.Output[str]
    api_url: pulumi.Output[str]

    def __init__(self, name: str, args: OpenShiftEnvironmentArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("atlas:openshift:OpenShiftEnvironment", name, None, opts)
        target = args.target
        labels = {
            "app.kubernetes.io/managed-by": MANAGED_BY,
            "atlas.dev/stack": args.stack,
            "atlas.dev/workload": args.workload,
            **args.labels,
        }
        self.provider = k8s.Provider(
            f"{name}-provider",
            kubeconfig=str(target.kubeconfig_path) if target.kubeconfig_path else None,
            context=target.context,
            # Refuse unknown fields server-side, as `oc apply` would: a typo is an error.
            enable_server_side_apply=True,
            opts=pulumi.ResourceOptions(parent=self),
        )
        child = pulumi.ResourceOptions(parent=self, provider=self.provider)
        # The namespace's name is the one the user configured, so it is set exactly.
        self.namespace_resource = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=target.namespace, labels=labels),
            opts=child,
        )
        self.namespace = self.namespace_resource.metadata.apply(lambda m: m.name or target.namespace)
        self.api_url = pulumi.Output.from_input(_api_url(target))
        self.register_outputs({"namespace": self.namespace, "api_url": self.api_url})


def _api_url(target: KubernetesTarget) -> str:
    """The API server named by the kubeconfig (for outputs; no secret in it)."""
    if target.kubeconfig_path is None or not target.kubeconfig_path.exists():
        return ""
    import yaml

    doc = yaml.safe_load(target.kubeconfig_path.read_text()) or {}
    contexts = {c["name"]: c["context"] for c in doc.get("contexts", [])}
    current = target.context or doc.get("current-context")
    cluster_name = contexts.get(current, {}).get("cluster") if current else None
    for cluster in doc.get("clusters", []):
        if cluster_name is None or cluster["name"] == cluster_name:
            return str(cluster["cluster"]["server"])
    return ""
