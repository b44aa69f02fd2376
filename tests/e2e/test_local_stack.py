"""The real `pulumi` CLI against the local cluster, the OpenShift side alone: preview, up,
no-change preview, refresh, destroy; checked through the Kubernetes API after each."""

from __future__ import annotations

import datetime as dt
import json
import re
import time
import urllib.error
import uuid

import pytest

from infra.openshift.security_lint import POD_SECURITY_LABELS
from infra.outputs import OUTPUTS_VERSION
from localenv import kube
from localenv.layout import Layout
from localenv.procs import LocalEnvError
from tests.e2e.pulumi_cli import PulumiProject, local_openshift
from tests.support import wait_until

pytestmark = pytest.mark.e2e
STACK = "local"


def namespace(layout: Layout, name: str) -> dict | None:
    try:
        return kube.api_get(layout, f"/api/v1/namespaces/{name}")
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return None
        raise


def wait_gone(layout: Layout, name: str, timeout: float = 60) -> None:
    wait_until(lambda: namespace(layout, name) is None, f"namespace {name} to go after destroy", timeout)


@pytest.fixture
def project(tmp_path, kube_env):
    proj = PulumiProject.create(tmp_path)
    ns = f"atlas-e2e-{uuid.uuid4().hex[:6]}"
    config = proj.stack_config(STACK)
    config["atlas:openshift"] = local_openshift(config["atlas:openshift"], kube_env, ns)
    # The OpenShift side alone (test_local_all_sides.py runs every side together).
    config["atlas:hpc"] = {name: {**env, "enabled": False} for name, env in config["atlas:hpc"].items()}
    proj.set_stack_config(STACK, config)
    proj.run("stack", "init", STACK)
    yield proj, ns
    # Whatever happened above, leave no namespace and no stack behind.
    proj.run("destroy", "--yes", "-s", STACK, check=False)
    proj.run("stack", "rm", "--yes", "-s", STACK, check=False)


def test_preview_up_refresh_destroy(project, kube_env):
    proj, ns = project

    preview = proj.run("preview", "-s", STACK, "--diff")
    assert "kubernetes:core/v1:Namespace" in preview.stdout
    # The probe's Containerfile builds FROM the base image the stack names, which the local
    # registry serves: nothing to warn of (infra/image_check.py).
    assert "image build:" not in preview.stdout + preview.stderr
    assert namespace(kube_env, ns) is None, "preview must not create anything"

    proj.run("up", "--yes", "-s", STACK)
    created = namespace(kube_env, ns)
    assert created is not None
    labels = created["metadata"]["labels"]
    assert labels["app.kubernetes.io/managed-by"] == "atlas"
    assert labels["atlas.dev/stack"] == STACK

    outputs = proj.outputs(STACK)
    assert outputs["atlas"]["version"] == OUTPUTS_VERSION
    assert outputs["atlas"]["stack"] == STACK
    env = outputs["environments"]["openshift"]
    assert env["namespace"] == ns
    assert env["api_url"] == kube_env.api_url
    assert env["kind"] == "kubernetes"
    assert {s["name"] for s in env["steps"]} == {"make-hdf5", "inception-moments", "train"}
    assert env["flavour"] == "kubernetes"

    # Ingress denied to every pod and the monitor's port let in, in force before any pod started:
    # the API server accepted both policies, and each pod was created after the last of them.
    policies = kube.api_get(kube_env, f"/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies")["items"]
    by_role = {policy["metadata"]["labels"]["atlas.dev/policy"]: policy["spec"] for policy in policies}
    assert by_role.keys() == {"deny-ingress", "monitor-ingress"}, policies
    assert by_role["deny-ingress"] == {"podSelector": {}, "policyTypes": ["Ingress"]}
    pods = kube.api_get(kube_env, f"/api/v1/namespaces/{ns}/pods")["items"]
    selector = by_role["monitor-ingress"]["podSelector"]["matchLabels"]
    monitors = [pod for pod in pods if selector.items() <= pod["metadata"]["labels"].items()]
    assert monitors, f"the monitor policy selects no pod: {selector}"
    served = {p["containerPort"] for c in monitors[0]["spec"]["containers"] for p in c.get("ports", [])}
    allowed = {port["port"] for rule in by_role["monitor-ingress"]["ingress"] for port in rule["ports"]}
    assert allowed and allowed <= served, (allowed, served)
    last_policy = max(policy["metadata"]["creationTimestamp"] for policy in policies)
    assert all(pod["metadata"]["creationTimestamp"] >= last_policy for pod in pods), (last_policy, pods)

    # Pod Security admission holds the namespace to the restricted standard (docs/security.md): every
    # pod Atlas made was admitted and runs (helpers and the monitor with read-only root filesystems),
    # and a pod that asks for root is refused by the API server (a server-side dry run: nothing made).
    assert {key: labels.get(key) for key in POD_SECURITY_LABELS} == POD_SECURITY_LABELS
    finished = {"prepare-volumes", "make-hdf5", "inception-moments"}

    def started() -> list[dict] | None:
        pods = kube.api_get(kube_env, f"/api/v1/namespaces/{ns}/pods")["items"]
        by_step = {p["metadata"]["labels"].get("atlas.dev/step") or p["metadata"]["labels"][
            "app.kubernetes.io/component"]: p for p in pods}
        ready = [c.get("ready") for c in by_step.get("monitor", {}).get("status", {}).get("containerStatuses", [])]
        done = all(by_step.get(step, {}).get("status", {}).get("phase") == "Succeeded" for step in finished)
        running = by_step.get("train", {}).get("status", {}).get("phase") in ("Running", "Succeeded")
        return pods if ready == [True] and done and running else None

    for pod in wait_until(started, "the monitor ready, the preparation done and training started", 180):
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True, pod["metadata"]["name"]
    as_root = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "as-root", "namespace": ns},
               "spec": {"containers": [{"name": "c", "image": pods[0]["spec"]["containers"][0]["image"],
                                        "securityContext": {"runAsUser": 0}}]}}
    with pytest.raises(LocalEnvError, match=r'violates PodSecurity "restricted:latest"'):
        kube.kubectl(kube_env, "create", "--dry-run=server", "-f", "-", stdin=json.dumps(as_root))

    # A second run has nothing to do: --expect-no-changes fails on any diff.
    proj.run("preview", "--expect-no-changes", "-s", STACK)
    uid = created["metadata"]["uid"]

    proj.run("refresh", "--yes", "-s", STACK)
    after_refresh = namespace(kube_env, ns)
    assert after_refresh is not None and after_refresh["metadata"]["uid"] == uid
    proj.run("preview", "--expect-no-changes", "-s", STACK)

    proj.run("destroy", "--yes", "-s", STACK)
    wait_gone(kube_env, ns)


def test_bad_config_fails_preview_before_any_resource(project, kube_env):
    proj, _ns = project
    config = proj.stack_config(STACK)
    config["atlas:openshift"] = {**config["atlas:openshift"], "namespace": "Not_A_Name"}
    proj.set_stack_config(STACK, config)
    result = proj.run("preview", "-s", STACK, check=False)
    assert result.returncode != 0
    text = result.stdout + result.stderr
    assert "atlas:openshift.namespace" in text
    assert "Traceback" not in text
    assert "kubernetes:core/v1:Namespace" not in text


def test_preview_warns_of_a_fixed_from_the_local_build_cannot_pull(project, kube_env):
    proj, ns = project
    containerfile = proj.root / "workloads" / "probe" / "Containerfile"
    text = containerfile.read_text()
    containerfile.write_text(text.replace("FROM ${BASE_IMAGE}", "FROM docker.io/library/python:3.11-slim"))
    line = next(i for i, row in enumerate(text.splitlines(), 1) if row.startswith("FROM "))
    preview = proj.run("preview", "-s", STACK)  # a warning: preview goes on
    shown = " ".join((preview.stdout + preview.stderr).split())  # as the CLI wraps it
    assert (f"image build: workloads/probe/Containerfile:{line}: FROM docker.io/library/python:3.11-slim is a "
            "fixed image the local environment cannot pull") in shown
    assert "set the image in the stack's image.build.base_image" in shown
    assert "kubernetes:core/v1:Namespace" in preview.stdout
    assert namespace(kube_env, ns) is None


def test_a_failed_image_build_ends_up_at_once_with_its_reason_and_log(project, kube_env):
    """The issue-34 case: the workload names a Containerfile the Git source does not have, so the
    build fails in a second; `up` ends then, naming the build, its reason and buildah's line,
    instead of waiting image.build.timeout_seconds (900 s here) on a tag that never comes."""
    proj, ns = project
    missing = "workloads/probe/missing/Containerfile"
    definition = proj.root / "workloads" / "probe" / "workload.yaml"
    text = definition.read_text()
    assert "containerfile: workloads/probe/Containerfile" in text
    definition.write_text(text.replace("containerfile: workloads/probe/Containerfile", f"containerfile: {missing}"))
    timeout = proj.stack_config(STACK)["atlas:openshift"]["image"]["build"]["timeout_seconds"]

    started = time.time()
    result = proj.run("up", "--yes", "--skip-preview", "-s", STACK, check=False, timeout=timeout + 120)
    ended = time.time()
    shown = result.stdout + result.stderr
    assert result.returncode != 0, shown

    builds = kube.api_get(kube_env, f"/apis/build.openshift.io/v1/namespaces/{ns}/builds")["items"]
    (build,) = builds
    name, status = build["metadata"]["name"], build["status"]
    assert (status["phase"], status["reason"]) == ("Failed", "DockerBuildFailed"), status
    assert f"image build {ns}/{name} of BuildConfig {ns}/" in shown
    assert "ended Failed: DockerBuildFailed: Docker build strategy has failed." in shown
    # buildah's own line, from the Build's log snippet (the local API serves no builds/<name>/log).
    assert re.search(rf"stat \S+/{re.escape(missing)}: no such file or directory", shown), shown
    assert "the Build's status.logSnippet" in shown
    assert build["metadata"]["annotations"]["atlas.dev/build-log"] in shown
    assert "timed out" not in shown and "Traceback" not in shown, shown
    # Ended when the build did, not at the timeout: pulumi exited within seconds of the build's end.
    completed = dt.datetime.strptime(status["completionTimestamp"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    after_build = ended - completed.timestamp()
    assert after_build < 30, f"pulumi up ended {after_build:.0f} s after the build failed"
    assert ended - started < timeout / 3, f"pulumi up took {ended - started:.0f} s"
    # Nothing that pulls the image was created.
    assert kube.api_get(kube_env, f"/apis/batch/v1/namespaces/{ns}/jobs")["items"] == []
    print(f"failed build: pulumi up ended {after_build:.1f} s after build {name} failed, "
          f"{ended - started:.0f} s in all (local environment; the BuildConfig runner is a stand-in)")
