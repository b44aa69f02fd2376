"""The local Kubernetes control plane, checked through its API: version, KWOK GPU nodes,
storage, OpenShift CRDs with strict field validation, Jobs on GPU nodes, and the
up/down lifecycle (idempotent up, clean down, clear error on a taken port)."""

from __future__ import annotations

import json
import socket
import uuid
from pathlib import Path

import pytest

from infra.toolchain.pins import load_pins
from localenv import kube, kwok
from localenv.layout import Layout, Ports
from localenv.procs import LocalEnvError, port_in_use
from tests.support import wait_until

pytestmark = pytest.mark.integration


def apply(layout: Layout, manifest: dict, *extra: str) -> str:
    return kube.kubectl(layout, "apply", "--server-side", "--field-manager=atlas-test", *extra,
                        "-f", "-", stdin=json.dumps(manifest))


@pytest.fixture
def namespace(kube_env):
    name = f"it-{uuid.uuid4().hex[:8]}"
    apply(kube_env, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    kube.kubectl(kube_env, "delete", "namespace", name, "--wait=false")


def test_version_is_stamped(kube_env):
    version = kube.api_get(kube_env, "/version")
    assert version["gitVersion"] == f"v{load_pins().kubernetes}"
    assert version["minor"] == load_pins().kubernetes.split(".")[1]


def test_gpu_and_cpu_nodes_are_ready_and_shaped_like_moc(kube_env):
    nodes = kube.api_get(kube_env, "/api/v1/nodes")["items"]
    gpu = [n for n in nodes if n["metadata"]["labels"].get("nvidia.com/gpu.present") == "true"]
    cpu = [n for n in nodes if n not in gpu]
    assert len(gpu) >= 4 and len(cpu) >= 2
    for node in gpu:
        labels = node["metadata"]["labels"]
        assert labels["nvidia.com/gpu.product"] == "Tesla-V100-SXM2-32GB"
        assert labels["nvidia.com/gpu.count"] == "4"
        assert node["status"]["allocatable"]["nvidia.com/gpu"] == "4"
        assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"} in node["spec"]["taints"]
    for node in nodes:
        ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
        assert ready == "True", node["metadata"]["name"]


def test_misspelled_field_in_openshift_kind_is_refused(kube_env, namespace):
    route = {
        "apiVersion": "route.openshift.io/v1", "kind": "Route",
        "metadata": {"name": "monitor", "namespace": namespace},
        "spec": {"to": {"kind": "Service", "name": "monitor"}, "port": {"targetPort": 8080}},
    }
    apply(kube_env, route)
    route["spec"]["tls"] = {"terminaton": "edge"}  # sic: OpenShift's field is `termination`
    with pytest.raises(LocalEnvError) as err:
        apply(kube_env, route, "--validate=strict")
    assert "terminaton" in str(err.value)


def test_pvcs_bind_rwo_and_rwx(kube_env, namespace):
    for mode in ("ReadWriteOnce", "ReadWriteMany"):
        apply(kube_env, {
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": mode.lower(), "namespace": namespace},
            "spec": {"accessModes": [mode], "resources": {"requests": {"storage": "10Gi"}}},
        })
    for mode in ("readwriteonce", "readwritemany"):
        wait_until(
            lambda m=mode: kube.api_get(
                kube_env, f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{m}"
            )["status"].get("phase") == "Bound",
            f"PVC {mode} to bind",
        )


def _job(name: str, namespace: str, gpus: int, annotations: dict[str, str] | None = None) -> dict:
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "metadata": {"annotations": annotations or {}},
                "spec": kwok.on_simulated_nodes({
                    "restartPolicy": "Never",
                    "nodeSelector": {"nvidia.com/gpu.product": "Tesla-V100-SXM2-32GB"},
                    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                    "containers": [{"name": "main", "image": "busybox",
                                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
                }),
            },
        },
    }


def _job_condition(layout: Layout, namespace: str, name: str) -> str | None:
    job = kube.api_get(layout, f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}")
    for cond in job.get("status", {}).get("conditions", []):
        if cond["type"] in ("Complete", "Failed") and cond["status"] == "True":
            return str(cond["type"])
    return None


def test_gpu_job_completes_on_a_gpu_node(kube_env, namespace):
    apply(kube_env, _job("train", namespace, gpus=4))
    assert wait_until(lambda: _job_condition(kube_env, namespace, "train"), "the Job to finish") == "Complete"
    pods = kube.api_get(kube_env, f"/api/v1/namespaces/{namespace}/pods?labelSelector=job-name=train")["items"]
    node = kube.api_get(kube_env, f"/api/v1/nodes/{pods[0]['spec']['nodeName']}")
    assert node["metadata"]["labels"]["nvidia.com/gpu.present"] == "true"


def test_failure_is_injected_by_annotation(kube_env, namespace):
    apply(kube_env, _job("doomed", namespace, gpus=1, annotations={kwok.FAIL_ANNOTATION: "true"}))
    assert wait_until(lambda: _job_condition(kube_env, namespace, "doomed"), "the Job to finish") == "Failed"


def _scheduled_condition(layout: Layout, namespace: str, job: str) -> dict | None:
    """The PodScheduled condition of the Job's pod, once the scheduler has decided on it."""
    pods = kube.api_get(layout, f"/api/v1/namespaces/{namespace}/pods?labelSelector=job-name={job}")["items"]
    for pod in pods:
        for cond in pod["status"].get("conditions", []):
            if cond["type"] == "PodScheduled":
                return {**cond, "nodeName": pod["spec"].get("nodeName")}
    return None


def test_too_many_gpus_stay_pending(kube_env, namespace):
    apply(kube_env, _job("greedy", namespace, gpus=5))
    # The scheduler's verdict, not a pause: it writes PodScheduled=False (Unschedulable) once it
    # has tried every node and none has five GPUs.
    verdict = wait_until(lambda: _scheduled_condition(kube_env, namespace, "greedy"), "the scheduler's verdict", 60)
    assert (verdict["status"], verdict.get("reason")) == ("False", "Unschedulable"), verdict
    assert "Insufficient nvidia.com/gpu" in verdict["message"], verdict
    assert not verdict["nodeName"]
    pods = kube.api_get(kube_env, f"/api/v1/namespaces/{namespace}/pods?labelSelector=job-name=greedy")["items"]
    assert pods and all(p["status"]["phase"] == "Pending" for p in pods)


def test_lifecycle_up_twice_down_and_port_taken(tmp_path: Path):
    layout = Layout(state_dir=tmp_path / "env", ports=Ports(18600))
    lines: list[str] = []
    settings = kube.KubeSettings(pod_run_seconds=1.0, gpu_nodes=1, cpu_nodes=1)
    try:
        kube.up(layout, settings, lines.append)
        assert kube.status(layout)["ready"]
        pids = {n: d.pid() for n, d in kube.daemons(layout).items()}
        kube.up(layout, settings, lines.append)  # second up: nothing restarted
        assert {n: d.pid() for n, d in kube.daemons(layout).items()} == pids
        assert "kubernetes: already running" in lines
        assert kube.recycler_daemon(layout).running()
    finally:
        kube.down(layout, lines.append)
    assert not any(d.running() for d in kube.daemons(layout).values())
    assert not kube.recycler_daemon(layout).running()
    for port in (layout.ports.etcd_client, layout.ports.apiserver, layout.ports.scheduler,
                 layout.ports.controller_manager, layout.ports.kwok):
        assert not port_in_use(port), port

    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", layout.ports.apiserver))
        blocker.listen()
        with pytest.raises(LocalEnvError) as err:
            kube.up(layout, settings, lines.append)
    assert f"kube-apiserver on 127.0.0.1:{layout.ports.apiserver}" in str(err.value)
    assert "ATLAS_LOCALENV_PORT_BASE" in str(err.value)
    assert not any(d.running() for d in kube.daemons(layout).values())


def test_released_volumes_are_recycled(kube_env, namespace):
    apply(kube_env, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "scratch", "namespace": namespace},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    })
    claim_path = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/scratch"
    volume = wait_until(lambda: kube.api_get(kube_env, claim_path)["spec"].get("volumeName"), "the claim to bind")
    folder = Path(kube.api_get(kube_env, f"/api/v1/persistentvolumes/{volume}")["spec"]["hostPath"]["path"])
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "left-behind.txt").write_text("results of a deleted claim")
    kube.kubectl(kube_env, "delete", "pvc", "-n", namespace, "scratch", "--wait=true")
    wait_until(
        lambda: kube.api_get(kube_env, f"/api/v1/persistentvolumes/{volume}")["status"]["phase"] == "Available",
        "the released volume to be Available again", timeout=30,
    )
    assert not (folder / "left-behind.txt").exists(), "a recycled volume starts empty"
