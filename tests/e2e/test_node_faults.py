"""Failure paths of the OpenShift side on the local node, through the real `pulumi` CLI:

- a step that exits non-zero stops `pulumi up` with the pod's exit code and the end of its log;
- an image that cannot be pulled stops it with the kubelet's reason;
- a pod killed during a step is retried by the Job as its backoffLimit says;
- the kubelet stopped while `up` waits gives a clear error, and the next `up`, once the node is
  back, finishes with nothing created twice.

Each runs the OpenShift side alone (the HPC sides have tests/e2e/test_faults.py)."""

from __future__ import annotations

import os
import shlex
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.openshift.manifests.volumes import step_mounts
from infra.workload.load import load_workload
from localenv import images, kube, node
from localenv.layout import Layout
from tests.e2e.pulumi_cli import PulumiProject, local_openshift
from tests.e2e.test_faults import BackgroundUp
from tests.support import wait_until

pytestmark = pytest.mark.e2e
STACK = "local"


def api(layout: Layout, path: str) -> Any:
    return kube.api_get(layout, path, timeout=10)


@pytest.fixture
def project(tmp_path: Path, kube_env: Layout) -> Iterator[tuple[PulumiProject, str]]:
    proj = PulumiProject.create(tmp_path)
    ns = f"atlas-nodefault-{uuid.uuid4().hex[:6]}"
    config = proj.stack_config(STACK)
    config["atlas:openshift"] = local_openshift(config["atlas:openshift"], kube_env, ns)
    config["atlas:hpc"] = {name: {**env, "enabled": False} for name, env in config["atlas:hpc"].items()}
    proj.set_stack_config(STACK, config)
    proj.run("stack", "init", STACK)
    yield proj, ns
    proj.run("destroy", "--yes", "-s", STACK, check=False, timeout=600)
    proj.run("stack", "rm", "--yes", "-s", STACK, check=False)


def set_openshift(proj: PulumiProject, **changes: Any) -> None:
    config = proj.stack_config(STACK)
    config["atlas:openshift"] = {**config["atlas:openshift"], **changes}
    proj.set_stack_config(STACK, config)


def edit_step(proj: PulumiProject, name: str, command: list[str]) -> None:
    path = proj.root / "workloads" / "probe" / "workload.yaml"
    doc = yaml.safe_load(path.read_text())
    step = next(s for s in doc["steps"] if s["name"] == name)
    step["command"], step["args"] = command, []
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def background_up(proj: PulumiProject) -> BackgroundUp:
    proc = subprocess.Popen(["pulumi", "up", "--yes", "--skip-preview", "--non-interactive", "-s", STACK],
                            cwd=proj.root, env=proj.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    return BackgroundUp(proc)


def jobs_of(layout: Layout, ns: str, step: str) -> list[dict[str, Any]]:
    return list(api(layout, f"/apis/batch/v1/namespaces/{ns}/jobs?labelSelector=atlas.dev/step={step}")["items"])


def data_volume_dir(layout: Layout, ns: str, workload: Path) -> Path:
    """The host folder behind the PVC that holds the steps' `data/` (the results PVC for the probe,
    whose data are all made by its steps; the local cluster's volumes are hostPath)."""
    role = {m.sub_path: m.role for m in step_mounts(load_workload(workload))}["data"]
    selector = f"app.kubernetes.io/component={role}-volume"
    (claim,) = api(layout, f"/api/v1/namespaces/{ns}/persistentvolumeclaims?labelSelector={selector}")["items"]
    volume = api(layout, f"/api/v1/persistentvolumes/{claim['spec']['volumeName']}")
    return Path(volume["spec"]["hostPath"]["path"])


def test_a_step_that_exits_non_zero_stops_up_with_its_exit_code_and_log(project, kube_env):
    proj, ns = project
    set_openshift(proj, pipeline={"backoff_limit": 0})
    edit_step(proj, "make-hdf5", ["sh", "-c", "echo 'make-hdf5 failing on purpose' >&2; exit 3"])
    result = proj.run("up", "--yes", "--skip-preview", "-s", STACK, check=False)
    text = result.stdout + result.stderr
    assert result.returncode != 0
    assert "step 'make-hdf5'" in text and "exited 3 (Error)" in text, text[-3000:]
    assert "make-hdf5 failing on purpose" in text  # the end of the pod's own log
    assert "pulumi up --replace" in text
    # The later steps were never created: they wait on this one.
    assert jobs_of(kube_env, ns, "inception-moments") == []


def test_an_image_that_cannot_be_pulled_stops_up_with_the_kubelets_reason(project, kube_env):
    proj, _ns = project
    missing = f"{images.registry_host(kube_env)}/atlas/no-such-image:none"
    set_openshift(proj, image={"reference": missing, "workdir": "/work"})
    started = time.monotonic()
    result = proj.run("up", "--yes", "--skip-preview", "-s", STACK, check=False, timeout=900)
    text = result.stdout + result.stderr
    assert result.returncode != 0
    assert "cannot pull its image" in text, text[-3000:]
    assert any(reason in text for reason in ("ErrImagePull", "ImagePullBackOff")), text[-3000:]
    assert "no-such-image" in text
    assert time.monotonic() - started < 600, "reported within minutes, not at the step's deadline"


def hold_first_attempt(proj: PulumiProject, name: str) -> None:
    """The step's first attempt holds (the probe's steps take seconds, too short to catch running);
    a retry finds the marker on the volume and runs the step's own command at once."""
    path = proj.root / "workloads" / "probe" / "workload.yaml"
    doc = yaml.safe_load(path.read_text())
    step = next(s for s in doc["steps"] if s["name"] == name)
    original = shlex.join([*step["command"], *map(str, step["args"])])
    step["command"] = ["sh", "-c", f"if mkdir data/.first-attempt 2>/dev/null; then sleep 600; fi; exec {original}"]
    step["args"] = []
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def test_a_pod_killed_during_a_step_is_retried_by_the_job(project, kube_env):
    proj, ns = project
    set_openshift(proj, pipeline={"backoff_limit": 2})
    hold_first_attempt(proj, "train")
    proj.run("up", "--yes", "--skip-preview", "-s", STACK, timeout=900)
    (train,) = wait_until(lambda: jobs_of(kube_env, ns, "train"), "the train Job", 180)
    selector = f"batch.kubernetes.io/job-name={train['metadata']['name']}"

    def running_container() -> str | None:
        pods = api(kube_env, f"/api/v1/namespaces/{ns}/pods?labelSelector={selector}")["items"]
        for pod in pods:
            for status in pod["status"].get("containerStatuses") or []:
                if "running" in (status.get("state") or {}):
                    return str(status["containerID"]).removeprefix("containerd://")
        return None

    container = wait_until(running_container, "the train pod's container to run", 180)
    # Killed outside Kubernetes, as the OOM killer or a node's operator would: the container's process.
    ctr = [str(kube.bin_dir() / "ctr"), "--address", str(node.NodePaths(kube_env).containerd_socket),
           "--namespace", "k8s.io"]
    subprocess.run([*ctr, "tasks", "kill", "--signal", "SIGKILL", container], check=True, capture_output=True)

    def finished() -> dict[str, Any] | None:
        job = api(kube_env, f"/apis/batch/v1/namespaces/{ns}/jobs/{train['metadata']['name']}")
        return job if (job.get("status") or {}).get("succeeded") else None

    def where_it_stands() -> str:
        """The Job's counts, each pod's phase and container state, and the namespace's warnings:
        why a retry did not succeed (not scheduled, refused, failing again)."""
        job = api(kube_env, f"/apis/batch/v1/namespaces/{ns}/jobs/{train['metadata']['name']}")
        pods = api(kube_env, f"/api/v1/namespaces/{ns}/pods?labelSelector={selector}")["items"]
        shown = [
            (p["metadata"]["name"], p["status"].get("phase"),
             [s.get("state") for s in p["status"].get("containerStatuses") or []],
             [c.get("message") for c in p["status"].get("conditions") or [] if c.get("status") == "False"])
            for p in pods
        ]
        warnings = [
            (e.get("involvedObject", {}).get("name"), e.get("reason"), e.get("message"))
            for e in api(kube_env, f"/api/v1/namespaces/{ns}/events")["items"] if e.get("type") == "Warning"
        ]
        return f"job status {job.get('status')}; pods {shown}; warnings {warnings[-10:]}"

    job = wait_until(finished, "the retried train Job to succeed", 300, detail=where_it_stands)
    assert job["status"]["failed"] == 1 and job["status"]["succeeded"] == 1
    pods = api(kube_env, f"/api/v1/namespaces/{ns}/pods?labelSelector={selector}")["items"]
    codes = sorted(
        s["state"]["terminated"]["exitCode"] for p in pods for s in p["status"]["containerStatuses"]
    )
    assert codes == [0, 137]


def test_the_kubelet_stopped_during_up_fails_clearly_and_the_next_up_finishes_once(project, kube_env):
    proj, ns = project
    # The first preparation step holds, while it is awaited, until the test releases it (a file on its
    # volume), once the node has been lost and is back.
    edit_step(proj, "make-hdf5", ["sh", "-c", "until [ -e data/.release ]; do sleep 1; done; python3 -m "
                                              "workloads.probe make-hdf5 --dataset digits --resolution 8 "
                                              "--data_root data --chunk_size 500 --compression"])
    up = background_up(proj)
    try:
        up.wait_for("openshift-pipeline-make-hdf5-done", 300)
        wait_until(lambda: any(p["status"].get("phase") == "Running" for p in api(
            kube_env, f"/api/v1/namespaces/{ns}/pods?labelSelector=atlas.dev/step=make-hdf5")["items"]),
            "the make-hdf5 pod to run")
        assert node.daemons(kube_env)["kubelet"].stop()
        code, text = up.finish(timeout=600)
    finally:
        if up.proc.poll() is None:
            os.killpg(up.proc.pid, 9)
        node.up(kube_env, print)  # the node back, for this test's second `up` and the ones after it
    assert code != 0
    assert "has not been Ready for" in text and "kubelet or container runtime is down" in text, text[-3000:]
    assert "The Job stays" in text
    before = {s: [j["metadata"]["uid"] for j in jobs_of(kube_env, ns, s)] for s in ("make-hdf5",)}
    (data_volume_dir(kube_env, ns, proj.root / "workloads" / "probe" / "workload.yaml") / "data" / ".release").touch()
    proj.run("up", "--yes", "--skip-preview", "-s", STACK, timeout=900)
    after = {s: [j["metadata"]["uid"] for j in jobs_of(kube_env, ns, s)] for s in ("make-hdf5",)}
    assert after == before and len(after["make-hdf5"]) == 1, "nothing created twice"
    for step in ("make-hdf5", "inception-moments", "train"):
        assert len(jobs_of(kube_env, ns, step)) == 1, step
    proj.run("preview", "--expect-no-changes", "-s", STACK)
