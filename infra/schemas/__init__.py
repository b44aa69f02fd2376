"""The official API schemas Atlas checks its objects against, kept in the repository.

Two Swagger 2 documents, each cut down to the definitions Atlas needs (the kinds it creates
and everything they reference), with their source recorded in the document's
`info.x-atlas-source`:

- `openshift-openapi.json`: from openshift/api's `openapi/openapi.json` at the commit pinned in
  `toolchain/pins.toml` (`[openshift_api]`). The Go module proxy does not serve
  `github.com/openshift/api` at any recent commit, so the cut is committed here; it feeds the
  local cluster's OpenShift CRDs (`localenv/crds.py`) and the tests that check every
  object a stack renders, so that a misspelled field is refused as OpenShift would.
- `kubernetes-openapi.json`: from `k8s.io/kubernetes`'s `api/openapi-spec/swagger.json` at the
  pinned Kubernetes version (the module `scripts/bootstrap` builds the control plane from), for
  the kinds OpenShift's document does not carry (batch/v1, apps/v1, networking.k8s.io/v1, ...).

`python -m infra.schemas.regenerate` rewrites both from their sources (README.md beside this).
Nothing here reads a file outside the repository.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

Definitions = dict[str, dict[str, Any]]

HERE = Path(__file__).resolve().parent
OPENSHIFT_DOCUMENT = HERE / "openshift-openapi.json"
KUBERNETES_DOCUMENT = HERE / "kubernetes-openapi.json"

_CORE = "io.k8s.api.core.v1."
# Core kinds Atlas creates (or its local environment does), in both documents.
CORE_KINDS = tuple(
    _CORE + kind
    for kind in (
        "ConfigMap", "LimitRange", "Namespace", "Node", "PersistentVolume", "PersistentVolumeClaim",
        "Pod", "PodTemplateSpec", "ResourceQuota", "Secret", "Service", "ServiceAccount",
    )
)
RBAC_KINDS = tuple(
    f"io.k8s.api.rbac.v1.{kind}" for kind in ("ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")
)

# The roots of each cut: every definition they reference is kept with them.
OPENSHIFT_ROOTS: tuple[str, ...] = (
    "com.github.openshift.api.build.v1.Build",
    "com.github.openshift.api.build.v1.BuildConfig",
    "com.github.openshift.api.image.v1.ImageStream",
    "com.github.openshift.api.image.v1.ImageStreamTag",
    "com.github.openshift.api.project.v1.Project",
    "com.github.openshift.api.project.v1.ProjectRequest",
    "com.github.openshift.api.route.v1.Route",
    "com.github.openshift.api.security.v1.SecurityContextConstraints",
    *CORE_KINDS,
    *RBAC_KINDS,
)
KUBERNETES_ROOTS: tuple[str, ...] = (
    "io.k8s.api.apps.v1.DaemonSet",
    "io.k8s.api.apps.v1.Deployment",
    "io.k8s.api.batch.v1.Job",
    "io.k8s.api.networking.v1.Ingress",
    "io.k8s.api.networking.v1.NetworkPolicy",
    "io.k8s.api.scheduling.v1.PriorityClass",
    "io.k8s.api.storage.v1.StorageClass",
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition",
    *CORE_KINDS,
    *RBAC_KINDS,
)


class SchemaDocumentError(ValueError):
    """A schema document is missing, malformed or not closed under its references."""


def ref_name(ref: str) -> str:
    """`#/definitions/<name>` -> name; any other $ref is refused, naming it."""
    prefix = "#/definitions/"
    if not ref.startswith(prefix):
        raise SchemaDocumentError(f"unsupported $ref {ref!r}: only {prefix}<name> is resolved")
    return ref[len(prefix):]


def references(node: Any) -> Iterable[str]:
    """The definition names a schema node refers to, at any depth."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield ref_name(value)
            else:
                yield from references(value)
    elif isinstance(node, list):
        for item in node:
            yield from references(item)


def closure(definitions: Mapping[str, Any], roots: Iterable[str]) -> Definitions:
    """The roots and every definition reachable from them; a root or reference that the
    document does not define is an error naming it."""
    kept: Definitions = {}
    todo = list(roots)
    missing = sorted(name for name in todo if name not in definitions)
    if missing:
        raise SchemaDocumentError(f"the source document does not define {', '.join(missing)}")
    while todo:
        name = todo.pop()
        if name in kept:
            continue
        if name not in definitions:
            raise SchemaDocumentError(f"$ref to {name}, which the source document does not define")
        kept[name] = definitions[name]
        todo.extend(ref for ref in references(definitions[name]) if ref not in kept)
    return dict(sorted(kept.items()))


def load_document(path: Path) -> dict[str, Any]:
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise SchemaDocumentError(
            f"{path} is missing: it is part of the repository (restore it with git, or regenerate it "
            "with `python -m infra.schemas.regenerate`)"
        ) from None
    if not isinstance(document.get("definitions"), dict):
        raise SchemaDocumentError(f"{path}: no `definitions` object (not a Swagger 2 document?)")
    return dict(document)


@functools.cache
def openshift_definitions() -> Definitions:
    """OpenShift's definitions (its own kinds, core/v1 and rbac/v1), as the pinned commit has them."""
    return dict(load_document(OPENSHIFT_DOCUMENT)["definitions"])


@functools.cache
def kubernetes_definitions() -> Definitions:
    """Kubernetes' definitions for the kinds Atlas creates, at the pinned Kubernetes version."""
    return dict(load_document(KUBERNETES_DOCUMENT)["definitions"])


def source_of(path: Path) -> dict[str, Any]:
    """Where a committed document was cut from (`info.x-atlas-source`)."""
    return dict(load_document(path)["info"]["x-atlas-source"])
