"""`atlas doctor` on the Kubernetes or OpenShift side: the API, the login, the project, the quota,
the storage class, the GPU nodes and the image registry, asked through the API and changing nothing.

The checks, in order, each needing the ones named:
- `api`: the context resolved as the stack resolves it (infra/kubeconfig.py) answers `/version`
  (a server that refuses the credentials answers too: `login` says so);
- `login` (api): the credentials are accepted (a SelfSubjectReview names the user; a 401 is the one
  line that says how to log in again);
- `namespace` (login): with `project.create`, the identity may create the project (the reviews
  infra/config.py's `kubernetes_rights` lists, as `pulumi up` asks them); else the project exists
  and the identity may create Jobs in it (a SelfSubjectAccessReview, as `oc auth can-i`);
- `quota` (namespace): a quota the stack manages may be written (the same reviews); else every
  ResourceQuota of the namespace leaves room for what the workload asks at its busiest
  (`required_quota`);
- `storage-class` (login): the StorageClass each claim names exists, or a default one does;
- `gpu-label` (login): some node carries the GPU product label (and the placement's labels) with
  enough allocatable GPUs for the largest GPU step; a user who may not list nodes gets `skip`;
- `registry` (login, where it asks the API): OpenShift's ImageStream (and, for a build,
  BuildConfig) API groups are served, and the registry of the image reference answers `/v2/`
  (401, asking for a login, is an answer).
A SelfSubjectReview and a SelfSubjectAccessReview persist nothing; every other request is a GET.
The deciders are pure functions of the API's JSON; `kubernetes_checks` takes the API client and
the registry probe from its caller, so tests give it recorded answers.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any, Protocol

from infra.doctor import Check, Checklist, Finding
from infra.kubeapi import KubeApi, KubeAuthError, KubeForbiddenError, KubeRequestError
from infra.kubeconfig import KubeAccessError, KubeconfigRequest, ResolvedContext, resolve_context
from infra.loopback import is_loopback_authority
from infra.openshift.cluster_access import refuse_relative_entries
from infra.openshift.section_models import QUANTITY, SUFFIX_FACTORS
from infra.openshift.settings import GPU_PRODUCT_LABEL, GPU_RESOURCE, OpenShiftSettings, RequiredQuota, required_quota
from infra.openshift.target import KubernetesTarget
from infra.workload.render import RenderedStep

# A right the stack needs: the access review (verb, resource, group, namespace), the key that
# asks for it and the fix (infra.config.kubernetes_rights).
Right = tuple[tuple[str, str, str, str], str, str]

EXPECTED: tuple[type[BaseException], ...] = (KubeAccessError, KubeRequestError, OSError, ValueError)
DEFAULT_CLASS_ANNOTATIONS = (
    "storageclass.kubernetes.io/is-default-class",
    "storageclass.beta.kubernetes.io/is-default-class",
)
STACK_LABEL = "atlas.dev/stack"
MAX_LISTED = 12


class Api(Protocol):
    """What the checks ask of the API (infra.kubeapi.KubeApi)."""

    resolved: ResolvedContext

    def get(self, path: str) -> Any: ...

    def get_json_or_text(self, path: str) -> Any: ...

    def whoami(self) -> str: ...

    def can_i(self, verb: str, resource: str, group: str = "", namespace: str = "", name: str = "") -> bool: ...


def connect(request: KubeconfigRequest) -> Api:
    """The API client of the context, resolved as the stack program resolves it; KubeConfigError
    naming the fix where it cannot be (a context that is not there, KUBECONFIG entries relative
    to the working folder, which pulumi-kubernetes would not find)."""
    resolved = resolve_context(request)
    refuse_relative_entries(resolved)
    return KubeApi(resolved, timeout_s=10.0)


# --- the image registry's /v2/ ------------------------------------------------------------------


def registry_of(reference: str) -> str:
    """The registry host of an image reference, as docker and podman read it (`quay.io/org/app:1`
    is quay.io's, `python:3.11` Docker Hub's)."""
    first, sep, _rest = reference.partition("/")
    if sep and ("." in first or ":" in first or first == "localhost"):
        return first
    return "registry-1.docker.io"


def registry_status(registry: str, timeout_s: float = 10.0) -> int:
    """The HTTP status a registry's `/v2/` answers (HTTPS; plain HTTP too for one on this
    machine, as container runtimes allow); OSError where it does not answer."""
    schemes = ("https", "http") if is_loopback_authority(registry) else ("https",)
    for index, scheme in enumerate(schemes):
        try:
            request = urllib.request.Request(f"{scheme}://{registry}/v2/", method="GET")  # noqa: S310 (http(s) only)
            with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 (http(s) only)
                return int(response.status)
        except urllib.error.HTTPError as error:
            return int(error.code)
        except OSError:
            if index == len(schemes) - 1:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


# --- the deciders: pure functions of the API's JSON ---------------------------------------------


def _listing(names: Iterable[str]) -> str:
    shown = sorted(names)
    text = ", ".join(shown[:MAX_LISTED])
    return text + (f" and {len(shown) - MAX_LISTED} more" if len(shown) > MAX_LISTED else "")


def amount(text: Any) -> Decimal | None:
    """A Kubernetes quantity's value ("500m", "16Gi", "4"); None where it is not one."""
    match = QUANTITY.match(str(text).strip().lstrip("+"))
    if not match:
        return None
    return Decimal(match["number"]) * SUFFIX_FACTORS[match["suffix"]]


def judge_version(resolved: ResolvedContext, answer: Any) -> Finding:
    version = answer.get("gitVersion", "") if isinstance(answer, Mapping) else ""
    return Finding.ok(
        f"{resolved.server} answers (Kubernetes {version or 'of an unknown version'}; context {resolved.name!r} "
        f"from {resolved.where})"
    )


def judge_namespace(namespace: str, exists: bool | None, may_create_jobs: bool, who: str, key_prefix: str) -> Finding:
    """A project made beforehand (`project.create: false`): it exists, and the identity may run Jobs in it."""
    if exists is False:
        return Finding.fail(
            f"namespace {namespace!r} does not exist",
            f"ask the cluster's admins for project {namespace!r}, or set {key_prefix}.namespace to yours "
            f"(`oc projects`), or set {key_prefix}.project.create to true where you may create projects",
        )
    if not may_create_jobs:
        return Finding.fail(
            f"{who} may not create jobs.batch in namespace {namespace!r}",
            f"ask the project's admins for the edit or admin role in {namespace!r} (`oc adm policy add-role-to-user "
            f"admin <you> -n {namespace}`), or set {key_prefix}.namespace to a project of yours",
        )
    seen = "exists" if exists else "(which you may not read) holds a role of yours"
    return Finding.ok(f"namespace {namespace!r} {seen}, and {who} may create Jobs in it")


_QUOTA_RESOURCES = (
    # (what the run needs, the quota's names for it, how to print an amount)
    ("gpus", (f"requests.{GPU_RESOURCE}",), "GPUs"),
    ("cpu", ("requests.cpu", "cpu"), "CPU"),
    ("memory", ("requests.memory", "memory"), "memory"),
    ("storage", ("requests.storage",), "storage"),
    ("pvcs", ("persistentvolumeclaims",), "claims"),
)


def _needed(needed: RequiredQuota, what: str) -> Decimal:
    return {
        "gpus": Decimal(needed.gpus),
        "cpu": Decimal(needed.cpu_millis) / 1000,
        "memory": Decimal(needed.memory_bytes),
        "storage": Decimal(needed.storage_bytes),
        "pvcs": Decimal(needed.pvcs),
    }[what]


def _text(value: Decimal, what: str) -> str:
    if what in ("memory", "storage"):
        for suffix, factor in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if value >= factor:
                return f"{(value / factor).quantize(Decimal('0.1')).normalize():f}{suffix}"
        return f"{value:f}"
    return f"{value.normalize():f}"


def judge_quotas(namespace: str, items: Sequence[Mapping[str, Any]], needed: RequiredQuota, key_prefix: str) -> Finding:
    """Every ResourceQuota of the namespace leaves room (hard less used) for what the run needs at its busiest."""
    if not items:
        return Finding.ok(f"no ResourceQuota in {namespace!r}: nothing caps the run's requests")
    names = []
    for quota in items:
        name = str((quota.get("metadata") or {}).get("name", "?"))
        names.append(name)
        status = quota.get("status") or {}
        hard = status.get("hard") or (quota.get("spec") or {}).get("hard") or {}
        used = status.get("used") or {}
        for what, keys, unit in _QUOTA_RESOURCES:
            need = _needed(needed, what)
            for resource in keys:
                limit = amount(hard[resource]) if resource in hard else None
                if limit is None or need == 0:
                    continue
                spent = amount(used.get(resource, "0")) or Decimal(0)
                left = limit - spent
                if need > left:
                    return Finding.fail(
                        f"ResourceQuota {name} leaves {_text(max(left, Decimal(0)), what)} {unit} ({resource}: "
                        f"{_text(spent, what)} used of {_text(limit, what)}); the run needs {_text(need, what)} "
                        "at its busiest",
                        f"ask the project's admins to raise {resource} in {name} to at least "
                        f"{_text(spent + need, what)}, or lower what the workload asks "
                        "(overrides.openshift.<step>.resources)",
                    )
    return Finding.ok(
        f"ResourceQuota {_listing(names)} leaves room for the run ({needed.gpus} GPUs, {needed.cpu} CPU, "
        f"{needed.memory} memory, {needed.storage} storage, {needed.pvcs} claims)"
    )


def _class_key(key_prefix: str, volume: str, classes: Mapping[str, str | None]) -> str:
    if len({c for c in classes.values()}) == 1:
        return f"{key_prefix}.storage.class"
    return f"{key_prefix}.storage.{volume}.class"


def judge_storage(classes: Mapping[str, str | None], items: Sequence[Mapping[str, Any]], key_prefix: str) -> Finding:
    """The StorageClass each claim names exists; a claim that names none needs a default one."""
    found = {str((i.get("metadata") or {}).get("name", "")): i for i in items}
    def is_default(item: Mapping[str, Any]) -> bool:
        annotations = (item.get("metadata") or {}).get("annotations") or {}
        return any(annotations.get(a) == "true" for a in DEFAULT_CLASS_ANNOTATIONS)

    defaults = [name for name, item in found.items() if is_default(item)]
    seen = []
    for volume, wanted in classes.items():
        if wanted is None:
            if not defaults:
                return Finding.fail(
                    f"the {volume} claim names no StorageClass and the cluster has no default one "
                    f"(it has {_listing(found) or 'none'})",
                    f"set {key_prefix}.storage.class to one of them",
                )
            seen.append(f"{volume}: the default {defaults[0]}")
        elif wanted not in found:
            return Finding.fail(
                f"StorageClass {wanted!r} ({_class_key(key_prefix, volume, classes)}) does not exist "
                f"(the cluster has {_listing(found) or 'none'})",
                f"set it to one of them, or leave it out to use the default ({', '.join(defaults) or 'none'})",
            )
        else:
            seen.append(f"{volume}: {wanted}")
    return Finding.ok(f"the claims' StorageClasses exist ({'; '.join(seen)})")


def _gpus_allocatable(node: Mapping[str, Any]) -> int:
    value = amount(((node.get("status") or {}).get("allocatable") or {}).get(GPU_RESOURCE, "0"))
    return int(value) if value is not None else 0


def judge_gpu_nodes(
    items: Sequence[Mapping[str, Any]], selector: Mapping[str, str], step: RenderedStep, key_prefix: str
) -> Finding:
    """Some node carries every label a GPU step's pod selects (the product, the placement's) and
    has as many allocatable GPUs as the step asks."""
    wanted = step.resources.gpus_per_node
    shown = ", ".join(f"{k}={v}" for k, v in selector.items())

    def labels(node: Mapping[str, Any]) -> Mapping[str, str]:
        return (node.get("metadata") or {}).get("labels") or {}

    matching = [n for n in items if all(labels(n).get(k) == v for k, v in selector.items())]
    if not matching:
        products = {labels(n)[GPU_PRODUCT_LABEL] for n in items if GPU_PRODUCT_LABEL in labels(n)}
        product_ok = [n for n in items if labels(n).get(GPU_PRODUCT_LABEL) == selector.get(GPU_PRODUCT_LABEL)]
        if product_ok:
            fix = f"set {key_prefix}.placement.node_selector to labels those nodes carry, or remove it"
        elif products:
            fix = f"set {key_prefix}.gpu.product to one of them"
        else:
            fix = (
                "ask the cluster's admins which label its GPU nodes carry (NVIDIA's GPU operator sets "
                f"{GPU_PRODUCT_LABEL}), and set {key_prefix}.gpu.product to it"
            )
        carried = f" (the GPU nodes carry {GPU_PRODUCT_LABEL}: {_listing(products)})" if products else ""
        return Finding.fail(f"no node carries {shown}{carried}", fix)
    big_enough = [n for n in matching if _gpus_allocatable(n) >= wanted]
    if not big_enough:
        most = max(_gpus_allocatable(n) for n in matching)
        return Finding.fail(
            f"{len(matching)} node(s) carry {shown}, but the most GPUs one offers is {most}; step {step.name} asks "
            f"for {wanted}",
            f"lower it (overrides.openshift.{step.name}.resources.gpus_per_node in the workload definition), or "
            f"set {key_prefix}.gpu.product to nodes that have {wanted}",
        )
    example = str((big_enough[0].get("metadata") or {}).get("name", "?"))
    return Finding.ok(
        f"{len(big_enough)} node(s) carry {shown} with at least {wanted} allocatable GPU(s) for step {step.name} "
        f"(e.g. {example})"
    )


def judge_registry(registry: str, reference: str, status: int | None, why: str = "") -> Finding:
    """A registry's answer to `/v2/`: 200 or 401 (a login asked for) is a registry that answers."""
    if status is None:
        return Finding.fail(
            f"the registry {registry} of image {reference} does not answer ({why})",
            "check the reference (atlas:openshift.image.reference) and this machine's network (a proxy?)",
        )
    if status in (200, 401):
        login = ", asking for a login as registries do" if status == 401 else ""
        return Finding.ok(f"the registry {registry} of image {reference} answers /v2/ ({status}{login})")
    return Finding.fail(
        f"the registry {registry} of image {reference} answered {status} to /v2/: not an image registry's answer",
        "check the reference's registry (atlas:openshift.image.reference)",
    )


# --- the checks --------------------------------------------------------------------------------


def _gpu_step(steps: Sequence[RenderedStep]) -> RenderedStep | None:
    gpu_steps = [s for s in steps if s.resources.gpus_per_node > 0]
    return max(gpu_steps, key=lambda s: s.resources.gpus_per_node) if gpu_steps else None


def kubernetes_checks(
    target: KubernetesTarget,
    settings: OpenShiftSettings,
    steps: Sequence[RenderedStep],
    rights: Sequence[Right],
    request: KubeconfigRequest,
    stack: str,
    api_for: Callable[[KubeconfigRequest], Api] = connect,
    probe_registry: Callable[[str], int] = registry_status,
    widths: Mapping[str, int] | None = None,
) -> tuple[Check, ...]:
    """Every check of the stack's Kubernetes or OpenShift side (`atlas:openshift`), in order;
    `widths`: a swept step's pods at once (sweep_widths), which the quota must hold together."""
    checks = Checklist(EXPECTED)
    prefix = settings.key_prefix
    namespace = target.namespace
    session: dict[str, Any] = {}

    def who() -> str:
        return str(session.get("user") or session["api"].resolved.describe())

    def api_check() -> Finding:
        session["api"] = api = api_for(request)
        try:
            answer = api.get_json_or_text("/version")
        except KubeAuthError:
            return Finding.ok(f"{api.resolved.server} answers (and refuses these credentials: see login)")
        except urllib.error.HTTPError as error:
            return Finding.fail(
                f"{api.resolved.server} answered /version with HTTP {error.code}: {error.reason}",
                "check that the context's server is the cluster's API server",
            )
        except urllib.error.URLError as error:
            return Finding.fail(
                f"the API server {api.resolved.server} of context {api.resolved.name!r} (from {api.resolved.where}) "
                f"does not answer ({error.reason})",
                f"check the network and the server, or name the cluster's context ({request.context_key}, "
                "`kubectl config get-contexts`)",
            )
        return judge_version(api.resolved, answer)

    def login_check() -> Finding:
        api = session["api"]
        try:
            session["user"] = user = api.whoami()
        except KubeRequestError as error:
            if error.status != 404 or isinstance(error, KubeAuthError):
                raise
            return Finding.ok(f"credentials accepted ({api.resolved.credential_kind}; no SelfSubjectReview API here)")
        return Finding.ok(f"logged in as {user} ({api.resolved.credential_kind}, context {api.resolved.name!r})")

    def namespace_exists() -> tuple[bool | None, Mapping[str, Any]]:
        api = session["api"]
        paths = [f"/api/v1/namespaces/{namespace}"]
        if target.is_openshift:
            paths.append(f"/apis/project.openshift.io/v1/projects/{namespace}")
        for path in paths:
            try:
                return True, api.get(path)
            except KubeForbiddenError:
                continue
            except urllib.error.HTTPError as error:
                if error.code == 404:
                    return False, {}
                raise
        return None, {}

    def review(right: Right) -> Finding | None:
        (verb, resource, group, where), key, fix = right
        if session["api"].can_i(verb, resource, group, where):
            return None
        what = f"{resource}.{group}" if group else resource
        place = f"in namespace {where!r}" if where else "cluster-wide"
        return Finding.fail(f"{who()} may not {verb} {what} {place} ({key})", f"{key}: {fix}")

    def namespace_check() -> Finding:
        exists, found = namespace_exists()
        if settings.project.create:
            if exists:
                owner = ((found.get("metadata") or {}).get("labels") or {}).get(STACK_LABEL)
                if owner == stack:
                    return Finding.ok(f"namespace {namespace!r} exists, made by this stack's `pulumi up`")
                return Finding.fail(
                    f"namespace {namespace!r} exists already, not made by stack {stack}",
                    f"set {prefix}.project.create to false to run in it (if it is yours), or set {prefix}.namespace "
                    "to a new name",
                )
            for right in rights:
                if right[0][1] in ("projectrequests", "namespaces") and (refused := review(right)) is not None:
                    return refused
            made = "a ProjectRequest" if target.is_openshift else "a Namespace"
            return Finding.ok(f"{who()} may create {made} for {namespace!r} ({prefix}.project.create)")
        return judge_namespace(
            namespace, exists, session["api"].can_i("create", "jobs", "batch", namespace), who(), prefix
        )

    def quota_check() -> Finding:
        needed = required_quota(steps, settings, widths)
        if settings.quota.manage:
            for right in rights:
                if right[0][1] == "resourcequotas" and (refused := review(right)) is not None:
                    return refused
            return Finding.ok(
                f"the stack writes the project's ResourceQuota ({needed.gpus} GPUs, {needed.cpu} CPU, "
                f"{needed.memory} memory; {prefix}.quota.manage), and may"
            )
        try:
            listed = session["api"].get(f"/api/v1/namespaces/{namespace}/resourcequotas")
        except KubeForbiddenError as error:
            return Finding.skip(f"{who()} may not read the ResourceQuotas of {namespace!r} ({error.api_message})")
        return judge_quotas(namespace, listed.get("items") or [], needed, prefix)

    def storage_check() -> Finding:
        volumes = settings.storage
        classes = {
            "data": volumes.data.storage_class,
            "results": volumes.results.storage_class,
            "logs": volumes.logs.storage_class,
        }
        try:
            listed = session["api"].get("/apis/storage.k8s.io/v1/storageclasses")
        except KubeForbiddenError:
            return Finding.skip(
                f"{who()} may not list StorageClasses (cluster-wide): ask the cluster's admins whether "
                f"{_listing({c or 'a default one' for c in classes.values()})} exists"
            )
        return judge_storage(classes, listed.get("items") or [], prefix)

    def gpu_check() -> Finding:
        step = _gpu_step(steps)
        if step is None:
            return Finding.ok("no step asks for a GPU")
        selector = {**dict(settings.placement.node_selector), GPU_PRODUCT_LABEL: settings.gpu.product}
        try:
            listed = session["api"].get(f"/api/v1/nodes?labelSelector={GPU_PRODUCT_LABEL}")
        except KubeForbiddenError:
            return Finding.skip(
                f"{who()} may not list nodes (cluster-wide), so whether some node carries "
                f"{GPU_PRODUCT_LABEL}={settings.gpu.product} cannot be seen from here; the cluster's admins can "
                f"tell (`oc get nodes -L {GPU_PRODUCT_LABEL}`)"
            )
        return judge_gpu_nodes(listed.get("items") or [], selector, step, prefix)

    image = settings.image
    groups = []
    if target.is_openshift or image.build is not None:
        groups.append("image.openshift.io/v1")
    if image.build is not None:
        groups.append("build.openshift.io/v1")

    def registry_check() -> Finding:
        served = []
        for group in groups:
            try:
                session["api"].get(f"/apis/{group}")
            except urllib.error.HTTPError as error:
                if error.code != 404:
                    raise
                fix = (
                    f"for a cluster without OpenShift's builds, give {prefix}.image.reference (an image pushed "
                    "beforehand) instead of image.build"
                    if image.build is not None
                    else f"is this OpenShift? For plain Kubernetes set {prefix}.flavour to kubernetes"
                )
                return Finding.fail(f"the API serves no {group} (ImageStreams, BuildConfigs)", fix)
            served.append(group)
        found = []
        if served:
            found.append(f"{' and '.join(served)} served (the image is built in the cluster)" if image.build else
                         f"{' and '.join(served)} served")
        if image.reference is not None:
            registry = registry_of(image.reference)
            try:
                answer = judge_registry(registry, image.reference, probe_registry(registry))
            except OSError as error:
                answer = judge_registry(registry, image.reference, None, str(getattr(error, "reason", error)))
            if answer.status.value != "ok":
                return answer
            found.append(answer.detail)
        return Finding.ok("; ".join(found) or "nothing to check: no image reference and no build")

    checks.run("api", api_check, fallback_fix=f"check {request.file_key} and {request.context_key}")
    checks.run("login", login_check, needs=("api",))
    checks.run("namespace", namespace_check, needs=("login",))
    checks.run("quota", quota_check, needs=("namespace",))
    checks.run("storage-class", storage_check, needs=("login",))
    checks.run("gpu-label", gpu_check, needs=("login",))
    # The API groups are asked with the credentials: an expired login is login's one line, not a second.
    checks.run("registry", registry_check, needs=("login",) if groups else ())
    return tuple(checks.checks)
