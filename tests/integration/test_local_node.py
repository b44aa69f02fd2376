"""The local cluster's real node: a kubelet over containerd and runc, with mock GPUs handed out
through the device-plugin API, pods on a CNI bridge, Services through kube-proxy, and the
BuildConfig runner that builds into the local registry. Checked through the Kubernetes API
and from this host, as a user of the cluster would."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from infra.toolchain.pins import REPO_ROOT
from localenv import images, kube, mockgpu, node
from localenv.layout import Layout
from localenv.pki_files import NODE_NAME, Pki
from tests.support import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("root")]


def api(layout: Layout, path: str) -> Any:
    return kube.api_get(layout, path, timeout=10)


def apply(layout: Layout, *objects: dict[str, Any]) -> None:
    kube.kubectl(layout, "apply", "--server-side", "--field-manager=atlas-test", "-f", "-",
                 stdin="\n---\n".join(json.dumps(o) for o in objects))


def pod_phase(layout: Layout, namespace: str, name: str) -> str:
    return str(api(layout, f"/api/v1/namespaces/{namespace}/pods/{name}").get("status", {}).get("phase", ""))


@pytest.fixture
def namespace(kube_env: Layout) -> Iterator[str]:
    name = f"atlas-node-{uuid.uuid4().hex[:6]}"
    apply(kube_env, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    # Pods are refused until the ServiceAccount controller has made the namespace's `default`.
    wait_until(lambda: _get_or_none(lambda: api(kube_env, f"/api/v1/namespaces/{name}/serviceaccounts/default")),
               f"the default ServiceAccount of {name}")
    yield name
    kube.kubectl(kube_env, "delete", "namespace", name, "--wait=false")


def probe_image(layout: Layout) -> str:
    """The probe's image, built from its Containerfile and pushed to the registry (cached layers)."""
    built = images.build_image(layout, REPO_ROOT, REPO_ROOT / "workloads/probe/Containerfile",
                               "atlas/probe", "integration")
    return built.reference


def pod(name: str, image: str, command: list[str], gpus: int = 0, **spec: Any) -> dict[str, Any]:
    limits: dict[str, str] = {"cpu": "200m", "memory": "256Mi"}
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {node.NODE_KIND_LABEL: "kubelet"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            # OpenShift's restricted profile: non-root, RuntimeDefault seccomp, no capabilities.
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "c", "image": image, "command": command,
                "resources": {"limits": limits},
                "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            }],
            **spec,
        },
    }


def test_the_node_is_ready_with_mock_gpus_labels_and_taint(kube_env: Layout):
    found = api(kube_env, f"/api/v1/nodes/{NODE_NAME}")
    labels = found["metadata"]["labels"]
    for key, value in node.NODE_LABELS.items():
        assert labels[key] == value
    assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"} in [
        # .get: taints the node controller adds a moment after start (not-ready) carry no value.
        {k: t.get(k) for k in ("key", "value", "effect")} for t in found["spec"]["taints"]
    ]
    assert found["status"]["allocatable"]["nvidia.com/gpu"] == str(node.GPU_COUNT)
    info = found["status"]["nodeInfo"]
    assert info["kubeletVersion"].startswith("v1.36.")
    assert info["containerRuntimeVersion"].startswith("containerd://2.")
    assert node.status(kube_env)["ready"]


def test_a_pod_gets_the_gpus_it_asked_for_as_a_non_root_user_without_capabilities(kube_env: Layout, namespace: str):
    image = probe_image(kube_env)
    script = ('echo "uid=$(id -u)"; echo "gid=$(id -g)"; echo "visible=$NVIDIA_VISIBLE_DEVICES"; '
              'echo "mark=$ATLAS_GPU_PROVENANCE"; grep CapEff /proc/self/status')
    apply(kube_env, {**pod("gpus", image, ["sh", "-c", script], gpus=2), "metadata": {"name": "gpus",
                                                                                     "namespace": namespace}})
    wait_until(lambda: pod_phase(kube_env, namespace, "gpus") in ("Succeeded", "Failed"), "the pod to finish", 120)
    assert pod_phase(kube_env, namespace, "gpus") == "Succeeded"
    log = kube.kubectl(kube_env, "logs", "-n", namespace, "gpus")
    lines = dict(line.split("=", 1) for line in log.splitlines() if "=" in line and not line.startswith("CapEff"))
    visible = lines["visible"].split(",")
    assert len(visible) == 2 and len(set(visible)) == 2
    assert set(visible) <= set(mockgpu.MockGpus(NODE_NAME, node.GPU_COUNT).device_ids())
    assert lines["mark"] == "mock"
    assert lines["uid"] == "1001" and lines["gid"] == "0"  # the image's user, in group 0 as on OpenShift
    assert "CapEff:\t0000000000000000" in log


def test_pods_are_reachable_and_services_route_through_kube_proxy(kube_env: Layout, namespace: str):
    owner = node.kube_proxy_owner()
    assert owner == kube_env.state_dir, (
        f"kube-proxy on this machine is run by the environment in {owner}: its iptables chains are per machine; "
        "stop that environment (scripts/localenv down) and run the tests again")
    image = probe_image(kube_env)
    server = pod("web", image, ["python3", "-m", "http.server", "8080", "--directory", "/opt/atlas"])
    server["spec"]["containers"][0]["ports"] = [{"containerPort": 8080}]
    server["spec"]["containers"][0]["readinessProbe"] = {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1}
    server["metadata"]["namespace"] = namespace
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": namespace},
               "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]}}
    apply(kube_env, server, service)

    def endpoints() -> list[str]:
        slices = api(kube_env, f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices")["items"]
        return [a for s in slices for e in s.get("endpoints") or [] if (e.get("conditions") or {}).get("ready")
                for a in e["addresses"]]

    (pod_ip,) = wait_until(endpoints, "the Service's endpoint to be ready (kubelet's readiness probe)", 120)
    with urllib.request.urlopen(f"http://{pod_ip}:8080/", timeout=5) as resp:
        assert resp.status == 200
    cluster_ip = api(kube_env, f"/api/v1/namespaces/{namespace}/services/web")["spec"]["clusterIP"]

    def through_service() -> bool:
        try:
            with urllib.request.urlopen(f"http://{cluster_ip}/", timeout=2) as resp:
                return bool(resp.status == 200)
        except (OSError, urllib.error.URLError):
            return False

    assert wait_until(through_service, f"the ClusterIP {cluster_ip} to route (kube-proxy's rules)", 60)
    # The API server's service proxy, which scripts/compare reads the monitor through.
    proxy_path = f"/api/v1/namespaces/{namespace}/services/web:80/proxy/"
    proxied = kube.api_get(kube_env, proxy_path)
    assert "infra" in str(proxied)
    # Who can see what: on Kubernetes the monitor has no Ingress; the proxy is the way in, and it
    # takes the cluster's own login. No credentials: refused. A real token of a ServiceAccount
    # that may not read this namespace's Services: refused.
    assert proxy_status(kube_env, proxy_path, None) in (401, 403)
    outsider = f"{namespace}-outsider"
    apply(kube_env, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": outsider}},
          {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "reader", "namespace": outsider}})
    try:
        token = kube.kubectl(kube_env, "create", "token", "reader", "-n", outsider, "--duration=10m").strip()
        # Valid: API discovery is open to every authenticated user (system:discovery), so the
        # refusal below is the authorization of this namespace's Services, not a bad token.
        assert proxy_status(kube_env, "/apis", token) == 200
        assert proxy_status(kube_env, "/apis", "not-a-token") == 401
        assert proxy_status(kube_env, proxy_path, token) == 403
    finally:
        kube.kubectl(kube_env, "delete", "namespace", outsider, "--wait=false")


def proxy_status(layout: Layout, path: str, token: str | None) -> int:
    """The API server's HTTP status for GET `path`, as a client with `token` (or none) that trusts
    the cluster's CA."""
    context = ssl.create_default_context(cafile=str(Pki(layout.kube_dir / "pki").ca_cert))
    request = urllib.request.Request(layout.api_url + path)  # noqa: S310 (https, the local API server)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10, context=context) as response:  # noqa: S310
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def test_a_buildconfig_is_built_and_a_broken_one_fails_with_the_log(kube_env: Layout, namespace: str):
    registry = images.registry_host(kube_env)
    stream = {"apiVersion": "image.openshift.io/v1", "kind": "ImageStream",
              "metadata": {"name": "probe", "namespace": namespace}, "spec": {"lookupPolicy": {"local": False}}}

    def config(name: str, dockerfile: str) -> dict[str, Any]:
        return {
            "apiVersion": "build.openshift.io/v1", "kind": "BuildConfig",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "runPolicy": "Serial",
                "source": {"type": "Git", "git": {"uri": node.git_uri(kube_env), "ref": "HEAD"}},
                "strategy": {"type": "Docker", "dockerStrategy": {
                    "dockerfilePath": dockerfile,
                    "buildArgs": [{"name": "BASE_IMAGE", "value": f"{registry}/atlas/debian-python:bookworm"}]}},
                "output": {"to": {"kind": "ImageStreamTag", "name": f"probe:{name}"}},
                "triggers": [{"type": "ConfigChange"}],
            },
        }

    apply(kube_env, stream, config("good", "workloads/probe/Containerfile"), config("bad", "no/such/Containerfile"))

    def build(name: str) -> dict[str, Any] | None:
        found = api(kube_env, f"/apis/build.openshift.io/v1/namespaces/{namespace}/builds/{name}-1")
        return found if (found.get("status") or {}).get("phase") in ("Complete", "Failed") else None

    good = wait_until(lambda: _get_or_none(lambda: build("good")), "build good-1 to finish", 600)
    bad = wait_until(lambda: _get_or_none(lambda: build("bad")), "build bad-1 to finish", 600)
    assert good["status"]["phase"] == "Complete", good["status"]
    assert good["metadata"]["annotations"]["openshift.io/build.number"] == "1"
    assert good["spec"]["revision"]["git"]["commit"]
    digest = good["status"]["output"]["to"]["imageDigest"]
    tags = api(kube_env, f"/apis/image.openshift.io/v1/namespaces/{namespace}/imagestreams/probe")["status"]["tags"]
    (event,) = next(t["items"] for t in tags if t["tag"] == "good")
    assert event["dockerImageReference"] == f"{registry}/{namespace}/probe@{digest}"
    assert images.manifest_digest(kube_env, f"{namespace}/probe", "good") == digest
    assert bad["status"]["phase"] == "Failed" and bad["status"]["reason"] == "DockerBuildFailed"
    assert bad["status"]["logSnippet"]
    log = bad["metadata"]["annotations"]["atlas.dev/build-log"]
    assert "no/such/Containerfile" in Path(log).read_text()
    config_status = api(kube_env, f"/apis/build.openshift.io/v1/namespaces/{namespace}/buildconfigs/good")["status"]
    assert config_status["lastVersion"] == 1


def _get_or_none(read: Any) -> Any:
    try:
        return read()
    except urllib.error.HTTPError as err:
        if err.code == 404:
            return None
        raise
