"""The local node's configuration files rendered from the layout: containerd, CNI, kubelet, kube-proxy.

Also where the node keeps its state (`NodePaths`) and its pod subnet (`Network`).

Pure: what depends on the machine (the pause image's pin, the toolchain's bin folder, whether
root may lower OOM scores) comes in as arguments; localenv/node.py writes the files and
starts the processes.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from localenv.layout import LOOPBACK, Layout
from localenv.pki_files import NODE_NAME
from localenv.records import pod_cidr_of

if TYPE_CHECKING:
    from localenv.pki_files import Pki

RUNC = "/usr/sbin/runc"


@dataclass(frozen=True)
class NodePaths:
    """Where one environment's node keeps its state. Sockets live under /run/atlas/<id> (a
    unix socket path is limited to 107 bytes); data under the environment's state folder."""

    layout: Layout

    @property
    def id(self) -> str:
        return self.layout.id

    @property
    def root(self) -> Path:
        return self.layout.state_dir / "node"

    @property
    def run(self) -> Path:
        return Path("/run/atlas") / self.id

    @property
    def containerd_socket(self) -> Path:
        return self.run / "containerd.sock"

    @property
    def containerd_config(self) -> Path:
        return self.root / "containerd.toml"

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kubelet"

    @property
    def plugin_dir(self) -> Path:
        return self.kubelet_root / "device-plugins"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def bridge(self) -> str:
        return f"atl{self.id[:8]}"  # interface names: 15 bytes at most

    @property
    def cgroup_root(self) -> str:
        return f"/atlas-{self.id}"


@dataclass(frozen=True)
class Network:
    """The node's pod subnet, from the port base: two environments running at once never share
    one (their ports would clash first), but one killed without `down` leaves its bridge holding
    the subnet, which `subnet_holders` finds for node.up to remove."""

    pod_cidr: ipaddress.IPv4Network

    @classmethod
    def of(cls, layout: Layout) -> Network:
        return cls(pod_cidr_of(layout.ports.base))

    @property
    def gateway(self) -> str:
        return str(self.pod_cidr.network_address + 1)


def subnet_holders(addresses: list[dict[str, Any]], pod_cidr: ipaddress.IPv4Network, own_bridge: str) -> list[str]:
    """The interfaces other than `own_bridge` with an IPv4 address in `pod_cidr`, from `ip -j -4
    addr show`: a second route to the pods' subnet sends the host's packets to them (probes, the
    API server's proxy) down the wrong bridge."""
    holders = []
    for link in addresses:
        name = str(link.get("ifname", ""))
        if name == own_bridge:
            continue
        for info in link.get("addr_info") or []:
            if info.get("family") == "inet" and "local" in info and ipaddress.IPv4Address(info["local"]) in pod_cidr:
                holders.append(name)
                break
    return holders


def containerd_config(layout: Layout, *, pause_image: str, cni_bin_dir: Path, lower_oom_score: bool) -> str:
    """containerd 2.x (config version 4): the CRI plugin for the kubelet, runc via the v2 shim
    with cgroupfs, the CNI folders, the registry on loopback, and Atlas's pause image."""
    paths = NodePaths(layout)
    restrict_oom = "false" if lower_oom_score else "true"
    return f"""version = 4
root = "{paths.root / 'containerd'}"
state = "{paths.run / 'state'}"
# Nothing from the machine's own /etc/containerd: this node is configured here alone.
imports = []

[plugins]
  [plugins.'io.containerd.server.v1.grpc']
    address = "{paths.containerd_socket}"
  [plugins.'io.containerd.server.v1.ttrpc']
    address = "{paths.run / 'containerd.sock.ttrpc'}"

  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "{pause_image}"
    [plugins.'io.containerd.cri.v1.images'.registry]
      config_path = "{paths.root / 'certs.d'}"

  [plugins.'io.containerd.cri.v1.runtime']
    # Pod network namespaces under this environment's own state, so `down` finds and removes them.
    netns_mounts_under_state_dir = true
    # The kubelet asks for negative OOM scores (pause -998, guaranteed pods -997), which need
    # CAP_SYS_RESOURCE; machines without it (this one) refuse them and every sandbox fails
    # ("can't get final child's PID"). Capped at containerd's own score instead, as rootless runs do.
    restrict_oom_score_adj = {restrict_oom}
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = "{RUNC}"
          # runc's state of this node's containers, apart from any other containerd's.
          Root = "{paths.run / 'runc'}"
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["{cni_bin_dir}"]
      conf_dir = "{paths.cni_conf_dir}"
      max_conf_num = 1

  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = "{LOOPBACK}"
    stream_server_port = "0"

  [plugins.'io.containerd.transfer.v1.local']
    config_path = "{paths.root / 'certs.d'}"

  # NRI's socket is one per machine: two environments' containerds would fight over it.
  [plugins.'io.containerd.nri.v1.nri']
    disable = true
"""


def registry_hosts_toml(host: str) -> str:
    """containerd's hosts.toml for the loopback registry: plain HTTP, as distribution serves it here."""
    return f'server = "http://{host}"\n\n[host."http://{host}"]\n  capabilities = ["pull", "resolve", "push"]\n'


def cni_conflist(layout: Layout) -> dict[str, Any]:
    paths, network = NodePaths(layout), Network.of(layout)
    return {
        "cniVersion": "1.0.0",
        "name": f"atlas-{paths.id}",
        "plugins": [
            {
                "type": "bridge", "bridge": paths.bridge, "isGateway": True, "ipMasq": False, "hairpinMode": True,
                "ipam": {"type": "host-local", "ranges": [[{"subnet": str(network.pod_cidr)}]],
                         "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(paths.root / "cni" / "ipam")},
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def kubelet_config(layout: Layout, pki: Pki, address: str, *, lower_oom_score: bool) -> dict[str, Any]:
    paths = NodePaths(layout)
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        # cgroup v1 here: kubelet >= 1.35 refuses it unless told otherwise.
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": paths.cgroup_root,
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{paths.containerd_socket}",
        "address": address,
        "port": layout.ports.kubelet,
        "readOnlyPort": 0,
        "healthzBindAddress": LOOPBACK,
        "healthzPort": layout.ports.kubelet_healthz,
        # Only clients with a certificate of the cluster's CA (the API server's) reach its API.
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                           "x509": {"clientCAFile": str(pki.ca_cert)}},
        "authorization": {"mode": "AlwaysAllow"},
        "podLogsDir": str(paths.root / "pod-logs"),
        "registerWithTaints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}],
        "maxPods": 40,
        "serializeImagePulls": False,
        "resolvConf": "/etc/resolv.conf",
        # A developer's disk is often fuller than a node's: evict only when it is truly full.
        "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "enforceNodeAllocatable": [],
        "nodeStatusUpdateFrequency": "10s",
        "protectKernelDefaults": False,
        "makeIPTablesUtilChains": False,
        "cgroupsPerQOS": True,
        # Its own score: -999 needs CAP_SYS_RESOURCE, which some machines (this one) do not grant.
        "oomScoreAdj": -999 if lower_oom_score else 0,
    }


def kube_proxy_config(layout: Layout) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "clientConnection": {"kubeconfig": str(layout.kube_dir / "kube-proxy.kubeconfig")},
        "mode": "iptables",
        "clusterCIDR": str(Network.of(layout).pod_cidr),
        "hostnameOverride": NODE_NAME,
        "healthzBindAddress": f"{LOOPBACK}:{layout.ports.kube_proxy_healthz}",
        "metricsBindAddress": f"{LOOPBACK}:{layout.ports.kube_proxy_metrics}",
        # Leave the machine's conntrack table size alone.
        "conntrack": {"maxPerCore": 0, "min": 0},
    }
