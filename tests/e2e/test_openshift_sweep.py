"""A sweep on the OpenShift side, end to end on the local cluster: one Indexed Job in one `pulumi up`.

A stack of the OpenShift side alone (as tests/e2e/test_any_image.py makes one) runs
tests/e2e/sweep/workload: four points of a shell step (two at a time), then a step that reads every
point's folder on the results volume and prints it. Checked through the Kubernetes API: one Indexed
Job with every index completed, each point's folder as the point wrote it (read back by the
gathering step's pod, whose log prints them), the gathering step created only after the last
point ended, the stack's outputs naming the sweep as one object with every element `D`, `refresh`
reading the same. Then the same stack with two points that fail on purpose, the sweep as its
last step (not awaited) and `atlas:sweep.max_attempts: 2`: a new Indexed Job that tries each
failing point twice, and once it ended `pulumi up --refresh` shows those points `F` and the others
`D`. `pulumi destroy` leaves no Job or pod.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.hpc import arrays
from infra.index_ranges import parse_index_ranges
from infra.timeparse import rfc3339
from localenv import images, kube
from localenv.layout import Layout
from tests.e2e.pulumi_cli import PulumiProject, local_openshift, project_and_stacks
from tests.support import REPO_ROOT, wait_until

pytestmark = pytest.mark.e2e
WORKLOAD = REPO_ROOT / "tests" / "e2e" / "sweep" / "workload"
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
POINTS = ["word=alpha n=1", "word=alpha n=2", "word=it's b n=1", "word=it's b n=2"]


@pytest.fixture
def project(tmp_path: Path) -> Iterator[tuple[PulumiProject, list[str]]]:
    with project_and_stacks(tmp_path) as pair:
        yield pair


def stand_up(proj: PulumiProject, stacks: list[str], kube_env: Layout, name: str) -> str:
    """A stack of the local OpenShift side alone, in a namespace of its own, running the sweep
    workload in Debian's python3 image (nothing to build), without the monitor; its namespace."""
    namespace = f"atlas-{name}-{uuid.uuid4().hex[:6]}"
    config = proj.stack_config("local")
    config.pop("atlas:hpc", None)
    config["atlas:workload"] = str(WORKLOAD)
    openshift = local_openshift(config["atlas:openshift"], kube_env, namespace)
    image = f"{images.registry_host(kube_env)}/{images.BASE_REPOSITORY}:{images.BASE_TAG}"
    openshift["image"] = {"reference": image, "workdir": "/work"}
    openshift["monitor"] = {"enabled": False}
    config["atlas:openshift"] = openshift
    (proj.root / "stacks" / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    proj.run("stack", "init", name)
    stacks.append(name)
    return namespace


def jobs_of(kube_env: Layout, namespace: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = kube.api_get(kube_env, f"/apis/batch/v1/namespaces/{namespace}/jobs")["items"]
    return found


def pods_of(kube_env: Layout, namespace: str, selector: str = "") -> list[dict[str, Any]]:
    query = f"?labelSelector={selector}" if selector else ""
    found: list[dict[str, Any]] = kube.api_get(kube_env, f"/api/v1/namespaces/{namespace}/pods{query}")["items"]
    return found


def finished_at(pod: dict[str, Any]) -> float:
    (status,) = pod["status"]["containerStatuses"]
    when = rfc3339(status["state"]["terminated"]["finishedAt"])
    assert when is not None, status
    return when


def test_a_sweep_runs_as_one_indexed_job_and_the_next_step_after_it(
    project: tuple[PulumiProject, list[str]], kube_env: Layout
) -> None:
    proj, stacks = project
    namespace = stand_up(proj, stacks, kube_env, "sweep-k8s")
    proj.run("up", "--yes", "--skip-preview", "-s", "sweep-k8s")

    # --- the outputs: the sweep as one object, every element done (up waited for the sweep).
    outputs = proj.outputs("sweep-k8s")
    point, gather = outputs["environments"]["openshift"]["steps"]
    assert (point["name"], gather["name"]) == ("point", "gather")
    assert gather["sweep"] is None
    assert point["sweep"] == {
        "points": 4,
        "arrays": [{"job_id": point["job"], "offset": 0, "count": 4, "points": []}],
        "elements": "D4",
        "results": "results/points",
        "max_attempts": 1,
    }

    # --- one Indexed Job for the four points, every index completed, each once.
    swept = [j for j in jobs_of(kube_env, namespace) if j["metadata"]["labels"].get("atlas.dev/step") == "point"]
    (job,) = swept
    assert job["metadata"]["name"] == point["job"]
    spec, status = job["spec"], job["status"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 4, 2)
    assert spec["backoffLimitPerIndex"] == 0
    assert status.get("completedIndexes") == "0-3" and status.get("succeeded") == 4, status
    assert not status.get("failedIndexes") and not status.get("failed"), status
    pods = pods_of(kube_env, namespace, f"batch.kubernetes.io/controller-uid={job['metadata']['uid']}")
    assert sorted(int(p["metadata"]["annotations"][INDEX_ANNOTATION]) for p in pods) == [0, 1, 2, 3]
    assert {p["status"]["phase"] for p in pods} == {"Succeeded"}

    # --- the step after the sweep: created once the last point ended; it reads every point's folder.
    (after,) = [j for j in jobs_of(kube_env, namespace) if j["metadata"]["name"] == gather["job"]]
    created = rfc3339(after["metadata"]["creationTimestamp"])
    assert created is not None and created >= max(finished_at(p) for p in pods) - 1.0  # second-rounded stamps

    def gathered() -> str | None:
        (gather_pod,) = pods_of(kube_env, namespace, f"batch.kubernetes.io/controller-uid={gather['uid']}") or [None]
        if gather_pod is None or gather_pod["status"].get("phase") != "Succeeded":
            return None
        name = gather_pod["metadata"]["name"]
        return str(kube.api_get(kube_env, f"/api/v1/namespaces/{namespace}/pods/{name}/log"))

    log = wait_until(gathered, "the gathering step's pod to succeed", 180, pause=1)
    # Each point's folder on the results volume, as the point wrote it (its own values and index).
    expected = [f"point-{i}: {values} index={i} of 4" for i, values in enumerate(POINTS)]
    assert [line for line in log.splitlines() if line.startswith("point-")] == expected, log

    # --- refresh reads the same letters (one query of the Job), and the stack stays as it is.
    proj.run("refresh", "--yes", "-s", "sweep-k8s")
    proj.run("preview", "--expect-no-changes", "-s", "sweep-k8s")
    proj.run("up", "--yes", "--skip-preview", "-s", "sweep-k8s")
    assert proj.outputs("sweep-k8s")["environments"]["openshift"]["steps"][0]["sweep"]["elements"] == "D4"

    # --- two points that fail on purpose, the sweep now the last step: up does not wait for it.
    failing = proj.root / "sweep-failing"
    shutil.copytree(WORKLOAD, failing)
    definition = yaml.safe_load((failing / "workload.yaml").read_text())
    definition["steps"] = definition["steps"][:1]
    definition["steps"][0]["sweep"]["grid"]["word"] = ["alpha", "fail"]
    definition["data"]["outputs"] = definition["data"]["outputs"][:1]
    (failing / "workload.yaml").write_text(yaml.safe_dump(definition, sort_keys=False))
    config = proj.stack_config("sweep-k8s")
    config["atlas:workload"] = str(failing)
    config["atlas:sweep"] = {"max_attempts": 2}  # each failing point is tried twice
    proj.set_stack_config("sweep-k8s", config)
    proj.run("up", "--yes", "--skip-preview", "-s", "sweep-k8s")
    (point,) = proj.outputs("sweep-k8s")["environments"]["openshift"]["steps"]
    assert point["job"] != job["metadata"]["name"]  # other points: a new Indexed Job
    # Read once as up created it: four points, none ended outside Atlas.
    first_read = arrays.decode(point["sweep"]["elements"])
    assert len(first_read) == 4 and arrays.KILLED not in first_read, first_read

    def ended() -> dict[str, Any] | None:
        (current,) = [j for j in jobs_of(kube_env, namespace) if j["metadata"]["name"] == point["job"]]
        conditions = {c["type"] for c in current["status"].get("conditions", []) if c["status"] == "True"}
        return current if "Failed" in conditions else None

    # The replaced Indexed Job and the removed step went with their pods, the namespace stays.
    for uid in (job["metadata"]["uid"], gather["uid"]):
        wait_until(lambda uid=uid: not pods_of(kube_env, namespace, f"batch.kubernetes.io/controller-uid={uid}"),
                   f"the pods of Job uid {uid} to be deleted", 120, pause=1)
    failed_job = wait_until(ended, "the failing sweep's Job to end", 180, pause=1)
    # (The API writes two adjacent indexes as `0,1`, three or more as a range.)
    completed = parse_index_ranges(failed_job["status"].get("completedIndexes"), size=4, empty_ok=True)
    failed = parse_index_ranges(failed_job["status"].get("failedIndexes"), size=4, empty_ok=True)
    assert set(completed) == {0, 1}, failed_job["status"]
    assert set(failed) == {2, 3}, failed_job["status"]
    assert failed_job["spec"]["backoffLimitPerIndex"] == 1
    tries = pods_of(kube_env, namespace, f"batch.kubernetes.io/controller-uid={failed_job['metadata']['uid']}")
    assert sorted(int(p["metadata"]["annotations"][INDEX_ANNOTATION]) for p in tries) == [0, 1, 2, 2, 3, 3]
    proj.run("up", "--refresh", "--yes", "--skip-preview", "-s", "sweep-k8s")
    (point,) = proj.outputs("sweep-k8s")["environments"]["openshift"]["steps"]
    assert point["sweep"]["elements"] == "D2F2", point["sweep"]
    assert point["sweep"]["max_attempts"] == 2
    assert not [j for j in jobs_of(kube_env, namespace) if j["metadata"]["name"] == gather["job"]]

    # --- destroy: no Job, no pod.
    proj.run("destroy", "--yes", "-s", "sweep-k8s")

    def gone() -> bool:
        try:
            return not jobs_of(kube_env, namespace) and not pods_of(kube_env, namespace)
        except OSError as error:  # the namespace itself is gone: 404
            return getattr(error, "code", None) == 404

    wait_until(gone, f"every Job and pod of {namespace} to be deleted", 120, pause=1)
