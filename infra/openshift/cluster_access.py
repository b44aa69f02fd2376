"""How the stack program reaches a target's cluster: the pulumi-kubernetes provider's inputs, the
JobCompletions' API access and the outputs' `api_url`, all from one kubeconfig resolution.

`cluster_access(target)` resolves the target (infra/kubeconfig.py: the stack's file, else
KUBECONFIG merged, else ~/.kube/config; the named context, else the current one) and decides
what pulumi-kubernetes is given. Checked against pulumi-kubernetes 4.25's provider:
- with a `kubeconfig` input it reads that one file (or content) itself, without resolving the
  file's relative references against its folder; without one it loads KUBECONFIG's files (or
  ~/.kube/config) with client-go's loading rules, which merge them exactly as the resolution
  does; a `context` input selects any context by name, `/` and `:` included;
- so the provider gets the stack's file as a path where the stack names one, and nothing
  (its own identical merge) otherwise, with the context as the stack names it: the inputs a stack
  had before stay identical, so its provider (and every object under it) is not replaced;
- credentials never enter state: a path is read again by every `pulumi up`, `refresh` and
  `destroy`, so logging in again (a new token in the same file) is enough; an inline copy in the
  provider's inputs would keep the expired token for `destroy`, which runs from state alone.
What could make the provider and Atlas read different things is refused before any resource:
KUBECONFIG entries relative to a working folder (the program and each provider run in their
own), and a named file whose references are relative to its folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from infra.kubeconfig import KubeConfigError, ResolvedContext, resolve_context
from infra.openshift.completion import ApiAccess
from infra.openshift.target import KubernetesTarget

if TYPE_CHECKING:
    import pulumi
    import pulumi_kubernetes as k8s


@dataclass(frozen=True)
class ClusterAccess:
    """What the stack program hands pulumi-kubernetes and its own completions for one target."""

    resolved: ResolvedContext
    provider_kubeconfig: str | None  # a path, or None: the provider's own KUBECONFIG / ~/.kube/config
    provider_context: str | None  # as the stack names it (None: the current context)
    completion: ApiAccess

    @property
    def api_url(self) -> str:
        return self.resolved.server


def cluster_access(target: KubernetesTarget) -> ClusterAccess:
    """The one resolution of `target`, and what the provider and completions get from it;
    KubeConfigError (naming the key and the fix) where they would not reach the same cluster."""
    request = target.kube_request()
    resolved = resolve_context(request)
    if resolved.relative_entries:
        raise KubeConfigError(
            f"KUBECONFIG lists {', '.join(resolved.relative_entries)} relative to the working folder, which the "
            "Pulumi program and pulumi-kubernetes do not share; list absolute paths "
            "(`export KUBECONFIG=$(realpath <file>)`)"
        )
    kubeconfig = None
    if target.kubeconfig_path is not None:
        if resolved.has_relative_references:
            raise KubeConfigError(
                f"{request.file_key}: {target.kubeconfig_path} names files relative to its own folder, which "
                "pulumi-kubernetes resolves against its working folder instead; write absolute paths, or embed "
                "them (`kubectl config view --raw --flatten --minify --context=<name> > <file>`)"
            )
        kubeconfig = str(target.kubeconfig_path)
    access = ApiAccess(
        kubeconfig,
        target.context,
        flavour=target.flavour,
        allow_insecure_tls=target.insecure_skip_tls_verify,
    )
    return ClusterAccess(resolved, kubeconfig, target.context, access)


def cluster_provider(
    name: str, access: ClusterAccess, parent: pulumi.Resource, *, server_side_apply: bool = True
) -> k8s.Provider:
    """A pulumi-kubernetes provider for the target's cluster, as the resolution decided."""
    import pulumi
    import pulumi_kubernetes as k8s

    return k8s.Provider(
        name,
        kubeconfig=access.provider_kubeconfig,
        context=access.provider_context,
        # Server-side apply refuses unknown fields, as `oc apply` would: a typo is an error.
        enable_server_side_apply=server_side_apply,
        opts=pulumi.ResourceOptions(parent=parent),
    )
