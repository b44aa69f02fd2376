"""The Kubernetes and OpenShift objects of the OpenShift side, rendered as plain dicts: one module per concern.

Pure functions: the components of infra/openshift pass their results to pulumi-kubernetes, the
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
