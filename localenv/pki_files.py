"""The local cluster's certificate files (`Pki`: where each lives), client identities and kubeconfigs.

Pure: localenv/pki.py issues the certificates into these files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# The one real node of the local cluster (localenv/node.py); KWOK's nodes are named kwok-*.
NODE_NAME = "atlas-node"
# Client identities: (file stem, common name, organisation). system:masters is the
# admin group; the controller manager and scheduler get their built-in RBAC users.
CLIENTS = (
    ("admin", "atlas-admin", "system:masters"),
    ("controller-manager", "system:kube-controller-manager", None),
    ("scheduler", "system:kube-scheduler", None),
    ("kwok", "atlas-kwok", "system:masters"),
    # The local node: its kubelet (the Node authorizer's identity), kube-proxy, and the API
    # server's own client for the kubelet's API (logs, exec).
    ("node", f"system:node:{NODE_NAME}", "system:nodes"),
    ("kube-proxy", "system:kube-proxy", None),
    # kube-router's network-policy controller: read-only, by its own ClusterRole (localenv/netpol.py).
    ("kube-router", "atlas-kube-router", None),
    ("apiserver-kubelet", "kube-apiserver-kubelet-client", None),
    # The BuildConfig runner stand-in acts as OpenShift's build controller, a cluster component.
    ("build-runner", "atlas-build-runner", "system:masters"),
)


@dataclass(frozen=True)
class Pki:
    directory: Path

    @property
    def ca_cert(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.directory / "ca.key"

    @property
    def server_cert(self) -> Path:
        return self.directory / "apiserver.crt"

    @property
    def server_key(self) -> Path:
        return self.directory / "apiserver.key"

    @property
    def sa_key(self) -> Path:
        return self.directory / "sa.key"

    @property
    def sa_pub(self) -> Path:
        return self.directory / "sa.pub"

    def client_cert(self, who: str) -> Path:
        return self.directory / f"{who}.crt"

    def client_key(self, who: str) -> Path:
        return self.directory / f"{who}.key"

    def complete(self) -> bool:
        files = [self.ca_cert, self.ca_key, self.server_cert, self.server_key, self.sa_key, self.sa_pub]
        files += [self.client_cert(c) for c, _, _ in CLIENTS]
        return all(f.exists() for f in files)


def kubeconfig_yaml(server: str, pki: Pki, who: str, cluster: str = "atlas-local") -> str:
    """A kubeconfig with file references (no inline keys: the file itself holds no secret)."""
    return f"""apiVersion: v1
kind: Config
clusters:
- name: {cluster}
  cluster:
    server: {server}
    certificate-authority: {pki.ca_cert}
users:
- name: {who}
  user:
    client-certificate: {pki.client_cert(who)}
    client-key: {pki.client_key(who)}
contexts:
- name: {cluster}
  context:
    cluster: {cluster}
    user: {who}
current-context: {cluster}
"""
