"""Which nodes a pod may run on, as the Kubernetes scheduler decides it: its node selector (the GPU
product label among them), its required node affinity, and its tolerations against the nodes' taints.

The queue-wait estimate counts only these nodes: free GPUs on a node the step's pod could never be
placed on (a KWOK node whose taint it does not tolerate, a node of another GPU product) are no
capacity for it. Pure: a pod spec and node objects (the API's JSON) in, a placement and reasons out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# The node label NVIDIA's GPU feature discovery sets (infra/openshift/settings.py's GPU_PRODUCT_LABEL;
# named again here so the monitor reads a node without the OpenShift package's Pulumi imports).
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
# What every GPU step's pod tolerates (infra/openshift/manifests/pods.py's GPU_TOLERATION, which a
# unit test holds this to): the GPU nodes' taint.
GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
# Only these effects keep a pod off a node; PreferNoSchedule is a preference the scheduler may ignore.
BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


@dataclass(frozen=True)
class Toleration:
    """One toleration as the API writes it; an empty key with Exists tolerates every taint, an
    empty effect every effect."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def tolerates(self, taint: Mapping[str, Any]) -> bool:
        """Kubernetes' own rule (k8s.io/api/core/v1 Toleration.ToleratesTaint)."""
        if self.effect and self.effect != taint.get("effect", ""):
            return False
        if self.key and self.key != taint.get("key", ""):
            return False
        if self.operator == "Exists":
            return True
        return self.operator in ("Equal", "") and self.value == str(taint.get("value", "") or "")


@dataclass(frozen=True)
class Requirement:
    """One node affinity match expression (In, NotIn, Exists, DoesNotExist, Gt, Lt)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key, "")
        if self.operator == "In":
            return present and value in self.values
        if self.operator == "NotIn":
            return not present or value not in self.values
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        if self.operator in ("Gt", "Lt") and present and self.values:
            try:
                found, bound = int(value), int(self.values[0])
            except ValueError:
                return False
            return found > bound if self.operator == "Gt" else found < bound
        return False

    def text(self) -> str:
        listed = ",".join(self.values)
        return f"{self.key} {self.operator} ({listed})" if self.values else f"{self.key} {self.operator}"


@dataclass(frozen=True)
class Placement:
    """Where a pod may go: every `node_selector` label, one of `affinity_terms` (each a list of
    requirements that must all hold; none: any node), every blocking taint tolerated. `source`
    says where it was read."""

    node_selector: tuple[tuple[str, str], ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    affinity_terms: tuple[tuple[Requirement, ...], ...] = ()
    source: str = ""


def placement_of_pod_spec(spec: Mapping[str, Any], source: str = "") -> Placement:
    """A pod spec's (or a Job template's `spec.template.spec`) placement."""
    selector = spec.get("nodeSelector") or {}
    tolerations = tuple(
        Toleration(
            key=str(t.get("key") or ""),
            operator=str(t.get("operator") or "Equal"),
            value=str(t.get("value") or ""),
            effect=str(t.get("effect") or ""),
        )
        for t in spec.get("tolerations") or ()
    )
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {})
    terms = tuple(
        tuple(
            Requirement(str(e.get("key", "")), str(e.get("operator", "")), tuple(str(v) for v in e.get("values") or ()))
            for e in term.get("matchExpressions") or ()
        )
        for term in required.get("nodeSelectorTerms") or ()
    )
    return Placement(tuple(sorted((str(k), str(v)) for k, v in selector.items())), tolerations, terms, source)


def placement_of_selector(
    node_selector: Mapping[str, str], tolerations: Iterable[Mapping[str, str]], source: str
) -> Placement:
    """A placement given as a selector and tolerations (the stack outputs' record of it)."""
    return placement_of_pod_spec({"nodeSelector": dict(node_selector), "tolerations": list(tolerations)}, source)


def taint_text(taint: Mapping[str, Any]) -> str:
    value = taint.get("value")
    return f"{taint.get('key', '')}{'=' + str(value) if value else ''}:{taint.get('effect', '')}"


def why_not(node: Mapping[str, Any], placement: Placement) -> str:
    """Why the pod may not run on `node` ("" where it may): the first label, affinity term or
    taint that keeps it off, in the scheduler's words."""
    meta = node.get("metadata") or {}
    labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
    for key, wanted in placement.node_selector:
        found = labels.get(key)
        if found == wanted:
            continue
        if key == GPU_PRODUCT_LABEL:
            return f"GPU product {found or 'not labelled'}, the step asks for {wanted}"
        has = f"{key}={found}" if found is not None else "no such label"
        return f"node selector {key}={wanted}: the node has {has}"
    if placement.affinity_terms and not any(
        all(r.matches(labels) for r in term) for term in placement.affinity_terms
    ):
        first = next(r for r in placement.affinity_terms[0] if not r.matches(labels))
        return f"required node affinity: {first.text()} does not hold"
    for taint in (node.get("spec") or {}).get("taints") or ():
        if taint.get("effect") not in BLOCKING_EFFECTS:
            continue
        if not any(t.tolerates(taint) for t in placement.tolerations):
            return f"taint {taint_text(taint)} not tolerated"
    return ""


@dataclass(frozen=True)
class Eligibility:
    """The nodes a placement admits, and each other node with why it is left out."""

    admitted: tuple[str, ...]
    left_out: tuple[tuple[str, str], ...]  # (node, why)

    def summary(self, shown: int = 3) -> str:
        """`left out: a, b (why); c (why)`: names grouped by reason, at most `shown` each."""
        if not self.left_out:
            return ""
        by_reason: dict[str, list[str]] = {}
        for name, reason in self.left_out:
            by_reason.setdefault(reason, []).append(name)
        parts = []
        for reason, names in by_reason.items():
            listed = ", ".join(names[:shown]) + (f" +{len(names) - shown}" if len(names) > shown else "")
            parts.append(f"{listed} ({reason})")
        return "left out " + "; ".join(parts)


def eligibility(nodes: Sequence[Mapping[str, Any]], placement: Placement) -> Eligibility:
    admitted, left_out = [], []
    for node in nodes:
        name = str((node.get("metadata") or {}).get("name", ""))
        reason = why_not(node, placement)
        if reason:
            left_out.append((name, reason))
        else:
            admitted.append(name)
    return Eligibility(tuple(sorted(admitted)), tuple(sorted(left_out)))
