"""Kubernetes objects given as whole manifests, for the OpenShift kinds pulumi-kubernetes has no
class for (ProjectRequest, ImageStream, BuildConfig, Route).

`pulumi_kubernetes.apiextensions.CustomResource` takes only `spec`, but a ProjectRequest keeps
`displayName` and `description` at the top level; this class sends every top-level field of
the manifest, which is what the provider applies for any kind.
"""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import version
from typing import Any

import pulumi


class KubernetesObject(pulumi.CustomResource):
    # Set by the engine for every property sent (the manifest's top-level keys).
    metadata: pulumi.Output[Any]
    spec: pulumi.Output[Any]
    # What the cluster reports (an ImageStream's tags once a build pushed); read after an await.
    status: pulumi.Output[Any]

    def __init__(
        self, resource_name: str, manifest: Mapping[str, Any], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        api_version = manifest["apiVersion"]
        kind = manifest["kind"]
        # The plugin version pulumi-kubernetes' own classes ask for (ignored with an explicit provider).
        opts = pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(version=version("pulumi-kubernetes")))
        props = {"status": None, **manifest}
        super().__init__(f"kubernetes:{api_version}:{kind}", resource_name, props, opts)
