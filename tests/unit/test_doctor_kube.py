"""`atlas doctor` on the Kubernetes or OpenShift side (infra/openshift/doctor.py): the deciders on the
API's recorded JSON, table by table, and the checks in order against a fake API: a project user's
view (nodes and StorageClasses forbidden: skipped, not failed), an expired login, a namespace the
user may not create, a quota too small, a storage class or a GPU product the cluster lacks."""

from __future__ import annotations

import io
import urllib.error
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import pytest

from infra.config import kubernetes_rights
from infra.doctor import Check, Status
from infra.kubeapi import KubeAuthError, KubeForbiddenError
from infra.kubeconfig import KubeconfigRequest, ResolvedContext, resolve_document
from infra.openshift.doctor import (
    amount,
    judge_gpu_nodes,
    judge_namespace,
    judge_quotas,
    judge_registry,
    judge_storage,
    kubernetes_checks,
    registry_of,
)
from infra.openshift.settings import OpenShiftSettings, RequiredQuota
from infra.openshift.settings_parser import openshift_settings
from infra.openshift.target import KubernetesTarget
from infra.stack_config import StackConfig
from infra.workload.model import Resources
from infra.workload.render import RenderedStep

PREFIX = "openshift"
SERVER = "https://api.c.example:6443"
CONTEXT = "atlas-probe/api-c-example:6443/alice"


def resolved(flavour: str = "openshift") -> ResolvedContext:
    document = {
        "clusters": [{"name": "c", "cluster": {"server": SERVER, "certificate-authority-data": "Q0E="}}],
        "users": [{"name": "alice", "user": {"token": "sha256~secret"}}],
        "contexts": [{"name": CONTEXT, "context": {"cluster": "c", "user": "alice"}}],
        "current-context": CONTEXT,
    }
    return resolve_document(document, KubeconfigRequest(flavour=flavour), "KUBECONFIG (a)")


def step(name: str, gpus: int, cpus: int = 2, memory_gib: int = 4) -> RenderedStep:
    resources = Resources(1, gpus, cpus, f"{memory_gib}Gi", memory_gib * 2**30, 600)
    return RenderedStep("openshift", name, ("python3",), resources, (), None)


STEPS = (step("prepare", 0), step("train", 2, cpus=8, memory_gib=16))
NEEDED = RequiredQuota(gpus=2, cpu_millis=8150, memory_bytes=16 * 2**30 + 192 * 2**20, storage_bytes=21 * 2**30, pvcs=3)


def quota(name: str, hard: Mapping[str, str], used: Mapping[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {"hard": dict(hard), "used": dict(used or {})}}


@pytest.mark.parametrize(
    ("items", "status", "said"),
    [
        ([], Status.OK, "no ResourceQuota in 'p': nothing caps the run's requests"),
        ([quota("q", {"requests.nvidia.com/gpu": "4", "requests.cpu": "16", "requests.memory": "64Gi"})],
         Status.OK, "ResourceQuota q leaves room for the run (2 GPUs, 8150m CPU"),
        ([quota("q", {"requests.nvidia.com/gpu": "4"}, {"requests.nvidia.com/gpu": "3"})], Status.FAIL,
         "ResourceQuota q leaves 1 GPUs (requests.nvidia.com/gpu: 3 used of 4); the run needs 2 at its busiest"),
        ([quota("q", {"cpu": "8"})], Status.FAIL, "leaves 8 CPU (cpu: 0 used of 8); the run needs 8.15"),
        ([quota("a", {"pods": "10"}), quota("b", {"requests.memory": "16Gi"}, {"requests.memory": "512Mi"})],
         Status.FAIL, "ResourceQuota b leaves 15.5Gi memory (requests.memory: 512Mi used of 16Gi)"),
        ([quota("q", {"persistentvolumeclaims": "2"})], Status.FAIL, "leaves 2 claims"),
        ([quota("q", {"requests.storage": "10Gi"})], Status.FAIL, "the run needs 21Gi"),
    ],
)
def test_quotas(items: list[dict[str, Any]], status: Status, said: str) -> None:
    found = judge_quotas("p", items, NEEDED, PREFIX)
    assert found.status is status and said in found.detail, found
    if status is Status.FAIL:
        assert found.fix.startswith("ask the project's admins to raise ")


def test_quantities() -> None:
    assert [amount(v) for v in ("4", "500m", "16Gi", "1k", "0", "x")] == [
        Decimal(4), Decimal("0.5"), Decimal(16 * 2**30), Decimal(1000), Decimal(0), None
    ]


def storage_class(name: str, default: bool = False) -> dict[str, Any]:
    annotations = {"storageclass.kubernetes.io/is-default-class": "true"} if default else {}
    return {"metadata": {"name": name, "annotations": annotations}}


@pytest.mark.parametrize(
    ("classes", "items", "status", "said", "fix"),
    [
        ({"data": "fast", "results": "fast", "logs": "fast"}, [storage_class("fast")], Status.OK,
         "the claims' StorageClasses exist (data: fast; results: fast; logs: fast)", ""),
        ({"data": None, "results": None, "logs": "fast"}, [storage_class("std", True), storage_class("fast")],
         Status.OK, "data: the default std", ""),
        ({"data": "gold", "results": "gold", "logs": "gold"}, [storage_class("std", True)], Status.FAIL,
         "StorageClass 'gold' (openshift.storage.class) does not exist (the cluster has std)",
         "set it to one of them, or leave it out to use the default (std)"),
        ({"data": "gold", "results": "std", "logs": "std"}, [storage_class("std")], Status.FAIL,
         "StorageClass 'gold' (openshift.storage.data.class) does not exist", ""),
        ({"data": None, "results": None, "logs": None}, [storage_class("std")], Status.FAIL,
         "the data claim names no StorageClass and the cluster has no default one (it has std)",
         "set openshift.storage.class to one of them"),
    ],
)
def test_storage_classes(
    classes: dict[str, str | None], items: list[dict[str, Any]], status: Status, said: str, fix: str
) -> None:
    found = judge_storage(classes, items, PREFIX)
    assert found.status is status and said in found.detail and fix in found.fix, found


def node(name: str, labels: Mapping[str, str], gpus: int) -> dict[str, Any]:
    allocatable = {"nvidia.com/gpu": str(gpus)}
    return {"metadata": {"name": name, "labels": dict(labels)}, "status": {"allocatable": allocatable}}


V100 = {"nvidia.com/gpu.product": "Tesla-V100-SXM2-32GB"}
A100 = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-40GB"}


@pytest.mark.parametrize(
    ("items", "selector", "status", "said", "fix"),
    [
        ([node("g1", V100, 4), node("g2", A100, 8)], V100, Status.OK,
         "1 node(s) carry nvidia.com/gpu.product=Tesla-V100-SXM2-32GB with at least 2 allocatable GPU(s) for step "
         "train (e.g. g1)", ""),
        ([node("g2", A100, 8)], V100, Status.FAIL,
         "no node carries nvidia.com/gpu.product=Tesla-V100-SXM2-32GB (the GPU nodes carry nvidia.com/gpu.product: "
         "NVIDIA-A100-SXM4-40GB)", "set openshift.gpu.product to one of them"),
        ([], V100, Status.FAIL, "no node carries", "ask the cluster's admins which label its GPU nodes carry"),
        ([node("g1", V100, 4)], {"zone": "a", **V100}, Status.FAIL, "no node carries zone=a, ",
         "set openshift.placement.node_selector to labels those nodes carry"),
        ([node("g1", V100, 1), node("g3", V100, 1)], V100, Status.FAIL,
         "2 node(s) carry nvidia.com/gpu.product=Tesla-V100-SXM2-32GB, but the most GPUs one offers is 1; step train "
         "asks for 2", "lower it (overrides.openshift.train.resources.gpus_per_node"),
    ],
)
def test_gpu_nodes(
    items: list[dict[str, Any]], selector: Mapping[str, str], status: Status, said: str, fix: str
) -> None:
    found = judge_gpu_nodes(items, selector, STEPS[1], PREFIX)
    assert found.status is status and said in found.detail and fix in found.fix, found


def test_namespaces_made_beforehand() -> None:
    assert judge_namespace("p", True, True, "alice", PREFIX).detail == (
        "namespace 'p' exists, and alice may create Jobs in it"
    )
    assert "holds a role of yours" in judge_namespace("p", None, True, "alice", PREFIX).detail
    missing = judge_namespace("p", False, False, "alice", PREFIX)
    assert (missing.status, missing.detail) == (Status.FAIL, "namespace 'p' does not exist")
    assert "set openshift.namespace to yours (`oc projects`)" in missing.fix
    no_jobs = judge_namespace("p", True, False, "alice", PREFIX)
    assert no_jobs.detail == "alice may not create jobs.batch in namespace 'p'" and "admin role" in no_jobs.fix


def test_registries() -> None:
    assert [registry_of(r) for r in ("quay.io/org/app:1", "python:3.11", "library/python", "127.0.0.1:5000/a/b",
                                     "localhost/app", "ghcr.io/o/i@sha256:ab")] == [
        "quay.io", "registry-1.docker.io", "registry-1.docker.io", "127.0.0.1:5000", "localhost", "ghcr.io"
    ]
    assert judge_registry("quay.io", "quay.io/a:1", 401).detail == (
        "the registry quay.io of image quay.io/a:1 answers /v2/ (401, asking for a login as registries do)"
    )
    assert judge_registry("quay.io", "quay.io/a:1", 200).status is Status.OK
    assert judge_registry("quay.io", "quay.io/a:1", 404).status is Status.FAIL
    down = judge_registry("r.example", "r.example/a:1", None, "Name or service not known")
    assert down.detail == "the registry r.example of image r.example/a:1 does not answer (Name or service not known)"


# --- the checks in order, against a fake API ---------------------------------------------------------


def http_error(path: str, code: int) -> urllib.error.HTTPError:
    return urllib.error.HTTPError(SERVER + path, code, "Not Found", {}, io.BytesIO(b""))  # type: ignore[arg-type]


class FakeApi:
    """An API server answering from a table of paths; a value that is an exception is raised."""

    def __init__(
        self,
        answers: Mapping[str, Any],
        allowed: set[tuple[str, str, str, str]],
        user: str | Exception = "alice",
        flavour: str = "openshift",
    ) -> None:
        self.resolved = resolved(flavour)
        self.answers, self.allowed, self.user = answers, allowed, user
        self.asked: list[str] = []
        self.reviews: list[tuple[str, str, str, str]] = []

    def get(self, path: str) -> Any:
        self.asked.append(path)
        found = self.answers.get(path, http_error(path, 404))
        if isinstance(found, Exception):
            raise found
        return found

    def get_json_or_text(self, path: str) -> Any:
        return self.get(path)

    def whoami(self) -> str:
        if isinstance(self.user, Exception):
            raise self.user
        return self.user

    def can_i(self, verb: str, resource: str, group: str = "", namespace: str = "", name: str = "") -> bool:
        self.reviews.append((verb, resource, group, namespace))
        return (verb, resource, group, namespace) in self.allowed


def forbidden(path: str) -> KubeForbiddenError:
    return KubeForbiddenError("GET", path, 403, "forbidden: User \"alice\" cannot list resource", "403 text")


PROJECT_USER = {  # a project made beforehand; nodes and StorageClasses are not the user's to read
    "/version": {"gitVersion": "v1.33.1"},
    "/api/v1/namespaces/atlas-probe": forbidden("/api/v1/namespaces/atlas-probe"),
    "/apis/project.openshift.io/v1/projects/atlas-probe": {"metadata": {"name": "atlas-probe"}},
    "/api/v1/namespaces/atlas-probe/resourcequotas": {"items": [quota("q", {"requests.nvidia.com/gpu": "4"})]},
    "/apis/storage.k8s.io/v1/storageclasses": forbidden("/apis/storage.k8s.io/v1/storageclasses"),
    "/api/v1/nodes?labelSelector=nvidia.com/gpu.product": forbidden("/api/v1/nodes"),
    "/apis/image.openshift.io/v1": {"kind": "APIResourceList"},
}
JOBS = ("create", "jobs", "batch", "atlas-probe")


def settings_for(**keys: Any) -> OpenShiftSettings:
    keys.setdefault("image", {"reference": "quay.io/org/app:1"})
    keys.setdefault("monitor", {"enabled": False})
    return openshift_settings(keys.pop("flavour", "openshift"), **keys)


def run(
    api: FakeApi,
    settings: OpenShiftSettings,
    flavour: str = "openshift",
    registry: int | Exception = 401,
    widths: Mapping[str, int] | None = None,
) -> tuple[Check, ...]:
    target = KubernetesTarget(flavour=flavour, namespace="atlas-probe", context=CONTEXT)
    config = StackConfig(stack="mysite", workload="probe", openshift=target, openshift_settings=settings)

    def probe(host: str) -> int:
        if isinstance(registry, Exception):
            raise registry
        return registry

    return kubernetes_checks(
        target, settings, STEPS, kubernetes_rights(config), KubeconfigRequest(context=CONTEXT, flavour=flavour),
        "mysite", api_for=lambda _request: api, probe_registry=probe, widths=widths,
    )


def table(checks: tuple[Check, ...]) -> list[tuple[str, str]]:
    return [(c.name, c.status.value) for c in checks]


def test_a_project_user_on_openshift_passes_and_what_they_may_not_read_is_skipped_with_why() -> None:
    api = FakeApi(PROJECT_USER, {JOBS})
    checks = run(api, settings_for(project={"create": False}, quota={"manage": False}))
    assert table(checks) == [
        ("api", "ok"), ("login", "ok"), ("namespace", "ok"), ("quota", "ok"), ("storage-class", "skip"),
        ("gpu-label", "skip"), ("registry", "ok"),
    ]
    by_name = {c.name: c for c in checks}
    assert by_name["api"].detail == (
        f"{SERVER} answers (Kubernetes v1.33.1; context '{CONTEXT}' from KUBECONFIG (a))"
    )
    assert by_name["login"].detail == f"logged in as alice (token, context '{CONTEXT}')"
    assert by_name["namespace"].detail == "namespace 'atlas-probe' exists, and alice may create Jobs in it"
    assert by_name["gpu-label"].detail.startswith("alice may not list nodes (cluster-wide)")
    assert by_name["registry"].detail == (
        "image.openshift.io/v1 served; the registry quay.io of image quay.io/org/app:1 answers /v2/ (401, asking for "
        "a login as registries do)"
    )
    # Only GETs and reviews: nothing written.
    assert api.reviews == [JOBS]


def test_an_expired_login_is_one_line_saying_to_log_in_again() -> None:
    expired = KubeAuthError(
        "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", 401, "Unauthorized",
        f"the API server {SERVER} refused the credentials of context '{CONTEXT}' (401 Unauthorized: expired or "
        f"revoked); log in again: `oc login --server={SERVER}`",
    )
    answers = {**PROJECT_USER, "/version": expired}
    checks = run(FakeApi(answers, {JOBS}, user=expired), settings_for(project={"create": False}))
    assert table(checks) == [
        ("api", "ok"), ("login", "fail"), ("namespace", "skip"), ("quota", "skip"), ("storage-class", "skip"),
        ("gpu-label", "skip"), ("registry", "skip"),
    ]
    login = checks[1]
    assert login.detail.endswith("(401 Unauthorized: expired or revoked)")
    assert login.fix == f"log in again: `oc login --server={SERVER}`"


def test_a_namespace_the_user_may_not_create_names_the_key_and_the_fix() -> None:
    api = FakeApi({**PROJECT_USER, "/apis/project.openshift.io/v1/projects/atlas-probe": http_error("", 404)}, {JOBS})
    checks = run(api, settings_for())
    namespace = checks[2]
    assert (namespace.name, namespace.status) == ("namespace", Status.FAIL)
    assert namespace.detail == (
        "alice may not create projectrequests.project.openshift.io cluster-wide (atlas:openshift.project.create)"
    )
    assert namespace.fix.startswith("atlas:openshift.project.create: set it to false and `namespace` to the project")
    assert checks[3].status is Status.SKIP and checks[3].detail == "not checked (needs: namespace)"


def test_a_namespace_that_exists_is_this_stacks_own_or_refused() -> None:
    owned = {"metadata": {"name": "atlas-probe", "labels": {"atlas.dev/stack": "mysite"}}}
    other = {"metadata": {"name": "atlas-probe", "labels": {"atlas.dev/stack": "another"}}}
    plain = {"/version": {"gitVersion": "v1.33.1"}}
    ours = run(FakeApi({**plain, "/api/v1/namespaces/atlas-probe": owned}, set(), flavour="kubernetes"),
               settings_for(flavour="kubernetes"), flavour="kubernetes")
    assert ours[2].detail == "namespace 'atlas-probe' exists, made by this stack's `pulumi up`"
    theirs = run(FakeApi({**plain, "/api/v1/namespaces/atlas-probe": other}, set(), flavour="kubernetes"),
                 settings_for(flavour="kubernetes"), flavour="kubernetes")
    assert theirs[2].status is Status.FAIL and "exists already, not made by stack mysite" in theirs[2].detail
    creatable = run(FakeApi(plain, {("create", "namespaces", "", "")}, flavour="kubernetes"),
                    settings_for(flavour="kubernetes"), flavour="kubernetes")
    assert creatable[2].detail == "alice may create a Namespace for 'atlas-probe' (openshift.project.create)"
    # The quota the stack writes in the namespace it makes needs no right of its own.
    assert creatable[3].status is Status.OK and "the stack writes the project's ResourceQuota" in creatable[3].detail


def test_a_swept_steps_pods_at_once_count_against_the_quota() -> None:
    """A sweep of `parallel` 3 of the 2-GPU step needs 6 GPUs at once: a quota of 4 that holds one
    pod fails, naming the sweep's need, before `pulumi up` meets the API's refusal."""
    answers = {
        **PROJECT_USER,
        "/api/v1/namespaces/atlas-probe/resourcequotas": {"items": [quota("q", {"requests.nvidia.com/gpu": "4"})]},
    }
    settings = settings_for(project={"create": False}, quota={"manage": False})
    alone = {c.name: c for c in run(FakeApi(answers, {JOBS}), settings)}
    swept = {c.name: c for c in run(FakeApi(answers, {JOBS}), settings, widths={"train": 3})}
    assert alone["quota"].status == Status.OK
    assert swept["quota"].status == Status.FAIL and "the run needs 6 at its busiest" in swept["quota"].detail
    assert "raise requests.nvidia.com/gpu in q to at least 6" in swept["quota"].fix


def test_a_quota_too_small_a_missing_class_and_a_gpu_product_no_node_carries_each_fail_with_their_fix() -> None:
    answers = {
        **PROJECT_USER,
        "/api/v1/namespaces/atlas-probe/resourcequotas": {"items": [quota("q", {"requests.nvidia.com/gpu": "1"})]},
        "/apis/storage.k8s.io/v1/storageclasses": {"items": [storage_class("std", True)]},
        "/api/v1/nodes?labelSelector=nvidia.com/gpu.product": {"items": [node("g", A100, 8)]},
    }
    settings = settings_for(project={"create": False}, quota={"manage": False}, storage={"class": "gold"})
    checks = run(FakeApi(answers, {JOBS}), settings)
    assert table(checks) == [
        ("api", "ok"), ("login", "ok"), ("namespace", "ok"), ("quota", "fail"), ("storage-class", "fail"),
        ("gpu-label", "fail"), ("registry", "ok"),
    ]
    assert "raise requests.nvidia.com/gpu in q to at least 2" in checks[3].fix
    assert checks[4].fix == "set it to one of them, or leave it out to use the default (std)"
    assert checks[5].fix == "set openshift.gpu.product to one of them"


def test_an_api_server_that_does_not_answer_fails_once_and_the_rest_waits() -> None:
    down = urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))
    checks = run(FakeApi({"/version": down}, set()), settings_for(project={"create": False}))
    assert table(checks) == [
        ("api", "fail"), ("login", "skip"), ("namespace", "skip"), ("quota", "skip"), ("storage-class", "skip"),
        ("gpu-label", "skip"), ("registry", "skip"),
    ]
    assert checks[0].detail.startswith(f"the API server {SERVER} of context '{CONTEXT}' (from KUBECONFIG (a)) does not")
    assert "name the cluster's context (atlas:openshift.context" in checks[0].fix


def test_a_build_needs_openshifts_build_api_and_a_plain_cluster_its_registry() -> None:
    build = {"build": {"git_uri": "https://example.org/a.git", "git_ref": "main"}}
    api = FakeApi({**PROJECT_USER}, {JOBS})
    checks = run(api, settings_for(project={"create": False}, quota={"manage": False}, image=build))
    assert checks[-1].status is Status.FAIL and checks[-1].detail == (
        "the API serves no build.openshift.io/v1 (ImageStreams, BuildConfigs)"
    )
    assert "give openshift.image.reference (an image pushed beforehand) instead of image.build" in checks[-1].fix
    plain = run(
        FakeApi({"/version": {}}, set(), flavour="kubernetes"),
        settings_for(flavour="kubernetes", project={"create": False}),
        flavour="kubernetes",
        registry=OSError("Name or service not known"),
    )
    assert plain[-1].status is Status.FAIL and plain[-1].detail == (
        "the registry quay.io of image quay.io/org/app:1 does not answer (Name or service not known)"
    )
