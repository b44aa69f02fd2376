"""The Kubernetes target model: which cluster (kubeconfig and context) and which namespace the
OpenShift side uses.

`KubernetesTarget` is what infra/config.py reads from `atlas:openshift` (flavour, namespace,
kubeconfig, context); the components, the backfill component and the comparison take it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class KubernetesTarget:
    """The OpenShift (or plain Kubernetes) side of a stack."""

    flavour: str  # "openshift" or "kubernetes"
    namespace: str
    # A kubeconfig file, or None for the provider's ambient one (KUBECONFIG, ~/.kube/config).
    kubeconfig_path: Path | None = None
    context: str | None = None  # None: the kubeconfig's current context

    @property
    def is_openshift(self) -> bool:
        return self.flavour == "openshift"
