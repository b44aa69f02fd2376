"""Names and labels: what ties every object to its stack and run, and what pulumi-kubernetes awaits.

The labels (and thereby the selectors) every object carries, the metadata built from them, and
the annotations that tell pulumi-kubernetes whether and for what to wait.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi

from infra.openshift.settings import OpenShiftSettingsError
from infra.validation import Fields

Manifest = dict[str, Any]

MANAGED_BY = "atlas"
SKIP_AWAIT = "pulumi.com/skipAwait"
WAIT_FOR = "pulumi.com/waitFor"


@dataclass(frozen=True)
class RunIdentity:
    """What ties every object to the stack and the run (labels, and thereby selectors)."""

    stack: str
    run_id: str
    workload: str

    def labels(self, component: str, step: str | None = None) -> dict[str, str]:
        labels = {
            "app.kubernetes.io/managed-by": MANAGED_BY,
            "app.kubernetes.io/part-of": "atlas",
            "app.kubernetes.io/component": component,
            "atlas.dev/stack": self.stack,
            "atlas.dev/run": self.run_id,
            "atlas.dev/workload": self.workload,
        }
        if step is not None:
            labels["atlas.dev/step"] = step
        return labels


def check_label_value(value: str, what: str) -> str:
    return Fields(OpenShiftSettingsError).label_value(value, what)


def object_metadata(
    labels: Mapping[str, str],
    namespace: pulumi.Input[str] | None = None,
    annotations: Mapping[str, str] | None = None,
    name: pulumi.Input[str] | None = None,
) -> Manifest:
    metadata: Manifest = {"labels": dict(labels)}
    if name is not None:
        metadata["name"] = name
    if namespace is not None:
        metadata["namespace"] = namespace
    if annotations:
        metadata["annotations"] = dict(annotations)
    return metadata
