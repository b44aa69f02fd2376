"""The OpenShift side's JobCompletion against the local cluster's real API server, job
controller and KWOK pods: a step that succeeds, one that fails with its exit code, one whose
Job is deleted outside while Atlas waits, one whose pods the quota refuses, and the provider's
create as the engine calls it."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import pytest

from infra.kubeapi import KubeApi
from infra.openshift import completion
from infra.openshift.completion import JobCompletionProvider, StepFailed, StepJob, wait_for_step
from localenv import kube, kwok
from localenv.layout import Layout
from tests.support import scratch_namespace, wait_until

pytestmark = pytest.mark.integration


@pytest.fixture
def namespace(kube_env: Layout) -> Iterator[str]:
    with scratch_namespace(kube_env, "it-done") as name:
        yield name


def create_job(
    layout: Layout, namespace: str, name: str, annotations: dict[str, str] | None = None, claim: str | None = None
) -> StepJob:
    volumes = [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}] if claim else []
    manifest = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": annotations or {}},
                "spec": kwok.on_simulated_nodes({
                    "restartPolicy": "Never",
                    "containers": [{"name": "step", "image": "busybox",
                                    "volumeMounts": [{"name": v["name"], "mountPath": "/data"} for v in volumes]}],
                    "volumes": volumes,
                }),
            },
        },
    }
    created = json.loads(kube.kubectl(layout, "create", "-o", "json", "-f", "-", stdin=json.dumps(manifest)))
    return StepJob(namespace=namespace, name=name, uid=created["metadata"]["uid"], step=name, job_urn=f"urn:x::{name}")


def job_conditions(api: KubeApi, job: StepJob) -> set[str]:
    current = api.get(job.job_path)
    return {c["type"] for c in current.get("status", {}).get("conditions", []) if c["status"] == "True"}


def test_a_step_is_done_when_its_pod_succeeded(kube_env: Layout, namespace: str):
    api = KubeApi(kube_env.kubeconfig)
    job = create_job(kube_env, namespace, "ok", {kwok.RUN_SECONDS_ANNOTATION: "2"})
    notes: list[str] = []
    progress = wait_for_step(api, job, 60, notes.append)
    assert progress.succeeded and progress.pod.startswith("ok-") and progress.exit_code == 0
    pod = api.get(f"/api/v1/namespaces/{namespace}/pods/{progress.pod}")
    assert pod["status"]["phase"] == "Succeeded"
    # The job controller agrees, on its own time.
    wait_until(lambda: "Complete" in job_conditions(api, job), "the job controller to mark the Job Complete", 30,
               pause=0.2)


def test_a_failed_step_names_its_exit_code_and_the_controllers_reason(kube_env: Layout, namespace: str):
    api = KubeApi(kube_env.kubeconfig)
    job = create_job(kube_env, namespace, "doomed", {kwok.EXIT_CODE_ANNOTATION: "3", kwok.RUN_SECONDS_ANNOTATION: "1"})
    with pytest.raises(StepFailed) as failed:
        wait_for_step(api, job, 60)
    message = str(failed.value)
    assert "step 'doomed'" in message and "BackoffLimitExceeded" in message and "exited 3" in message
    assert "pulumi up --replace 'urn:x::doomed'" in message
    assert "Failed" in job_conditions(api, job)


def test_a_job_deleted_outside_while_awaited_stops_the_wait(kube_env: Layout, namespace: str):
    api = KubeApi(kube_env.kubeconfig)
    job = create_job(kube_env, namespace, "long", {kwok.RUN_SECONDS_ANNOTATION: "120"})
    deleter = threading.Timer(2.0, lambda: kube.kubectl(kube_env, "delete", "job", "-n", namespace, "long"))
    deleter.start()
    started = time.monotonic()
    try:
        with pytest.raises(StepFailed, match="deleted outside Atlas"):
            wait_for_step(api, job, 120)
    finally:
        deleter.cancel()
    # Seen within a watch window, not at the step's timeout.
    assert time.monotonic() - started < 20


def test_a_claim_that_never_binds_fails_the_step_naming_it(
    kube_env: Layout, namespace: str, monkeypatch: pytest.MonkeyPatch
):
    # The claims are not awaited (skipAwait): the step's completion notices one that stays unbound.
    monkeypatch.setattr(completion, "UNBOUND_CLAIM_LIMIT_S", 2)
    claim = {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "orphan", "namespace": namespace},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}},
                 "storageClassName": "no-such-class"},
    }
    kube.kubectl(kube_env, "create", "-f", "-", stdin=json.dumps(claim))
    job = create_job(kube_env, namespace, "stuck", claim="orphan")
    notes: list[str] = []
    with pytest.raises(StepFailed) as failed:
        wait_for_step(KubeApi(kube_env.kubeconfig), job, 120, notes.append)
    assert "unbound" in str(failed.value) and "kubectl describe pvc" in str(failed.value)
    assert any("is not scheduled" in n for n in notes)


def test_pods_the_quota_refuses_fail_the_step_with_the_api_servers_message(
    kube_env: Layout, namespace: str, monkeypatch: pytest.MonkeyPatch
):
    # A quota of no pods: the job controller's every create is refused (FailedCreate events on
    # the Job), which the wait reads instead of saying "no pod yet" until its timeout.
    monkeypatch.setattr(completion, "POD_REFUSED_LIMIT_S", 2)
    quota = {
        "apiVersion": "v1", "kind": "ResourceQuota",
        "metadata": {"name": "no-pods", "namespace": namespace},
        "spec": {"hard": {"pods": "0"}},
    }
    kube.kubectl(kube_env, "create", "-f", "-", stdin=json.dumps(quota))
    job = create_job(kube_env, namespace, "refused")
    notes: list[str] = []
    with pytest.raises(StepFailed) as failed:
        wait_for_step(KubeApi(kube_env.kubeconfig), job, 120, notes.append)
    message = str(failed.value)
    assert "failed: the API server has refused to create its pod for" in message
    assert "exceeded quota: no-pods" in message and "atlas:openshift.quota" in message


def test_the_providers_create_waits_and_records_the_pod(kube_env: Layout, namespace: str):
    job = create_job(kube_env, namespace, "via-provider", {kwok.RUN_SECONDS_ANNOTATION: "1"})
    props = {
        "kubeconfig": str(kube_env.kubeconfig),
        "context": None,
        "namespace": namespace,
        "job_name": job.name,
        "job_uid": job.uid,
        "job_urn": job.job_urn,
        "step": "via-provider",
        "timeout_s": 60,
    }
    result = JobCompletionProvider().create(props)
    assert result.id == f"{namespace}/via-provider/done"
    assert result.outs["state"] == "succeeded" and result.outs["pod"].startswith("via-provider-")
    assert result.outs["finished_at"]
