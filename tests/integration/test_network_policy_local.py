"""The stack's own NetworkPolicy objects (infra/openshift/manifests/network.py, both flavours)
enforced on the local node by kube-router's policy controller (localenv/netpol.py), seen from
client pods of other namespaces as a real connection failure, and the allowed paths open.

Each phase is checked from a client pod (`kubectl exec`, a TCP connect with a 3 s limit) against
two pods of a run's namespace: one with the monitor's labels, listening on the monitor's port
(8080) and the login proxy's (8443), and a step's, listening on 8080. Every port answers before
the policies exist and again after they are deleted, so a failure in between is the policy's,
not a server's. The monitor's readiness probe (the kubelet, from the host) must keep passing:
host traffic is what both flavours let reach the monitor's own port.
"""

from __future__ import annotations

import dataclasses
import json
import urllib.error
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from infra.openshift.manifests.labels import RunIdentity
from infra.openshift.manifests.monitor import MONITOR_PORT, MONITOR_PROXY_PORT, monitor_selector
from infra.openshift.manifests.network import OPENSHIFT_INGRESS_GROUP, network_policies
from localenv import images, kube, netpol, node
from localenv.layout import Layout
from tests.support import wait_until
from tests.unit.openshift_fixtures import example_settings

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("root")]

IDENTITY = RunIdentity(stack="netpol", run_id="0a1b2c3d", workload="probe")
STEP_PORT = 8080
OPEN = "open"
# How a refused connection shows: kube-router REJECTs what no policy lets in (an ICMP port
# unreachable, which connect() reports as ECONNREFUSED); a DROP would show as a timeout. Anything
# else (no route to host) would be a broken network, not a policy.
REFUSED = ("Connection refused", "timed out")
# A TCP connect to each host:port argument, 3 s each; prints {target: "open" | why it failed}.
PROBE = """
import json, socket, sys
seen = {}
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=3).close()
        seen[target] = "open"
    except socket.timeout:
        seen[target] = "timed out"
    except OSError as exc:
        seen[target] = exc.strerror or repr(exc)
print(json.dumps(seen))
"""


def apply(layout: Layout, *objects: dict[str, Any]) -> None:
    kube.kubectl(layout, "apply", "--server-side", "--force-conflicts", "--field-manager=atlas-test", "-f", "-",
                 stdin="\n---\n".join(json.dumps(o) for o in objects))


def pod(name: str, namespace: str, labels: dict[str, str], image: str, command: list[str],
        ports: tuple[int, ...] = ()) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "c", "image": image, "command": command,
        "resources": {"limits": {"cpu": "100m", "memory": "64Mi"}},
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    if ports:
        container["ports"] = [{"containerPort": p} for p in ports]
        container["readinessProbe"] = {"tcpSocket": {"port": ports[0]}, "periodSeconds": 1}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {node.NODE_KIND_LABEL: "kubelet"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1001, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [container],
        },
    }


def serve(*ports: int) -> list[str]:
    servers = [f"python3 -m http.server {p} --bind 0.0.0.0 --directory /tmp" for p in ports]
    return ["sh", "-c", " & ".join([*servers[1:], f"exec {servers[0]}"])]


def _exists(layout: Layout, path: str) -> bool:
    try:
        kube.api_get(layout, path, timeout=10)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return False
        raise
    return True


def ready_ip(layout: Layout, namespace: str, name: str) -> str | None:
    found = kube.api_get(layout, f"/api/v1/namespaces/{namespace}/pods/{name}", timeout=10)
    status = found.get("status", {})
    conditions = {c["type"]: c["status"] for c in status.get("conditions", [])}
    return str(status["podIP"]) if conditions.get("Ready") == "True" and status.get("podIP") else None


def probe(layout: Layout, namespace: str, targets: list[str]) -> dict[str, str]:
    out = kube.kubectl(layout, "exec", "-n", namespace, "client", "--", "python3", "-c", PROBE, *targets)
    return dict(json.loads(out.strip().splitlines()[-1]))


def policies(flavour: str, namespace: str) -> list[dict[str, Any]]:
    """The stack's policies of a flavour, named (the stack lets Pulumi name them)."""
    settings = dataclasses.replace(example_settings(), flavour=flavour)
    rendered = network_policies(settings, IDENTITY, namespace)
    for policy in rendered:
        policy["metadata"]["name"] = policy["metadata"]["labels"]["atlas.dev/policy"]
    return rendered


@pytest.fixture
def namespaces(kube_env: Layout) -> Iterator[dict[str, str]]:
    suffix = uuid.uuid4().hex[:6]
    names = {"run": f"atlas-netpol-{suffix}", "other": f"atlas-other-{suffix}", "router": f"atlas-router-{suffix}"}
    labels = {"router": dict(OPENSHIFT_INGRESS_GROUP)}
    apply(kube_env, *({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n, "labels": labels.get(k, {})}}
                      for k, n in names.items()))
    for name in names.values():
        # A pod is refused until the controller manager made its namespace's default ServiceAccount.
        wait_until(lambda n=name: _exists(kube_env, f"/api/v1/namespaces/{n}/serviceaccounts/default"),
                   f"the default ServiceAccount of {name}", 60)
    yield names
    for name in names.values():
        kube.kubectl(kube_env, "delete", "namespace", name, "--wait=false")


def test_the_stack_s_policies_refuse_other_namespaces_and_let_the_allowed_paths_in(
        kube_env: Layout, namespaces: dict[str, str]) -> None:
    assert netpol.owner() == kube_env.state_dir, (
        f"kube-router on this machine is run by the environment in {netpol.owner()}: its iptables chains are per "
        "machine; stop that environment (scripts/localenv down) and run the tests again")
    image = f"{images.registry_host(kube_env)}/{images.BASE_REPOSITORY}:{images.BASE_TAG}"
    run = namespaces["run"]
    apply(
        kube_env,
        pod("monitor", run, {**IDENTITY.labels("monitor"), **monitor_selector(IDENTITY)}, image,
            serve(MONITOR_PORT, MONITOR_PROXY_PORT), (MONITOR_PORT, MONITOR_PROXY_PORT)),
        pod("step", run, IDENTITY.labels("step", "train"), image, serve(STEP_PORT), (STEP_PORT,)),
        *(pod("client", namespaces[k], {"app": "client"}, image, ["sleep", "3600"]) for k in ("other", "router")),
    )
    monitor_ip = wait_until(lambda: ready_ip(kube_env, run, "monitor"), "the monitor pod to be ready", 120)
    step_ip = wait_until(lambda: ready_ip(kube_env, run, "step"), "the step pod to be ready", 120)
    for key in ("other", "router"):
        wait_until(lambda k=key: kube.api_get(kube_env, f"/api/v1/namespaces/{namespaces[k]}/pods/client", timeout=10)
                   .get("status", {}).get("phase") == "Running", f"the client pod in {namespaces[key]} to run", 120)
    monitor, proxy = f"{monitor_ip}:{MONITOR_PORT}", f"{monitor_ip}:{MONITOR_PROXY_PORT}"
    step = f"{step_ip}:{STEP_PORT}"
    targets = [monitor, proxy, step]

    def seen(key: str) -> dict[str, str]:
        return probe(kube_env, namespaces[key], targets)

    # No policy yet: every port answers from another namespace.
    assert seen("other") == dict.fromkeys(targets, OPEN)

    # Plain Kubernetes: ingress denied in the run's namespace but the monitor's port, from anywhere.
    apply(kube_env, *policies("kubernetes", run))
    wait_until(lambda: seen("other")[step] != OPEN, "kube-router to enforce the deny-ingress policy", 60,
               detail=lambda: node.daemons(kube_env)[netpol.DAEMON].log_tail())
    from_other = seen("other")
    print(f"kubernetes flavour, from another namespace: {from_other}")
    assert from_other[monitor] == OPEN, from_other
    assert from_other[proxy] in REFUSED and from_other[step] in REFUSED, from_other
    chains = netpol.filter_table().count("\n:KUBE-POD-FW-")
    assert chains >= 2, f"kube-router wrote {chains} pod firewall chains; the monitor's and step's pods need one each"

    # OpenShift: the login proxy only from the router's namespaces, the monitor's own port only from host network.
    apply(kube_env, *policies("openshift", run))
    wait_until(lambda: seen("other")[monitor] != OPEN, "kube-router to enforce the OpenShift flavour's policy", 60)
    from_other, from_router = seen("other"), seen("router")
    print(f"openshift flavour, from another namespace: {from_other}; from the router's: {from_router}")
    assert all(v in REFUSED for v in from_other.values()), from_other
    assert from_router[proxy] == OPEN, from_router
    assert from_router[monitor] in REFUSED and from_router[step] in REFUSED, from_router
    # The kubelet's probe (from the host) still reaches the monitor's port: host traffic is let in.
    assert ready_ip(kube_env, run, "monitor") == monitor_ip

    # The policies deleted: every port answers again, so the failures above were the policies'.
    kube.kubectl(kube_env, "delete", "networkpolicy", "--all", "-n", run)
    wait_until(lambda: seen("other") == dict.fromkeys(targets, OPEN), "every port to answer once the policies are gone",
               60)
