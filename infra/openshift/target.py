"""The Kubernetes target model: which cluster (kubeconfig and context) and which namespace the
OpenShift side uses.

`KubernetesTarget` is what infra/config.py reads from `atlas:openshift` (flavour, namespace,
kubeconfig, context, insecure_skip_tls_verify); the components, the backfill component and the
comparison take it. `kube_request()` is what infra/kubeconfig.py resolves it with.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from infra.kubeconfig import KubeconfigRequest


@dataclass(frozen=True)
class KubernetesTarget:
    """The OpenShift (or plain Kubernetes) side of a stack."""

    flavour: str  # "openshift" or "kubernetes"
    namespace: str
    # A kubeconfig file, or None for the provider's ambient one (KUBECONFIG, ~/.kube/config).
    kubeconfig_path: Path | None = None
    context: str | None = None  # None: the kubeconfig's current context
    # Accept a cluster whose kubeconfig entry sets insecure-skip-tls-verify (refused otherwise).
    insecure_skip_tls_verify: bool = False

    def kube_request(self) -> KubeconfigRequest:
        """Where the cluster's kubeconfig is looked for, and what is accepted of it."""
        return KubeconfigRequest(
            file=self.kubeconfig_path,
            context=self.context,
            allow_insecure_tls=self.insecure_skip_tls_verify,
            flavour=self.flavour,
        )

    @property
    def is_openshift(self) -> bool:
        return self.flavour == "openshift"
