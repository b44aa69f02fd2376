"""Security lint of the Kubernetes objects Atlas renders: what a cluster's security review asks of them.

Pure: manifests (the API's own dicts) in, findings out. The rules are those of Kubernetes' restricted
Pod Security Standard and the checks reviewers add to it (a read-only root filesystem, requests and
limits on every container, pinned images, no service-account token where the pod never calls the
API). A finding a step cannot avoid is on `EXEMPTIONS`, with the reason, and docs/security.md lists
them; tests/unit/test_rendered_security.py renders every stack and fails on any other finding.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

Manifest = Mapping[str, Any]

# Each rule's name and what it asks (docs/security.md's table names each, in its own words).
RULES: dict[str, str] = {
    "run-as-non-root": "runAsNonRoot true, and never runAsUser 0, for every container",
    "no-privilege-escalation": "allowPrivilegeEscalation false and never privileged, for every container",
    "read-only-root-filesystem": "readOnlyRootFilesystem true; what a container writes goes to a volume",
    "capabilities": "capabilities drop ALL, none added",
    "seccomp": "seccompProfile RuntimeDefault (or Localhost) for every container",
    "resources": "cpu and memory requests and limits on every container (init and sidecars too)",
    "image-pinned": "every image by digest or an explicit tag, never latest or untagged",
    "host-namespaces": "no hostNetwork, hostPID or hostIPC, and no hostPort",
    "host-path": "no hostPath volume",
    "service-account-token": "no service-account token in a pod, unless a container calls the API",
    "pod-security-admission": "a namespace Atlas creates enforces the restricted Pod Security Standard",
}

# The kinds whose objects hold a pod template, and where it is.
POD_TEMPLATE_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": ("spec",),
    "Job": ("spec", "template", "spec"),
    "Deployment": ("spec", "template", "spec"),
    "StatefulSet": ("spec", "template", "spec"),
    "DaemonSet": ("spec", "template", "spec"),
    "ReplicaSet": ("spec", "template", "spec"),
    "CronJob": ("spec", "jobTemplate", "spec", "template", "spec"),
}
CONTAINER_LISTS = ("initContainers", "containers", "ephemeralContainers")
SECCOMP_TYPES = ("RuntimeDefault", "Localhost")
HOST_NAMESPACES = ("hostNetwork", "hostPID", "hostIPC")
# What meets the rules, for the renderers to use (infra/openshift/manifests/pods.py, infra/nodes/backfill.py):
# the pod's context (a UID is the image's, or OpenShift's from the project's range), a container's,
# and a container's whose root filesystem can be read-only.
POD_SECURITY: dict[str, Any] = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
CONTAINER_SECURITY: dict[str, Any] = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
READ_ONLY_CONTAINER_SECURITY: dict[str, Any] = {**CONTAINER_SECURITY, "readOnlyRootFilesystem": True}
# The labels that make the API server's Pod Security admission refuse any pod of the namespace that
# does not meet the restricted standard (built into kube-apiserver since 1.25).
POD_SECURITY_LABELS = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/audit": "restricted",
    "pod-security.kubernetes.io/warn": "restricted",
}
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass(frozen=True)
class SecurityFinding:
    """One property an object lacks: which object (as the caller names it), which container
    ("" for the pod or the object itself), which rule, and what was found."""

    obj: str
    container: str
    rule: str
    detail: str

    def __str__(self) -> str:
        where = f"{self.obj} container {self.container}" if self.container else self.obj
        return f"{where}: {self.rule}: {self.detail}"


@dataclass(frozen=True)
class Exemption:
    """A rule a container cannot meet, and why: matched by container name (Atlas names each
    container for its role: `step`, `backfill`, `oauth-proxy`, ...)."""

    rule: str
    container: str
    reason: str

    def covers(self, finding: SecurityFinding) -> bool:
        return finding.rule == self.rule and finding.container == self.container


# What a step cannot meet, and why (docs/security.md, "What a step cannot meet"). Nothing else is exempt.
EXEMPTIONS: tuple[Exemption, ...] = (
    Exemption(
        "read-only-root-filesystem",
        "step",
        "a workload step writes inside its image, where Atlas cannot know the paths: the entrypoint adds "
        "OpenShift's arbitrary UID to /etc/passwd, a folder source is copied into the working directory, "
        "BigGAN's working directory holds its code beside what it writes, and an image Atlas did not build "
        "writes wherever it was made to; a volume over the working directory would hide the image's own files",
    ),
    Exemption(
        "read-only-root-filesystem",
        "backfill",
        "a backfill copy makes its data and checkpoints in the image's working directory (its namespace has "
        "no claim on the run's volumes), for the same reasons as a step",
    ),
    Exemption(
        "service-account-token",
        "oauth-proxy",
        "OpenShift's oauth-proxy is an OAuth client through its ServiceAccount and asks the API whether a "
        "user may read the project's Services; the token is projected into it alone, for an hour at a time",
    ),
)


@dataclass(frozen=True)
class LintResult:
    """Findings no exemption covers, and those one does (with it)."""

    findings: tuple[SecurityFinding, ...]
    exempted: tuple[tuple[SecurityFinding, Exemption], ...] = field(default_factory=tuple)


def image_pin_problem(reference: str) -> str | None:
    """Why an image reference is not pinned (None when it is): a digest, or an explicit tag other
    than `latest`. A registry's port (`host:5000/repo`) is not a tag."""
    name, _, digest = reference.partition("@")
    if digest:
        return None if DIGEST.match(digest) else f"{reference!r} has a malformed digest (sha256:<64 hex>)"
    last = name.rsplit("/", 1)[-1]
    if ":" not in last:
        return f"{reference!r} has no tag or digest, so it means :latest"
    tag = last.rsplit(":", 1)[1]
    if tag == "latest":
        return f"{reference!r} is tagged latest, which moves"
    return None


def lint(objects: Iterable[tuple[str, Manifest]], exemptions: Sequence[Exemption] = EXEMPTIONS) -> LintResult:
    """Every object's findings, split into those no exemption covers and those one does.

    `objects` are (name, manifest) pairs: the name is how a finding names the object (an auto-named
    object has no metadata.name yet)."""
    found: list[SecurityFinding] = []
    exempted: list[tuple[SecurityFinding, Exemption]] = []
    for name, manifest in objects:
        for finding in lint_object(name, manifest):
            cover = next((e for e in exemptions if e.covers(finding)), None)
            if cover is None:
                found.append(finding)
            else:
                exempted.append((finding, cover))
    return LintResult(tuple(found), tuple(exempted))


def lint_object(name: str, manifest: Manifest) -> list[SecurityFinding]:
    """The findings of one object, whatever its kind (kinds with nothing to check give none)."""
    kind = str(manifest.get("kind", ""))
    if kind in POD_TEMPLATE_PATHS:
        pod = _at(manifest, POD_TEMPLATE_PATHS[kind])
        if not isinstance(pod, Mapping):
            return [SecurityFinding(name, "", "resources", f"a {kind} without a pod template")]
        return lint_pod(name, pod)
    if kind == "ServiceAccount":
        return _service_account(name, manifest)
    if kind == "Namespace":
        return _namespace(name, manifest)
    if kind == "BuildConfig":
        return _build_config(name, manifest)
    return []


def lint_pod(name: str, pod: Manifest) -> list[SecurityFinding]:
    """A pod spec's findings: the pod's own, then each container's (init and ephemeral ones too)."""
    findings: list[SecurityFinding] = []

    def add(container: str, rule: str, detail: str) -> None:
        findings.append(SecurityFinding(name, container, rule, detail))

    for key in HOST_NAMESPACES:
        if pod.get(key) is True:
            add("", "host-namespaces", f"{key}: true")
    for volume in pod.get("volumes") or []:
        if "hostPath" in volume:
            add("", "host-path", f"volume {volume.get('name')!r} is a hostPath ({volume['hostPath'].get('path')})")
    if pod.get("automountServiceAccountToken") is not False:
        add("", "service-account-token", "automountServiceAccountToken is not false: the ServiceAccount's token is "
            "mounted into every container")
    token_volumes = {v.get("name") for v in pod.get("volumes") or [] if _holds_token(v)}
    pod_security = pod.get("securityContext") or {}
    for list_key in CONTAINER_LISTS:
        for container in pod.get(list_key) or []:
            cname = str(container.get("name", "?"))
            for rule, detail in _container(container, pod_security, token_volumes):
                add(cname, rule, detail)
    return findings


def _container(container: Manifest, pod_security: Manifest, token_volumes: set[Any]) -> list[tuple[str, str]]:
    problems: list[tuple[str, str]] = []
    own = container.get("securityContext") or {}

    def effective(key: str) -> Any:
        # A container's own securityContext overrides the pod's for the keys both have.
        return own[key] if key in own else pod_security.get(key)

    if effective("runAsNonRoot") is not True:
        problems.append(("run-as-non-root", "runAsNonRoot is not true (neither the container's nor the pod's)"))
    if effective("runAsUser") == 0:
        problems.append(("run-as-non-root", "runAsUser is 0 (root)"))
    if own.get("privileged") is True:
        problems.append(("no-privilege-escalation", "privileged: true"))
    if own.get("allowPrivilegeEscalation") is not False:
        problems.append(("no-privilege-escalation", "allowPrivilegeEscalation is not false"))
    if own.get("readOnlyRootFilesystem") is not True:
        problems.append(("read-only-root-filesystem", "readOnlyRootFilesystem is not true"))
    capabilities = own.get("capabilities") or {}
    if "ALL" not in (capabilities.get("drop") or []):
        problems.append(("capabilities", "capabilities.drop does not hold ALL"))
    if capabilities.get("add"):
        problems.append(("capabilities", f"capabilities.add: {capabilities['add']}"))
    seccomp = (effective("seccompProfile") or {}).get("type")
    if seccomp not in SECCOMP_TYPES:
        problems.append(("seccomp", f"seccompProfile type is {seccomp!r}, not RuntimeDefault or Localhost"))
    resources = container.get("resources") or {}
    missing = [f"{part}.{amount}" for part in ("requests", "limits") for amount in ("cpu", "memory")
               if not (resources.get(part) or {}).get(amount)]
    if missing:
        problems.append(("resources", f"no {', '.join(missing)}"))
    image = container.get("image")
    if not isinstance(image, str) or not image:
        problems.append(("image-pinned", "no image"))
    else:
        pin = image_pin_problem(image)
        if pin is not None:
            problems.append(("image-pinned", pin))
    for port in container.get("ports") or []:
        if port.get("hostPort"):
            problems.append(("host-namespaces", f"hostPort {port['hostPort']}"))
    for mount in container.get("volumeMounts") or []:
        if mount.get("name") in token_volumes:
            problems.append(("service-account-token", f"mounts a service-account token (volume {mount['name']!r})"))
    return problems


def _holds_token(volume: Manifest) -> bool:
    """A volume that puts a service-account token in the pod (a projected one)."""
    sources = (volume.get("projected") or {}).get("sources") or []
    return any("serviceAccountToken" in source for source in sources)


def _service_account(name: str, manifest: Manifest) -> list[SecurityFinding]:
    if manifest.get("automountServiceAccountToken") is not False:
        detail = "automountServiceAccountToken is not false: a pod that does not say otherwise gets its token"
        return [SecurityFinding(name, "", "service-account-token", detail)]
    return []


def _namespace(name: str, manifest: Manifest) -> list[SecurityFinding]:
    labels = (manifest.get("metadata") or {}).get("labels") or {}
    wrong = {k: labels.get(k) for k, v in POD_SECURITY_LABELS.items() if labels.get(k) != v}
    if wrong:
        return [SecurityFinding(name, "", "pod-security-admission", f"labels {wrong} are not {POD_SECURITY_LABELS}")]
    return []


def _build_config(name: str, manifest: Manifest) -> list[SecurityFinding]:
    """The build pod is the cluster's own (its security context is OpenShift's); Atlas sets what it
    runs on, the base image it starts from and the tag it pushes."""
    findings: list[SecurityFinding] = []
    spec = manifest.get("spec") or {}
    resources = spec.get("resources") or {}
    missing = [f"{part}.{amount}" for part in ("requests", "limits") for amount in ("cpu", "memory")
               if not (resources.get(part) or {}).get(amount)]
    if missing:
        findings.append(SecurityFinding(name, "", "resources", f"no {', '.join(missing)}"))
    strategy = (spec.get("strategy") or {}).get("dockerStrategy") or {}
    for argument in strategy.get("buildArgs") or []:
        if argument.get("name") == "BASE_IMAGE":
            pin = image_pin_problem(str(argument.get("value", "")))
            if pin is not None:
                findings.append(SecurityFinding(name, "", "image-pinned", f"build argument BASE_IMAGE: {pin}"))
    output = (spec.get("output") or {}).get("to") or {}
    if output.get("kind") == "ImageStreamTag":
        target = str(output.get("name", ""))
        if ":" not in target or target.rpartition(":")[2] == "latest":
            detail = f"pushes to {target!r}, not an explicit tag"
            findings.append(SecurityFinding(name, "", "image-pinned", detail))
    return findings


def _at(manifest: Manifest, path: tuple[str, ...]) -> Any:
    value: Any = manifest
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    return value
