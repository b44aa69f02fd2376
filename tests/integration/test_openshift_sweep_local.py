"""The OpenShift side's SweepCompletion against the local cluster's real API server and job
controller: an Indexed Job whose one point exits 1 on purpose runs that point twice where it may
try twice (backoffLimitPerIndex 1, max_attempts 2), fails the wait naming the point and its log,
and reads as `F` among `D`s; a sweep whose Job is deleted outside Atlas reads as killed."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from infra.hpc import arrays
from infra.kubeapi import KubeApi
from infra.openshift.completion import StepFailed, StepJob
from infra.openshift.manifests.sweep_jobs import INDEX_ANNOTATION
from infra.openshift.sweep_completion import SweepCompletionProvider, element_letters, read_sweep, wait_for_sweep
from localenv import images, kube, kwok, node
from localenv.layout import Layout
from tests.support import scratch_namespace, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("root")]


@pytest.fixture
def namespace(kube_env: Layout) -> Iterator[str]:
    with scratch_namespace(kube_env, "it-sweep") as name:
        yield name


def create(
    layout: Layout, namespace: str, name: str, size: int, retries: int, pod_spec: dict[str, Any],
    annotations: dict[str, str] | None = None,
) -> StepJob:
    """An Indexed Job of `size` points, each tried `retries` + 1 times at most, as the pipeline makes one."""
    manifest = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "completionMode": "Indexed",
            "completions": size,
            "parallelism": size,
            "backoffLimitPerIndex": retries,
            "template": {
                "metadata": {"annotations": annotations or {}},
                "spec": {"restartPolicy": "Never", **pod_spec},
            },
        },
    }
    created = json.loads(kube.kubectl(layout, "create", "-o", "json", "-f", "-", stdin=json.dumps(manifest)))
    return StepJob(namespace=namespace, name=name, uid=created["metadata"]["uid"], step=name, job_urn=f"urn:x::{name}")


def props(layout: Layout, job: StepJob, size: int, wait: bool) -> dict[str, Any]:
    return {"kubeconfig": str(layout.kubeconfig), "context": None, "namespace": job.namespace,
            "job_name": job.name, "job_uid": job.uid, "job_urn": job.job_urn, "step": job.step, "size": size,
            "wait": wait, "timeout_s": 240}  # fmt: skip


def test_a_point_that_fails_on_purpose_runs_twice_and_reads_as_failed_among_the_done(
    kube_env: Layout, namespace: str
) -> None:
    image = f"{images.registry_host(kube_env)}/{images.BASE_REPOSITORY}:{images.BASE_TAG}"
    script = 'echo "point $JOB_COMPLETION_INDEX"; [ "$JOB_COMPLETION_INDEX" != 1 ] || { echo "bad value" >&2; exit 1; }'
    job = create(kube_env, namespace, "sweep", 3, 1, {
        "nodeSelector": {node.NODE_KIND_LABEL: "kubelet"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1001, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{
            "name": "step", "image": image, "command": ["sh", "-c", script],
            "resources": {"limits": {"cpu": "200m", "memory": "128Mi"}},
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        }],
    })  # fmt: skip
    provider = SweepCompletionProvider()
    with pytest.raises(StepFailed) as failed:
        provider.create(props(kube_env, job, 3, wait=True))
    message = str(failed.value)
    assert message.startswith("step 'sweep' (Job "), message
    assert "failed: point(s) 1 did not succeed (2 done, 1 failed)" in message, message
    assert "bad value" in message and "pulumi up --replace 'urn:x::sweep'" in message, message
    # Refresh reads the same: the failed point among the done ones, one query of the Job.
    read = provider.read("id", {**props(kube_env, job, 3, wait=True), "elements": "P3"})
    assert read.outs["elements"] == "D1F1D1" and read.outs["state"] == "failed"
    assert read.outs["counts"] == {"done": 2, "failed": 1}
    # The failed point ran twice (max_attempts 2), the others once.
    pods = kube.api_get(kube_env, f"/api/v1/namespaces/{namespace}/pods?labelSelector="
                                  f"batch.kubernetes.io/controller-uid={job.uid}")["items"]  # fmt: skip
    tries = sorted(int(p["metadata"]["annotations"][INDEX_ANNOTATION]) for p in pods)
    assert tries == [0, 1, 1, 2], tries
    assert {p["status"]["phase"] for p in pods if p["metadata"]["annotations"][INDEX_ANNOTATION] == "1"} == {"Failed"}


def test_a_sweep_deleted_outside_atlas_reads_as_killed(kube_env: Layout, namespace: str) -> None:
    api = KubeApi(kube_env.kubeconfig)
    job = create(kube_env, namespace, "long", 3, 0, kwok.on_simulated_nodes(
        {"containers": [{"name": "step", "image": "busybox"}]}
    ), {kwok.RUN_SECONDS_ANNOTATION: "300"})  # fmt: skip
    # Not awaited (a last step): up reads it once, and returns.
    provider = SweepCompletionProvider()
    created = provider.create(props(kube_env, job, 3, wait=False))
    assert set(arrays.decode(created.outs["elements"])) <= {arrays.PENDING, arrays.RUNNING}
    # KWOK's pods run until told otherwise; once they run, the letters say so.
    wait_until(
        lambda: element_letters(3, *_read(api, job)) == "RRR", "the three points to run", 60, pause=0.5
    )
    deleter = threading.Timer(1.0, lambda: kube.kubectl(kube_env, "delete", "job", "-n", namespace, "long"))
    deleter.start()
    try:
        with pytest.raises(StepFailed, match="deleted outside Atlas"):
            wait_for_sweep(api, job, 3, 120)
    finally:
        deleter.cancel()
    refreshed = provider.read(created.id, {**created.outs, "elements": "R3"})
    assert refreshed.outs["elements"] == "K3" and refreshed.outs["state"] == "cancelled"


def _read(api: KubeApi, job: StepJob) -> tuple[Any, Any]:
    found = read_sweep(api, job)
    return found.job, found.pods
