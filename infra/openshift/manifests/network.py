"""Network policy: nothing reaches the run's pods but the monitor, from where it is read."""

from __future__ import annotations

import pulumi

from infra.openshift.manifests.labels import Manifest, RunIdentity, object_metadata
from infra.openshift.manifests.monitor import MONITOR_PORT, MONITOR_PROXY_PORT, monitor_selector
from infra.openshift.settings import OpenShiftSettings

# OpenShift labels the router's namespace, and host-network traffic (kubelet probes, a host-network
# router), with these policy groups (OpenShift's "allow from the ingress controller" policies).
OPENSHIFT_INGRESS_GROUP = {"policy-group.network.openshift.io/ingress": ""}
OPENSHIFT_HOST_NETWORK_GROUP = {"policy-group.network.openshift.io/host-network": ""}


def network_policies(
    settings: OpenShiftSettings, identity: RunIdentity, namespace: pulumi.Input[str]
) -> list[Manifest]:
    """Ingress denied to every pod of the namespace (steps, staging, builds); the monitor let in
    only from where it is read: on OpenShift its login proxy from the router, and the monitor's
    own port from host network alone (the API server's service proxy, the kubelet's probes); on
    plain Kubernetes from anywhere to that one port, because the API
    server's service proxy (how scripts/compare reads it) comes from the control plane's own
    network, which a NetworkPolicy cannot name portably; there no Ingress publishes it unless a
    host is configured. Egress is left open: steps fetch data, images and the API server."""
    labels = identity.labels("network-policy")
    policies: list[Manifest] = [
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": object_metadata({**labels, "atlas.dev/policy": "deny-ingress"}, namespace),
            "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
        }
    ]
    if settings.monitor.enabled:
        rules: list[Manifest]
        if settings.is_openshift:
            router = [
                {"namespaceSelector": {"matchLabels": dict(group)}}
                for group in (OPENSHIFT_INGRESS_GROUP, OPENSHIFT_HOST_NETWORK_GROUP)
            ]
            host_network = [{"namespaceSelector": {"matchLabels": dict(OPENSHIFT_HOST_NETWORK_GROUP)}}]
            rules = [
                # The login proxy, from the router (a host-network router on some installs).
                {"ports": [_tcp(MONITOR_PROXY_PORT)], "from": router},
                # The monitor itself, only from host network: the API server's service proxy
                # (scripts/compare, with the user's own credentials) and the kubelet's probes.
                {"ports": [_tcp(MONITOR_PORT)], "from": host_network},
            ]
        else:
            rules = [{"ports": [_tcp(MONITOR_PORT)]}]
        policies.append(
            {
                "apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy",
                "metadata": object_metadata({**labels, "atlas.dev/policy": "monitor-ingress"}, namespace),
                "spec": {
                    "podSelector": {"matchLabels": monitor_selector(identity)},
                    "policyTypes": ["Ingress"],
                    "ingress": rules,
                },
            }
        )
    return policies


def _tcp(port: int) -> Manifest:
    return {"protocol": "TCP", "port": port}
