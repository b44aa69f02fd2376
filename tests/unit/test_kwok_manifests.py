"""localenv/kwok.py: KWOK stages (Job pods finish, on request with a failure), GPU and CPU
nodes, and the storage pool."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.toolchain.go import download_module
from infra.toolchain.pins import load_pins
from localenv import crds, kube, kwok


def by_name(stages: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {s["metadata"]["name"]: s for s in stages}


def selectors(stage: dict[str, Any]) -> list[dict[str, Any]]:
    return [m["jq"] for m in stage["spec"]["selector"]["matchExpressions"]]


def template(stage: dict[str, Any]) -> str:
    (step,) = [s for s in stage["spec"]["steps"] if "patch" in s]
    assert step["patch"]["subresource"] == "status" and step["patch"]["root"] == "status"
    return str(step["patch"]["template"])


# --- Stages


def test_stage_set_and_api():
    stages = kwok.kwok_stages(pod_run_seconds=5)
    assert [s["metadata"]["name"] for s in stages] == [
        "node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-complete", "pod-fail", "pod-delete",
    ]
    for stage in stages:
        assert stage["apiVersion"] == "kwok.x-k8s.io/v1alpha1" and stage["kind"] == "Stage"
        assert stage["spec"]["resourceRef"]["apiGroup"] == "v1"
        assert stage["spec"]["steps"], stage["metadata"]["name"]
    names = [s["metadata"]["name"] for s in kwok.kwok_stages(node_lease=False)]
    assert names[:2] == ["node-initialize", "node-heartbeat"]


def test_job_pods_finish_and_nothing_else_does():
    stages = by_name(kwok.kwok_stages(pod_run_seconds=5))
    job_owned = {"key": kwok.JOB_OWNED_JQ, "operator": "In", "values": ["Job"]}
    for stage in stages.values():
        patches = any("patch" in s for s in stage["spec"]["steps"])
        if stage["spec"]["resourceRef"]["kind"] != "Pod" or not patches:
            continue
        finishes = re.search(r"^phase: (Succeeded|Failed)$", template(stage), re.M)
        # Only Job pods may leave Running: a Deployment's pod must stay up.
        assert bool(finishes) == (job_owned in selectors(stage)), stage["metadata"]["name"]
    assert "phase: Succeeded" in template(stages["pod-complete"])
    assert "exitCode: 0" in template(stages["pod-complete"])
    assert "phase: Failed" in template(stages["pod-fail"])
    assert "phase: Running" in template(stages["pod-ready"])
    assert job_owned not in selectors(stages["pod-ready"])


def test_complete_and_fail_are_mutually_exclusive():
    stages = by_name(kwok.kwok_stages())
    complete = [s for s in selectors(stages["pod-complete"]) if s["key"] == kwok.POD_FAILS_JQ]
    fail = [s for s in selectors(stages["pod-fail"]) if s["key"] == kwok.POD_FAILS_JQ]
    assert complete == [{"key": kwok.POD_FAILS_JQ, "operator": "In", "values": ["false"]}]
    assert fail == [{"key": kwok.POD_FAILS_JQ, "operator": "In", "values": ["true"]}]


def test_failure_injection_reads_the_annotations():
    fail = by_name(kwok.kwok_stages())["pod-fail"]
    assert kwok.FAIL_ANNOTATION in kwok.POD_FAILS_JQ and kwok.EXIT_CODE_ANNOTATION in kwok.POD_FAILS_JQ
    text = template(fail)
    assert f'index $annotations "{kwok.EXIT_CODE_ANNOTATION}"' in text
    assert "exitCode: {{ $code }}" in text
    assert "{{ $code := 1 }}" in text  # atlas.dev/kwok-fail alone exits 1


def test_run_time_is_configurable_globally_and_per_pod():
    stages = by_name(kwok.kwok_stages(pod_run_seconds=7.5))
    for name in ("pod-complete", "pod-fail"):
        delay = stages[name]["spec"]["delay"]
        assert delay["durationMilliseconds"] == 7500
        assert kwok.RUN_SECONDS_ANNOTATION in delay["durationFrom"]["jq"]["expression"]
        # A jitter below the duration would replace it (KWOK's Delay): none is set.
        assert "jitterDurationMilliseconds" not in delay and "jitterDurationFrom" not in delay
    assert "delay" not in stages["pod-ready"]["spec"]
    assert by_name(kwok.kwok_stages(pod_start_seconds=2))["pod-ready"]["spec"]["delay"] == {
        "durationMilliseconds": 2000
    }
    with pytest.raises(ValueError, match="pod_run_seconds"):
        kwok.kwok_stages(pod_run_seconds=-1)


def test_deleted_pods_are_removed_and_nodes_are_initialised():
    stages = by_name(kwok.kwok_stages())
    assert stages["pod-delete"]["spec"]["steps"] == [{"delete": True}]
    assert selectors(stages["pod-delete"]) == [{"key": ".metadata.deletionTimestamp", "operator": "Exists"}]
    init = template(stages["node-initialize"])
    # The node's own capacity (GPUs) is kept, not replaced by KWOK's defaults.
    assert "{{ with .status.allocatable }}" in init and "{{ with .status.capacity }}" in init
    assert "phase: Running" in init


GO_BLOCK = re.compile(r"\{\{-?\s*(if|range|with|end)\b")


@pytest.mark.parametrize("stage", kwok.kwok_stages(), ids=lambda s: s["metadata"]["name"])
def test_templates_are_balanced(stage):
    for step in stage["spec"]["steps"]:
        if "patch" not in step:
            continue
        text = step["patch"]["template"]
        assert text.count("{{") == text.count("}}")
        depth = 0
        for match in GO_BLOCK.finditer(text):
            depth += -1 if match.group(1) == "end" else 1
            assert depth >= 0
        assert depth == 0


def test_stages_survive_yaml():
    stages = kwok.kwok_stages()
    assert list(yaml.safe_load_all(yaml.safe_dump_all(stages, sort_keys=False))) == stages


def test_stages_fit_kwoks_stage_crd():
    # The pinned KWOK module, the one bootstrap builds kwok from (module cache or Go module proxy).
    crd = kube.kwok_stage_crd(download_module("sigs.k8s.io/kwok", f"v{load_pins().kwok}"))
    assert crd["metadata"]["name"] == "stages.kwok.x-k8s.io"
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for stage in kwok.kwok_stages(pod_start_seconds=1) + kwok.kwok_stages(node_lease=False):
        assert crds.schema_violations(schema, stage) == [], stage["metadata"]["name"]


# --- The jq selectors, evaluated as KWOK does (pkg/utils/expression/selector.go), with jq 1.6
# standing in for gojq (`.a.[]` is `.a[]` there).


def jq_values(expression: str, obj: dict[str, Any]) -> list[Any] | None:
    proc = subprocess.run(["jq", "-c", expression.replace(".[]", "[]")], input=json.dumps(obj),
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return None  # KWOK treats a jq error as "no data"
    return [v for v in map(json.loads, proc.stdout.splitlines()) if v is not None]


def matches(selector: dict[str, Any], obj: dict[str, Any]) -> bool:
    values = jq_values(selector["key"], obj)
    as_text = [str(v).lower() if isinstance(v, bool) else str(v) for v in values or []]
    op = selector["operator"]
    if op == "In":
        return any(v in selector["values"] for v in as_text)
    if op == "NotIn":
        return not any(v in selector["values"] for v in as_text)
    if op == "Exists":
        return bool(as_text)
    return not as_text


def matching_stages(pod: dict[str, Any]) -> list[str]:
    return [s["metadata"]["name"] for s in kwok.kwok_stages()
            if s["spec"]["resourceRef"]["kind"] == "Pod" and all(matches(m, pod) for m in selectors(s))]


def pod(phase: str, owner: str | None = None, annotations: dict[str, str] | None = None,
        deleting: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "p", "namespace": "n"}
    if owner:
        metadata["ownerReferences"] = [{"apiVersion": "x", "kind": owner, "name": "o", "uid": "u"}]
    if annotations:
        metadata["annotations"] = annotations
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-02T00:00:00Z"
    ready = "True" if phase == "Running" else "False"
    status = {"phase": phase, "conditions": [{"type": "Ready", "status": ready}]}
    return {"metadata": metadata, "status": status}


@pytest.fixture
def jq() -> None:
    if shutil.which("jq") is None:
        pytest.fail("jq is not on PATH: scripts/test installs it (apt-get install jq)")


needs_jq = pytest.mark.usefixtures("jq")


@needs_jq
@pytest.mark.parametrize(("obj", "expected"), [
    (pod("Pending", "Job"), ["pod-ready"]),
    (pod("Pending", "ReplicaSet"), ["pod-ready"]),
    (pod("Running", "Job"), ["pod-complete"]),
    (pod("Running", "Job", {kwok.FAIL_ANNOTATION: "true"}), ["pod-fail"]),
    (pod("Running", "Job", {kwok.EXIT_CODE_ANNOTATION: "137"}), ["pod-fail"]),
    (pod("Running", "Job", {kwok.EXIT_CODE_ANNOTATION: "0"}), ["pod-complete"]),
    (pod("Running", "Job", {kwok.EXIT_CODE_ANNOTATION: "300"}), ["pod-complete"]),
    (pod("Running", "Job", {kwok.FAIL_ANNOTATION: "false"}), ["pod-complete"]),
    (pod("Running", "ReplicaSet", {kwok.FAIL_ANNOTATION: "true"}), []),
    (pod("Running"), []),
    (pod("Succeeded", "Job"), []),
    (pod("Running", "Job", deleting=True), ["pod-delete"]),
], ids=["pending-job", "pending-deployment", "job", "fail", "exit-137", "exit-0", "exit-300",
        "fail-false", "deployment", "bare", "succeeded", "deleting"])
def test_which_stage_a_pod_meets(obj, expected):
    assert matching_stages(obj) == expected


@needs_jq
@pytest.mark.parametrize(("value", "expected"), [
    (None, []), ("90", ["90s"]), ("2.5", ["2.5s"]), ("1m30s", ["1m30s"]),
])
def test_per_pod_run_time_becomes_a_go_duration(value, expected):
    annotations = {kwok.RUN_SECONDS_ANNOTATION: value} if value else None
    assert jq_values(kwok.RUN_DURATION_JQ, pod("Running", "Job", annotations)) == expected


# --- Nodes


def test_gpu_nodes_look_like_moc_v100_nodes():
    nodes = kwok.gpu_nodes()
    assert [n["metadata"]["name"] for n in nodes] == [f"kwok-gpu-{i}" for i in range(4)]
    for node in nodes:
        meta, status = node["metadata"], node["status"]
        assert meta["annotations"]["kwok.x-k8s.io/node"] == "fake"
        labels = meta["labels"]
        assert labels["type"] == "kwok"
        assert labels["kubernetes.io/hostname"] == meta["name"]
        assert labels["node-role.kubernetes.io/worker"] == ""
        assert labels["kubernetes.io/arch"] == "amd64" and labels["kubernetes.io/os"] == "linux"
        assert labels["nvidia.com/gpu.present"] == "true"
        assert labels["nvidia.com/gpu.product"] == "Tesla-V100-SXM2-32GB"
        assert labels["nvidia.com/gpu.count"] == "4"
        assert labels["nvidia.com/gpu.memory"] == "32768"
        assert labels["nvidia.com/gpu.family"] == "volta"
        assert labels["nvidia.com/cuda.driver.major"].isdigit()
        assert all(isinstance(v, str) for v in labels.values())
        assert node["spec"]["taints"] == [
            kwok.KWOK_TAINT, {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
        ]
        assert status["capacity"] == status["allocatable"] == {
            "cpu": "40", "memory": "512Gi", "pods": "110", "ephemeral-storage": "500Gi",
            "nvidia.com/gpu": "4",
        }


def test_gpu_node_options():
    (node,) = kwok.gpu_nodes(1, gpus_per_node=8, taint=False, name_prefix="a100")
    assert node["metadata"]["name"] == "a100-0"
    assert node["status"]["capacity"]["nvidia.com/gpu"] == "8"
    assert node["metadata"]["labels"]["nvidia.com/gpu.count"] == "8"
    assert node["spec"]["taints"] == [kwok.KWOK_TAINT]  # only the simulator's


def test_cpu_nodes_have_no_gpus_and_only_the_simulators_taint():
    nodes = kwok.cpu_nodes()
    assert len(nodes) == 2
    for node in nodes:
        assert "nvidia.com/gpu" not in node["status"]["capacity"]
        assert not any(k.startswith("nvidia.com/") for k in node["metadata"]["labels"])
        assert node["spec"]["taints"] == [kwok.KWOK_TAINT]
        assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    names = {n["metadata"]["name"] for n in nodes + kwok.gpu_nodes()}
    assert len(names) == 6


# --- Storage


def test_storage_class_is_the_default_and_binds_immediately():
    sc, *_ = kwok.storage_objects(Path("/var/lib/atlas/volumes"))
    assert sc["kind"] == "StorageClass" and sc["metadata"]["name"] == "atlas-local"
    assert sc["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"] == "true"
    assert sc["provisioner"] == "kubernetes.io/no-provisioner"
    assert sc["volumeBindingMode"] == "Immediate"


def test_pv_pool_access_modes_sizes_and_paths():
    pool = Path("/var/lib/atlas/volumes")
    _, *pvs = kwok.storage_objects(pool)
    rwo = [p for p in pvs if p["spec"]["accessModes"] == ["ReadWriteOnce"]]
    rwx = [p for p in pvs if p["spec"]["accessModes"] == ["ReadWriteMany"]]
    assert len(rwo) == 8 and len(rwx) == 4 and len(pvs) == 12
    assert {p["spec"]["capacity"]["storage"] for p in rwo} == {"50Gi"}
    assert {p["spec"]["capacity"]["storage"] for p in rwx} == {"500Gi"}
    paths = [p["spec"]["hostPath"]["path"] for p in pvs]
    assert len(set(paths)) == len(paths)
    assert all(Path(path).parent == pool for path in paths)
    for pv in pvs:
        assert pv["kind"] == "PersistentVolume"
        assert pv["spec"]["storageClassName"] == "atlas-local"
        assert pv["spec"]["persistentVolumeReclaimPolicy"] == "Retain"
    assert len({p["metadata"]["name"] for p in pvs}) == 12


def test_pool_sizes_are_configurable_and_paths_absolute():
    _, *pvs = kwok.storage_objects(Path("/x"), rwo=1, rwx=0, rwo_size="10Gi")
    assert [p["spec"]["capacity"]["storage"] for p in pvs] == ["10Gi"]
    with pytest.raises(ValueError, match="absolute"):
        kwok.storage_objects(Path("relative/dir"))


def test_a_pod_lands_on_simulated_nodes_only_when_it_asks_to():
    spec = {"nodeSelector": {"nvidia.com/gpu.product": "x"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}
    placed = kwok.on_simulated_nodes(spec)
    assert placed["nodeSelector"] == {"nvidia.com/gpu.product": "x", "type": "kwok"}
    assert placed["tolerations"][0] == spec["tolerations"][0]
    assert {"key": kwok.KWOK_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"} in placed["tolerations"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "x"}  # the input is left as it was
