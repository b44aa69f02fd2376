"""How the stack program reaches a target's cluster: the pulumi-kubernetes provider's inputs, the
JobCompletions' API access and the outputs' `api_url`, all from one kubeconfig resolution.

`cluster_access(target)` resolves the target (infra/kubeconfig.py: the stack's file, else
KUBECONFIG merged, else ~/.kube/config; the named context, else the current one) and decides
what pulumi-kubernetes is given. What pulumi-kubernetes 4.25 does, read in its source
(provider/pkg/provider/provider.go, util.go) and its Python SDK:
- the SDK's `Provider` puts `$KUBECONFIG` itself into the `kubeconfig` input when none is given,
  as one string: with several files (`a:b`) that string is neither a file nor a kubeconfig, and
  the provider fails. Several files are therefore never left to it;
- a `kubeconfig` input is one file (or a kubeconfig's text), read without resolving its relative
  references against its folder; with no input and KUBECONFIG unset, client-go loads
  ~/.kube/config, resolving them; a `context` input selects any context by name, `/` and `:`
  included.
So the provider is given:
- nothing, where the resolution read ~/.kube/config (client-go reads the same);
- the path of the one file that holds the context, its cluster and its user with absolute
  references (the stack's file, or the KUBECONFIG file `oc login` wrote them into): the inputs a
  stack had before stay identical (its provider, and every object under it, is not replaced), and
  no credential enters the state: every `pulumi up`, `refresh` and `destroy` reads the file
  again, so logging in again (a new token in the same file) is enough;
- otherwise (entries spread over several KUBECONFIG files, or references relative to a file's
  folder) the context alone as a kubeconfig text (`kubeconfig.minified`), as a Pulumi secret:
  encrypted in state, and what `destroy` (which runs from state alone) will use, so after a new
  login run `pulumi up` (or `refresh --run-program`) before `destroy`.
The context input is the stack's, as before. KUBECONFIG entries relative to a working folder are
refused before any resource: the program and each provider run in folders of their own.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from infra.kubeconfig import KubeConfigError, ResolvedContext, minified, resolve_context
from infra.openshift.completion import ApiAccess
from infra.openshift.target import KubernetesTarget

if TYPE_CHECKING:
    import pulumi
    import pulumi_kubernetes as k8s

HOME_KUBECONFIG = "~/.kube/config"


@dataclass(frozen=True)
class ClusterAccess:
    """What the stack program hands pulumi-kubernetes and its own completions for one target."""

    resolved: ResolvedContext
    provider_kubeconfig: str | None  # a path; None: the provider's own ~/.kube/config, or the text below
    provider_context: str | None  # as the stack names it (None: the current context)
    completion: ApiAccess
    # The context alone as a kubeconfig, handed to the provider as a secret where no one file will do.
    provider_kubeconfig_text: str | None = field(default=None, repr=False)

    @property
    def api_url(self) -> str:
        return self.resolved.server


def refuse_relative_entries(resolved: ResolvedContext) -> None:
    """KubeConfigError where KUBECONFIG lists files relative to the working folder: the program and
    each provider run in folders of their own, so they would read other files (or none)."""
    if resolved.relative_entries:
        raise KubeConfigError(
            f"KUBECONFIG lists {', '.join(resolved.relative_entries)} relative to the working folder, which the "
            "Pulumi program and pulumi-kubernetes do not share; list absolute paths "
            "(`export KUBECONFIG=$(realpath <file>)`)"
        )


def cluster_access(target: KubernetesTarget) -> ClusterAccess:
    """The one resolution of `target`, and what the provider and completions get from it;
    KubeConfigError naming the fix where the context cannot be resolved for them."""
    resolved = resolve_context(target.kube_request())
    refuse_relative_entries(resolved)
    path: str | None = None
    text: str | None = None
    if target.kubeconfig_path is None and resolved.where == HOME_KUBECONFIG:
        pass  # client-go's own loading of ~/.kube/config, as the provider always had
    elif resolved.whole_in is not None:
        path = str(resolved.whole_in)
    else:
        text = minified(resolved)
    access = ApiAccess(path, target.context, flavour=target.flavour, allow_insecure_tls=target.insecure_skip_tls_verify)
    return ClusterAccess(resolved, path, target.context, access, text)


def cluster_provider(
    name: str, access: ClusterAccess, parent: pulumi.Resource, *, server_side_apply: bool = True
) -> k8s.Provider:
    """A pulumi-kubernetes provider for the target's cluster, as the resolution decided."""
    import pulumi
    import pulumi_kubernetes as k8s

    kubeconfig: pulumi.Input[str] | None = access.provider_kubeconfig
    if access.provider_kubeconfig_text is not None:
        kubeconfig = pulumi.Output.secret(access.provider_kubeconfig_text)
    return k8s.Provider(
        name,
        kubeconfig=kubeconfig,
        context=access.provider_context,
        # Server-side apply refuses unknown fields, as `oc apply` would: a typo is an error.
        enable_server_side_apply=server_side_apply,
        opts=pulumi.ResourceOptions(parent=parent),
    )
