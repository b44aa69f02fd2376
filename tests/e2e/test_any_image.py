"""Any image runs under Atlas: a step in images that hold nothing of Atlas, end to end on the local cluster.

Two stacks of the OpenShift side alone (no HPC side: it does not change here), the small shell
workload of tests/e2e/any_image/workload, `atlas:openshift.image.reference` set to:

- Debian's python3 image from the local registry (localenv/images.py, the stand-in for
  python:3.11-slim): no entrypoint, no sampler, no USER, no working directory of Atlas's. The step
  succeeds, and the sampler, brought in by Atlas's tools ConfigMap, samples it under that python3;
- the same image without python3 (tests/e2e/any_image/no-python.Containerfile, built here into the
  local registry): the step succeeds unsampled, and the report says why, never a 0. Its monitor
  (which serves the files to `atlas compare`) runs in the python3 image, as docs/workloads.md says.

Checked through the Kubernetes API (the Jobs, the tools ConfigMap) and the report's JSON and Markdown.
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.cli import compare as cli
from infra.compare.access import Access
from infra.kinds import read_stack_outputs
from infra.openshift.manifests.volumes import TOOLS_DIR
from infra.telemetry.bundle import ENTRYPOINT_NAME, pod_tools
from localenv import images, kube
from localenv.layout import Layout
from tests.e2e.pulumi_cli import PulumiProject, local_openshift, project_and_stacks
from tests.support import REPO_ROOT, wait_until

pytestmark = pytest.mark.e2e
HERE = REPO_ROOT / "tests" / "e2e" / "any_image"
WORKLOAD = HERE / "workload"


@pytest.fixture
def project(tmp_path: Path) -> Iterator[tuple[PulumiProject, list[str]]]:
    with project_and_stacks(tmp_path) as pair:
        yield pair


def stand_up(proj: PulumiProject, stacks: list[str], kube_env: Layout, name: str, image: str,
             monitor_image: str | None) -> tuple[dict[str, Any], str]:
    """A stack of the local OpenShift side alone, in a namespace of its own, running the workload
    in `image`; its outputs once its one step has finished, and the namespace."""
    namespace = f"atlas-{name}-{uuid.uuid4().hex[:6]}"
    config = proj.stack_config("local")
    config.pop("atlas:hpc", None)
    config["atlas:workload"] = str(WORKLOAD)
    openshift = local_openshift(config["atlas:openshift"], kube_env, namespace)
    openshift["image"] = {"reference": image, "workdir": "/work"}
    if monitor_image is not None:
        openshift["monitor"] = {**openshift.get("monitor", {}), "image": monitor_image}
    config["atlas:openshift"] = openshift
    (proj.root / "stacks" / f"Pulumi.{name}.yaml").write_text(yaml.safe_dump({"config": config}, sort_keys=False))
    proj.run("stack", "init", name)
    stacks.append(name)
    proj.run("up", "--yes", "--skip-preview", "-s", name)
    outputs = proj.outputs(name)
    (step,) = outputs["environments"]["openshift"]["steps"]

    def finished() -> bool:
        status = kube.api_get(kube_env, f"/apis/batch/v1/namespaces/{namespace}/jobs/{step['job']}")["status"]
        return bool(status.get("succeeded") or status.get("failed"))

    wait_until(finished, f"the step's Job in {namespace} to finish", 180, pause=1)
    return outputs, namespace


def report(outputs: dict[str, Any], kube_env: Layout, folder: Path) -> tuple[dict[str, Any], str]:
    _, written = cli.compare(read_stack_outputs(outputs), folder, Access(kubeconfig=kube_env.kubeconfig))
    (environment,) = json.loads(written.json.read_text())["environments"]
    return environment, written.markdown.read_text()


def step_job(kube_env: Layout, namespace: str, outputs: dict[str, Any]) -> dict[str, Any]:
    (step,) = outputs["environments"]["openshift"]["steps"]
    job: dict[str, Any] = kube.api_get(kube_env, f"/apis/batch/v1/namespaces/{namespace}/jobs/{step['job']}")
    return job


def test_a_step_runs_in_images_that_hold_nothing_of_atlas(
    project: tuple[PulumiProject, list[str]], kube_env: Layout, tmp_path: Path
) -> None:
    proj, stacks = project
    python_image = f"{images.registry_host(kube_env)}/{images.BASE_REPOSITORY}:{images.BASE_TAG}"

    # --- Debian's python3 image: sampled under its own python3.
    outputs, namespace = stand_up(proj, stacks, kube_env, "any-python", python_image, None)
    job = step_job(kube_env, namespace, outputs)
    assert job["status"].get("succeeded") == 1, job["status"]
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["image"] == python_image
    assert container["command"] == ["/bin/sh", f"{TOOLS_DIR}/{ENTRYPOINT_NAME}"]
    # The tools ConfigMap holds this checkout's entrypoint and sampler, byte for byte.
    tools = kube.api_get(kube_env, f"/api/v1/namespaces/{namespace}/configmaps"
                                   "?labelSelector=app.kubernetes.io/component=atlas-tools")["items"]
    (tools_map,) = tools
    (volume,) = [v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == "atlas-tools"]
    assert volume["configMap"]["name"] == tools_map["metadata"]["name"]
    carried = {i["path"]: base64.b64decode(tools_map["binaryData"][i["key"]]) for i in volume["configMap"]["items"]}
    assert carried == {path: content for path, content, _ in pod_tools()}

    sampled, _ = report(outputs, kube_env, tmp_path / "report-python")
    performance = sampled["performance"]
    assert performance["measured_step"] == "count"
    # The step ran (its own rate, from its log) and the sampler sampled it (two seconds, every 0.5 s).
    assert performance["workload_throughput"]["value"] > 0, performance["workload_throughput"]
    assert performance["samples"]["value"] >= 2, performance["samples"]
    assert performance["cpu_tree_mean"]["value"] is not None, performance["cpu_tree_mean"]

    # --- the same image without python3: the step runs unsampled, and the report says why.
    built = images.build_image(kube_env, HERE, HERE / "no-python.Containerfile", "atlas/e2e-no-python", "bookworm")
    outputs, namespace = stand_up(proj, stacks, kube_env, "any-shell", built.reference, python_image)
    job = step_job(kube_env, namespace, outputs)
    assert job["status"].get("succeeded") == 1, job["status"]
    unsampled, markdown = report(outputs, kube_env, tmp_path / "report-shell")
    performance = unsampled["performance"]
    assert performance["workload_throughput"]["value"] > 0, performance["workload_throughput"]
    # (GPU use says "mock GPU" here first: the local node's GPUs are a device plugin's alone.)
    for figure in ("samples", "cpu_tree_mean", "cpu_host_mean", "memory_peak"):
        value = performance[figure]
        assert value["value"] is None, (figure, value)  # never a 0
        assert value["note"].startswith("not measured: the image has no python3 (telemetry/count.unsampled"), value
    assert "the image has no python3" in markdown
