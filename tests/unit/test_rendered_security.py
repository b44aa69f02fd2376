"""Every Kubernetes object Atlas renders, checked for what a cluster's security review asks of it
(infra/openshift/security_lint.py; issue 34, item 9).

Each stack under stacks/ with a Kubernetes side is rendered by the one program, stacks/__main__.py,
under Pulumi's mocks (its HPC and AWS sides left out: they render no Kubernetes object and would
need their keys), and so are variants of them that reach the renderers no stack file reaches: an
image Atlas did not build, a folder-source workload, a sweep's Indexed Job, S3 staging on either
flavour, the monitor's Ingress, backfill. No finding may stand but those on the allow-list, every
entry of which some rendered object needs. Then each rule is shown to fail: a clean rendered
object is broken one way at a time and the lint must name exactly that.
"""

from __future__ import annotations

import copy
import functools
import json
import runpy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulumi
import pytest
import yaml
from pulumi.runtime import settings as pulumi_settings
from pulumi.runtime.config import set_all_config

from infra.kinds import KINDS
from infra.kinds import kubernetes as kubernetes_kind
from infra.kinds.base import BackfillRequest
from infra.openshift.security_lint import (
    EXEMPTIONS,
    POD_SECURITY_LABELS,
    RULES,
    Exemption,
    SecurityFinding,
    image_pin_problem,
    lint,
    lint_object,
)
from infra.openshift.settings import OpenShiftSettingsError
from infra.openshift.settings_parser import parse_openshift_settings
from infra.outputs import FilesAt, KubernetesOutputs
from tests.unit.openshift_fixtures import FILLED_PLACEHOLDERS, RecordingMocks, RecordingMonitor, example_raw, modified
from tests.unit.test_template_stack import FILLED

REPO = Path(__file__).resolve().parents[2]
STACKS = REPO / "stacks"
PROGRAM = STACKS / "__main__.py"
# A cluster nothing answers at: the program's access check finds the context, and its probe of the
# API gives up at once (connection refused), as it does for an unreachable cluster.
KUBECONFIG = """\
clusters:
- name: nowhere
  cluster: {server: 'https://127.0.0.1:1'}
users:
- name: someone
  user: {token: not-a-token}
contexts:
- name: here
  context: {cluster: nowhere, user: someone}
current-context: here
"""

Objects = list[tuple[str, dict[str, Any]]]
Change = Callable[[dict[str, Any]], None]


def kubernetes_stacks() -> list[str]:
    """Every stack file under stacks/ that declares a Kubernetes side."""
    names = []
    for path in sorted(STACKS.glob("Pulumi.*.yaml")):
        if "atlas:openshift" in yaml.safe_load(path.read_text())["config"]:
            names.append(path.name.removeprefix("Pulumi.").removesuffix(".yaml"))
    return names


def stack_values(stack: str) -> dict[str, Any]:
    """A stack file's `atlas:` keys with its placeholders filled as a user would, without the HPC
    and AWS sides."""
    text = (STACKS / f"Pulumi.{stack}.yaml").read_text()
    for placeholder, value in {**FILLED_PLACEHOLDERS, **FILLED}.items():
        text = text.replace(placeholder, value)
    config = yaml.safe_load(text)["config"]
    return {k: v for k, v in config.items() if k.startswith("atlas:") and k not in ("atlas:hpc", "atlas:aws")}


def _set(path: str, value: Any) -> Change:
    """A change setting `path` (dotted, under `atlas:openshift` unless it starts with `atlas:`)."""

    def change(values: dict[str, Any]) -> None:
        if path.startswith("atlas:"):
            values[path] = value
            return
        *parents, leaf = path.split(".")
        node = values["atlas:openshift"]
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value

    return change


def _drop(path: str) -> Change:
    def change(values: dict[str, Any]) -> None:
        *parents, leaf = path.split(".")
        node = values["atlas:openshift"]
        for key in parents:
            node = node[key]
        node.pop(leaf)

    return change


BACKFILL = _set("atlas:backfill", {"gpus": 2})
ANY_IMAGE = [_drop("image.build"), _set("image.reference", "docker.io/library/python:3.11-slim")]
S3 = _set("data", {"sources": {"imagenet-train": "s3://imagenet/train/", "inception-weights": "https://x.org/w.pth"},
                   "s3": {"credentials_secret": "s3-credentials", "image": "docker.io/amazon/aws-cli:2.15.0"}})
# Variants that reach what no stack file does: (base stack, changes).
VARIANTS: dict[str, tuple[str, list[Change]]] = {
    "local-backfill": ("local", [BACKFILL]),
    "openshift-gpu-backfill": ("openshift-gpu", [BACKFILL]),
    "local-any-image-backfill": ("local", [*ANY_IMAGE, BACKFILL]),
    "openshift-any-image": ("my-site", ANY_IMAGE),
    "local-folder-source": ("local", [_set("atlas:workload", "wordfreq")]),
    "local-folder-source-any-image": ("local", [_set("atlas:workload", "wordfreq"), *ANY_IMAGE]),
    "local-sweep": ("local", [_set("atlas:workload", "workloads/probe/sweep.yaml")]),
    "openshift-sweep": ("my-site", [_set("atlas:workload", "workloads/probe/sweep.yaml")]),
    "openshift-s3-staging": ("openshift-gpu", [S3, _set("monitor.image", "docker.io/library/python:3.11-slim")]),
    "local-s3-and-url-staging": ("local", [_set("atlas:workload", "biggan"), _set("storage.data.size", "300Gi"), S3,
                                           _set("image.workdir", "/opt/biggan")]),
    "local-monitor-ingress": ("local", [_set("monitor.host", "monitor.example.org")]),
}
CASES = [*kubernetes_stacks(), *VARIANTS]


Rendered = tuple[tuple[str, dict[str, Any]], ...]


def render(case: str, folder: Path) -> Rendered:
    """What stacks/__main__.py registers for `case`, as (resource name, manifest): every resource
    that carries a Kubernetes `kind`."""
    stack, changes = VARIANTS.get(case, (case, []))
    values = stack_values(stack)
    for change in changes:
        change(values)
    kubeconfig = folder / "kubeconfig"
    kubeconfig.write_text(KUBECONFIG)
    values["atlas:openshift"].pop("context", None)
    values["atlas:openshift"]["kubeconfig"] = str(kubeconfig)

    mocks = RecordingMocks()
    monitor = RecordingMonitor(mocks)
    pulumi.runtime.set_mocks(mocks, project="atlas", stack=stack, preview=False, monitor=monitor)
    # The project's folder, as the engine gives it to a program (relative paths in config are from there).
    pulumi_settings.SETTINGS.root_directory = str(REPO)
    set_all_config({k: json.dumps(v) if isinstance(v, dict | list) else str(v) for k, v in values.items()})

    @pulumi.runtime.test
    def run() -> None:
        runpy.run_path(str(PROGRAM), run_name="__main__")

    run()
    return tuple((r.name, r.inputs) for r in monitor.registered if r.kind)


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Rendered]:
    """Each case rendered once for the module's tests."""
    return functools.cache(lambda case: render(case, tmp_path_factory.mktemp(case)))


def containers(objects: Objects | Rendered) -> set[str]:
    names = set()
    for _, manifest in objects:
        spec = manifest.get("spec") or {}
        pod = (spec.get("template") or {}).get("spec") or {}
        names |= {c["name"] for key in ("initContainers", "containers") for c in pod.get(key) or []}
    return names


def test_every_stack_with_a_kubernetes_side_is_rendered() -> None:
    # The stacks are found by globbing: a new stack file is linted without editing this test.
    assert set(kubernetes_stacks()) >= {"local", "local-hybrid", "openshift-gpu", "hybrid", "my-site"}


@pytest.mark.parametrize("case", CASES)
def test_a_rendered_stack_has_no_finding_but_the_allow_listed(case: str, rendered: Callable[[str], Rendered]) -> None:
    objects = rendered(case)
    assert any(m["kind"] == "Job" for _, m in objects), f"{case}: nothing rendered"
    result = lint(objects)
    assert not result.findings, f"{case}:\n" + "\n".join(str(f) for f in result.findings)


def test_the_renders_reach_every_kind_of_pod_and_object_atlas_makes(rendered: Callable[[str], Rendered]) -> None:
    every = [item for case in CASES for item in rendered(case)]
    assert containers(every) == {"step", "prepare", "stage", "monitor", "oauth-proxy", "oauth-cookie-secret",
                                 "backfill"}
    kinds = {m["kind"] for _, m in every}
    assert kinds >= {"Job", "Deployment", "ServiceAccount", "Namespace", "BuildConfig", "ProjectRequest"}
    assert any(m["kind"] == "Job" and m["spec"].get("completionMode") == "Indexed" for _, m in every)
    assert any(m.get("spec", {}).get("template", {}).get("spec", {}).get("initContainers") for _, m in every)
    images = {c["image"] for _, m in every for c in (m.get("spec", {}).get("template", {}).get("spec", {})
                                                     .get("containers") or [])}
    # The images from each source: a build's pull spec, a reference, the proxy's, aws-cli, the monitor's.
    assert any(i.startswith("image-registry.openshift-image-registry.svc:5000/") for i in images), images
    assert {"docker.io/library/python:3.11-slim", "docker.io/amazon/aws-cli:2.15.0"} <= images, images
    assert any(i.startswith("quay.io/openshift/origin-oauth-proxy:") for i in images), images


def test_every_allow_list_entry_is_needed_and_explained(rendered: Callable[[str], Rendered]) -> None:
    used: set[Exemption] = set()
    for case in CASES:
        used |= {exemption for _, exemption in lint(rendered(case)).exempted}
    assert used == set(EXEMPTIONS), f"stale allow-list entries: {set(EXEMPTIONS) - used}"
    for exemption in EXEMPTIONS:
        assert exemption.rule in RULES and len(exemption.reason) > 40, exemption
    # docs/security.md names each exempted container and rule.
    doc = (REPO / "docs" / "security.md").read_text()
    for exemption in EXEMPTIONS:
        assert f"`{exemption.container}`" in doc and f"`{exemption.rule}`" in doc, exemption
    for rule in RULES:
        assert f"`{rule}`" in doc, rule


def test_the_namespaces_atlas_creates_enforce_the_restricted_standard(rendered: Callable[[str], Rendered]) -> None:
    namespaces = [m for case in ("local", "local-backfill") for _, m in rendered(case) if m["kind"] == "Namespace"]
    assert len(namespaces) == 3  # the run's (twice) and backfill's
    for namespace in namespaces:
        labels = namespace["metadata"]["labels"]
        assert {k: labels[k] for k in POD_SECURITY_LABELS} == POD_SECURITY_LABELS


def test_only_the_login_proxy_gets_a_token_and_only_off_openshift_a_uid(rendered: Callable[[str], Rendered]) -> None:
    objects = dict(rendered("openshift-gpu"))
    pod = objects["openshift-monitor-deployment"]["spec"]["template"]["spec"]
    assert pod["automountServiceAccountToken"] is False
    token_volumes = {v["name"] for v in pod["volumes"] if "projected" in v}
    mounting = {c["name"] for key in ("containers", "initContainers") for c in pod.get(key, [])
                for m in c.get("volumeMounts", []) if m["name"] in token_volumes}
    assert mounting == {"oauth-proxy"}
    # OpenShift assigns the UID from the project's range: no pod of the run names one.
    for name, manifest in rendered("openshift-any-image"):
        if manifest["kind"] in ("Job", "Deployment"):
            assert "runAsUser" not in manifest["spec"]["template"]["spec"]["securityContext"], name
    # Off OpenShift an image Atlas did not build runs as 1001 in group 0, backfill's copies too.
    uids = {m["spec"]["template"]["spec"]["securityContext"].get("runAsUser")
            for _, m in rendered("local-any-image-backfill") if m["kind"] in ("Job", "Deployment")}
    assert uids == {1001}


def test_helpers_write_only_to_their_volumes(rendered: Callable[[str], Rendered]) -> None:
    for name, manifest in rendered("local-s3-and-url-staging"):
        if manifest["kind"] != "Job" or manifest["metadata"]["labels"]["app.kubernetes.io/component"] == "step":
            continue
        pod = manifest["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True, name
        scratch = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}["/tmp"]
        assert {"name": scratch, "emptyDir": {"sizeLimit": "256Mi"}} in pod["volumes"], name
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["HOME"] == env["TMPDIR"] == "/tmp", name


# --- each rule fails when a renderer regresses -----------------------------------------------------------


def _pod(manifest: dict[str, Any]) -> dict[str, Any]:
    return manifest["spec"]["template"]["spec"]


def _container(name: str) -> Callable[[dict[str, Any]], dict[str, Any]]:
    def find(manifest: dict[str, Any]) -> dict[str, Any]:
        pod = _pod(manifest)
        return next(c for key in ("initContainers", "containers") for c in pod.get(key, []) if c["name"] == name)

    return find


MONITOR = ("openshift-gpu", "openshift-monitor-deployment")
TRAIN = ("openshift-gpu", "openshift-pipeline-train")
STAGING = ("openshift-gpu", "openshift-staging-inception-weights")
BACKFILL_DEPLOYMENT = ("local-backfill", "backfill-deployment")
proxy, cookie, monitor_container, step = (_container(n) for n in ("oauth-proxy", "oauth-cookie-secret", "monitor",
                                                                  "step"))

# (what is broken, the object it is broken in, how, the one finding expected: container, rule)
REGRESSIONS: list[tuple[str, tuple[str, str], Change, tuple[str, str]]] = [
    ("runAsNonRoot dropped from the pod", TRAIN,
     lambda m: _pod(m)["securityContext"].pop("runAsNonRoot"), ("step", "run-as-non-root")),
    ("a step as root", TRAIN,
     lambda m: step(m)["securityContext"].update(runAsUser=0), ("step", "run-as-non-root")),
    ("privilege escalation allowed", MONITOR,
     lambda m: monitor_container(m)["securityContext"].update(allowPrivilegeEscalation=True),
     ("monitor", "no-privilege-escalation")),
    ("a privileged init container", MONITOR,
     lambda m: cookie(m)["securityContext"].update(privileged=True),
     ("oauth-cookie-secret", "no-privilege-escalation")),
    ("the monitor's root filesystem writable", MONITOR,
     lambda m: monitor_container(m)["securityContext"].pop("readOnlyRootFilesystem"),
     ("monitor", "read-only-root-filesystem")),
    ("a staging helper's root filesystem writable", STAGING,
     lambda m: _container("stage")(m)["securityContext"].update(readOnlyRootFilesystem=False),
     ("stage", "read-only-root-filesystem")),
    ("capabilities kept", MONITOR,
     lambda m: proxy(m)["securityContext"].update(capabilities={"drop": []}), ("oauth-proxy", "capabilities")),
    ("a capability added", TRAIN,
     lambda m: step(m)["securityContext"].update(capabilities={"drop": ["ALL"], "add": ["NET_ADMIN"]}),
     ("step", "capabilities")),
    ("seccomp unconfined", TRAIN,
     lambda m: _pod(m)["securityContext"].update(seccompProfile={"type": "Unconfined"}), ("step", "seccomp")),
    ("an init container without limits", MONITOR,
     lambda m: cookie(m)["resources"].pop("limits"), ("oauth-cookie-secret", "resources")),
    ("a sidecar without a memory request", MONITOR,
     lambda m: proxy(m)["resources"]["requests"].pop("memory"), ("oauth-proxy", "resources")),
    ("a backfill copy without a CPU limit", BACKFILL_DEPLOYMENT,
     lambda m: _container("backfill")(m)["resources"]["limits"].pop("cpu"), ("backfill", "resources")),
    ("an image tagged latest", MONITOR,
     lambda m: proxy(m).update(image="quay.io/openshift/origin-oauth-proxy:latest"), ("oauth-proxy", "image-pinned")),
    ("an untagged image", TRAIN,
     lambda m: step(m).update(image="image-registry.openshift-image-registry.svc:5000/atlas/biggan"),
     ("step", "image-pinned")),
    ("host network", TRAIN, lambda m: _pod(m).update(hostNetwork=True), ("", "host-namespaces")),
    ("host PID", BACKFILL_DEPLOYMENT, lambda m: _pod(m).update(hostPID=True), ("", "host-namespaces")),
    ("a host port", MONITOR,
     lambda m: monitor_container(m)["ports"][0].update(hostPort=8080), ("monitor", "host-namespaces")),
    ("a hostPath volume", STAGING,
     lambda m: _pod(m)["volumes"].append({"name": "host", "hostPath": {"path": "/"}}), ("", "host-path")),
    ("the token automounted", BACKFILL_DEPLOYMENT,
     lambda m: _pod(m).pop("automountServiceAccountToken"), ("", "service-account-token")),
    ("the token projected into the monitor too", MONITOR,
     lambda m: monitor_container(m)["volumeMounts"].append({"name": "oauth-client", "mountPath": "/var/run/x"}),
     ("monitor", "service-account-token")),
    ("the steps' ServiceAccount with a token", ("openshift-gpu", "openshift-jobs"),
     lambda m: m.pop("automountServiceAccountToken"), ("", "service-account-token")),
    ("the proxy's ServiceAccount with a token", ("openshift-gpu", "openshift-monitor-service-account"),
     lambda m: m.update(automountServiceAccountToken=True), ("", "service-account-token")),
    ("a namespace without Pod Security admission", ("local", "openshift-namespace"),
     lambda m: m["metadata"]["labels"].pop("pod-security.kubernetes.io/enforce"), ("", "pod-security-admission")),
    ("a build from an unpinned base image", ("openshift-gpu", "openshift-image-build"),
     lambda m: m["spec"]["strategy"]["dockerStrategy"]["buildArgs"][-1].update(value="quay.io/x/pytorch"),
     ("", "image-pinned")),
    ("a build pushing latest", ("openshift-gpu", "openshift-image-build"),
     lambda m: m["spec"]["output"]["to"].update(name="biggan-openshift-gpu:latest"), ("", "image-pinned")),
    ("a build without limits", ("openshift-gpu", "openshift-image-build"),
     lambda m: m["spec"]["resources"].pop("limits"), ("", "resources")),
]


@pytest.mark.parametrize(("what", "where", "change", "expected"), REGRESSIONS, ids=[r[0] for r in REGRESSIONS])
def test_a_regressed_renderer_is_found(
    what: str, where: tuple[str, str], change: Change, expected: tuple[str, str], rendered: Callable[[str], Rendered]
) -> None:
    case, name = where
    manifest = copy.deepcopy(dict(rendered(case))[name])
    assert lint([(name, manifest)]).findings == (), f"{name} is not clean before the change"
    change(manifest)
    findings = lint([(name, manifest)]).findings
    assert [(f.obj, f.container, f.rule) for f in findings] == [(name, *expected)], what


def test_an_exempted_rule_stays_exempt_only_for_its_container(rendered: Callable[[str], Rendered]) -> None:
    manifest = copy.deepcopy(dict(rendered("openshift-gpu"))["openshift-pipeline-train"])
    result = lint([("train", manifest)])
    assert [(f.container, f.rule) for f, _ in result.exempted] == [("step", "read-only-root-filesystem")]
    step(manifest)["name"] = "renamed"
    assert [(f.container, f.rule) for f in lint([("train", manifest)]).findings] == [
        ("renamed", "read-only-root-filesystem")
    ]


def test_kinds_without_a_pod_are_not_judged_and_a_pod_kind_without_a_template_is() -> None:
    assert lint_object("q", {"kind": "ResourceQuota", "spec": {"hard": {}}}) == []
    no_template = SecurityFinding("j", "", "resources", "a Job without a pod template")
    assert lint_object("j", {"kind": "Job", "spec": {}}) == [no_template]


@pytest.mark.parametrize(
    ("reference", "problem"),
    [
        ("quay.io/openshift/origin-oauth-proxy:4.16", None),
        ("127.0.0.1:16510/atlas/debian-python:bookworm", None),
        ("docker.io/library/python@sha256:" + "a" * 64, None),
        ("docker.io/library/python:3.11@sha256:" + "0" * 64, None),
        ("python:3.11-slim", None),
        ("python", "has no tag or digest"),
        ("127.0.0.1:16510/atlas/debian-python", "has no tag or digest"),
        ("registry.example.org:5000/atlas", "has no tag or digest"),
        ("quay.io/x/y:latest", "is tagged latest"),
        ("docker.io/library/python@sha256:abc", "malformed digest"),
    ],
)
def test_image_pin_problem(reference: str, problem: str | None) -> None:
    found = image_pin_problem(reference)
    assert (found is None) if problem is None else (found is not None and problem in found), found


@pytest.mark.parametrize(
    ("path", "value"),
    [
        ("monitor.image", "docker.io/library/python"),
        ("monitor.proxy_image", "quay.io/openshift/origin-oauth-proxy:latest"),
        ("data.image", "registry.example.org:5000/tools"),
        ("image.build.base_image", "quay.io/x/pytorch:latest"),
    ],
)
def test_the_config_refuses_an_unpinned_image_naming_the_key_and_the_fix(path: str, value: str) -> None:
    *parents, leaf = path.split(".")

    def change(raw: dict[str, Any]) -> None:
        node = raw
        for key in parents:
            node = node.setdefault(key, {})
        node[leaf] = value

    with pytest.raises(OpenShiftSettingsError) as refused:
        parse_openshift_settings(modified(example_raw(), change), "atlas:openshift")
    message = str(refused.value)
    assert message.startswith(f"atlas:openshift.{path}: "), message
    assert "pin it: write registry/path:<version tag> or registry/path@sha256:<digest>" in message, message


# --- `atlas nodes --backfill`: what it applies without a stack ---------------------------------------------


class RecordingClient:
    """Takes the place of the API client: keeps what would be applied."""

    def __init__(self) -> None:
        self.applied: list[dict[str, Any]] = []

    def request(self, method: str, path: str, body: Any = None, content_type: str | None = None) -> Any:
        assert method == "PATCH", (method, path)
        self.applied.append(body)
        return {}


@pytest.mark.parametrize(("flavour", "uid"), [("kubernetes", 1001), ("openshift", None)])
def test_atlas_nodes_backfill_applies_objects_that_pass_the_lint(
    flavour: str, uid: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    client = RecordingClient()
    monkeypatch.setattr(kubernetes_kind, "client_for", lambda access, outputs: client)
    outputs = KubernetesOutputs(gpus_requested=1, run_id="1", flavour=flavour, namespace="atlas-local", steps=(),
                                telemetry=FilesAt(""), logs=FilesAt(""), image="registry.local/atlas/probe:dev")
    request = BackfillRequest(environment="openshift", source=None, access=None, project=REPO,  # type: ignore[arg-type]
                              workload="probe", run_workload="probe", slots=2, partition="backfill", stop=False)
    said: list[str] = []
    KINDS["kubernetes"].backfill(request, outputs, said.append)
    assert [o["kind"] for o in client.applied] == ["PriorityClass", "Namespace", "Deployment"], said
    result = lint((o["kind"], o) for o in client.applied)
    assert not result.findings, result.findings
    assert [(f.container, f.rule) for f, _ in result.exempted] == [("backfill", "read-only-root-filesystem")]
    pod = client.applied[-1]["spec"]["template"]["spec"]
    # Off OpenShift nothing assigns a UID and the run's image may name root: the run's own UID.
    assert pod["securityContext"].get("runAsUser") == uid
