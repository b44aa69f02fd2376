"""The Kubernetes and OpenShift objects of the OpenShift side, rendered as plain dicts: one module per concern.

Pure functions: the components in this package pass their results to pulumi-kubernetes, the
tests read them directly. Keys are the API's own (camelCase), so what a test checks, and
what the schema test validates against OpenShift's OpenAPI document, is what the API server
receives. Names of objects created in the same run (PVCs, the ServiceAccount, ConfigMaps)
arrive as `pulumi.Input[str]` and are placed as leaves, never used in computations, so the
same function serves preview (unknown names) and tests (plain strings).

Callers import from the module that owns a thing: `labels` (names, labels, await annotations),
`project` (ProjectRequest, quota, limits, claims, the steps' ServiceAccount), `image_build`
(ImageStream, BuildConfig), `volumes` (claims, mounts, the source ConfigMap), `pods` (what every
pod shares, the Job around it), `step_jobs`, `staging_jobs`, `network`, `monitor` (with its
login proxy).
"""

# What infra/openshift/environment.py reads as `manifests.<name>`, until it imports from the
# owning modules like the other components (it is being reworked at the same time).
from infra.openshift.manifests.labels import MANAGED_BY, SKIP_AWAIT, RunIdentity, check_label_value
from infra.openshift.manifests.network import network_policies
from infra.openshift.manifests.pods import PodContext
from infra.openshift.manifests.project import limit_range_spec, project_request, pvc_spec, quota_hard, service_account
from infra.openshift.manifests.volumes import (
    SOURCE_DIR,
    VOLUME_ROLES,
    Claims,
    SourceVolume,
    source_config_map_data,
    volume_path,
)

__all__ = [
    "MANAGED_BY",
    "SKIP_AWAIT",
    "SOURCE_DIR",
    "VOLUME_ROLES",
    "Claims",
    "PodContext",
    "RunIdentity",
    "SourceVolume",
    "check_label_value",
    "limit_range_spec",
    "network_policies",
    "project_request",
    "pvc_spec",
    "quota_hard",
    "service_account",
    "source_config_map_data",
    "volume_path",
]
