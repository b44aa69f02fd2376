"""The local cluster's real node: a kubelet over containerd and runc, CNI networking, kube-proxy,
and mock GPUs handed out through the kubelet's device-plugin API.

Modelled on Kubernetes' own `hack/local-up-cluster.sh`: the node's parts run as local
processes beside the control plane (infra/localenv/kube.py), KWOK's simulated nodes stay
for the tests that need many. The kubelet is the pinned Kubernetes version, containerd and
the CNI plugins are built from Go modules by `scripts/bootstrap`, runc is Debian's.

This machine has cgroup v1 only: kubelet >= 1.35 starts there only with `failCgroupV1:
false`, and the cgroup driver is cgroupfs (no systemd). Several local environments can run
on one machine (the tests', a demo's): each node has its own containerd, kubelet root,
cgroup root, pod subnet and bridge, derived from the environment's port base. kube-proxy's
iptables chains are per machine, so one environment at a time runs it (the first that
starts); `status` says which.

The GPUs are mock (infra/localenv/mockgpu.py): the node carries the labels and taint of a
GPU node of the NVIDIA GPU operator and `atlas.dev/gpu-mock=true`, so every figure that
comes from them is labelled mock, never measured GPU use.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from infra.localenv import images, kube, mockgpu
from infra.localenv.layout import LOOPBACK, Layout
from infra.localenv.pki import NODE_NAME, Pki, kubeconfig_yaml
from infra.localenv.procs import Daemon, LocalEnvError, port_open, require_free_ports, wait_for
from infra.localenv.system import ensure_packages
from infra.toolchain.pins import REPO_ROOT

NODE_PACKAGES = ("runc", "iptables", "conntrack", *images.IMAGE_PACKAGES)
GPU_COUNT = 4
GPU_PRODUCT = "Tesla-V100-SXM2-32GB"
MOCK_LABEL = "atlas.dev/gpu-mock"
NODE_KIND_LABEL = "atlas.dev/node-kind"
# The labels NVIDIA's GPU operator (GPU feature discovery) puts on a GPU node, as on the KWOK
# GPU nodes; the product names what the node stands in for, MOCK_LABEL says what it is.
NODE_LABELS = {
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.count": str(GPU_COUNT),
    "nvidia.com/gpu.product": GPU_PRODUCT,
    "nvidia.com/gpu.memory": "32768",
    MOCK_LABEL: "true",
    NODE_KIND_LABEL: "kubelet",
}
GPU_TAINT = "nvidia.com/gpu=present:NoSchedule"
COMPONENTS = ("containerd", "kubelet", "mock-gpu", "kube-proxy", "git-daemon", "build-runner")
# The repository as a Git server on loopback, for the BuildConfigs' Git source (what OpenShift
# builds is what is committed, as from any Git server): git://127.0.0.1:<base+418>/atlas.
GIT_REPOSITORY = "atlas"
RUNC = "/usr/sbin/runc"
UNIX_PATH_MAX = 107
KUBE_PROXY_OWNER = Path("/run/atlas/kube-proxy.owner")
# The kubelet's device-plugin folder is a constant of the API (v1beta1.DevicePluginPath), not
# under --root-dir: each node's kubelet and containerd share a mount namespace of their own in
# which this folder is the environment's, so two nodes on one machine never meet there. Their
# mounts (volumes, container root filesystems) live and die in that namespace too.
DEVICE_PLUGIN_PATH = Path("/var/lib/kubelet/device-plugins")


@dataclass(frozen=True)
class NodePaths:
    """Where one environment's node keeps its state. Sockets live under /run/atlas/<id> (a
    unix socket path is limited to 107 bytes); data under the environment's state folder."""

    layout: Layout

    @property
    def id(self) -> str:
        return hashlib.sha256(str(self.layout.state_dir).encode()).hexdigest()[:8]

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
    def cni_bin_dir(self) -> Path:
        return kube.bin_dir()

    @property
    def bridge(self) -> str:
        return f"atl{self.id[:8]}"  # interface names: 15 bytes at most

    @property
    def cgroup_root(self) -> str:
        return f"/atlas-{self.id}"


@dataclass(frozen=True)
class Network:
    """The node's pod subnet, from the port base so that two environments never share one."""

    pod_cidr: ipaddress.IPv4Network

    @classmethod
    def of(cls, layout: Layout) -> Network:
        block = (layout.ports.base // 100) % 256
        return cls(ipaddress.IPv4Network(f"10.201.{block}.0/24"))

    @property
    def gateway(self) -> str:
        return str(self.pod_cidr.network_address + 1)


def node_ip() -> str:
    """The address the kubelet registers (the kubelet refuses loopback): the one the host routes out by."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("10.255.255.255", 9))  # no packet is sent for a UDP connect
            address = str(probe.getsockname()[0])
        except OSError:
            address = ""
    if not address or address.startswith("127."):
        raise LocalEnvError("no non-loopback IPv4 address for the kubelet: the node needs an interface with one")
    return address


def daemons(layout: Layout) -> dict[str, Daemon]:
    return {name: Daemon(name, layout.pids_dir, layout.logs_dir) for name in COMPONENTS}


def containerd_config(layout: Layout) -> str:
    """containerd 2.x (config version 4): the CRI plugin for the kubelet, runc via the v2 shim
    with cgroupfs, the CNI folders, the registry on loopback, and Atlas's pause image."""
    paths = NodePaths(layout)
    restrict_oom = "false" if _can_lower_oom_score() else "true"
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
      sandbox = "{images.pause_image(layout)}"
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
      bin_dirs = ["{paths.cni_bin_dir}"]
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


def _can_lower_oom_score() -> bool:
    """Whether this machine lets root set a negative oom_score_adj (CAP_SYS_RESOURCE)."""
    probe = subprocess.run(["sh", "-c", "echo -1 > /proc/self/oom_score_adj"], capture_output=True, check=False)
    return probe.returncode == 0


def registry_hosts_toml(layout: Layout) -> str:
    """containerd's hosts.toml for the loopback registry: plain HTTP, as distribution serves it here."""
    host = images.registry_host(layout)
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


def kubelet_config(layout: Layout, pki: Pki, address: str) -> dict[str, Any]:
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
        "oomScoreAdj": -999 if _can_lower_oom_score() else 0,
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


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.read_text() != text:
        path.write_text(text)


def _check_socket_paths(paths: NodePaths) -> None:
    longest = paths.plugin_dir / mockgpu.SOCKET_NAME
    if len(str(longest)) > UNIX_PATH_MAX:
        raise LocalEnvError(
            f"the local node's device-plugin socket would be {longest} ({len(str(longest))} bytes; unix sockets "
            f"allow {UNIX_PATH_MAX}): set ATLAS_LOCALENV_DIR to a shorter folder, e.g. /tmp/atlas-localenv"
        )


def kube_proxy_owner() -> Path | None:
    """The state folder of the environment whose kube-proxy runs, if one does."""
    try:
        owner = Path(KUBE_PROXY_OWNER.read_text().strip())
    except OSError:
        return None
    if Daemon("kube-proxy", owner / "pids", owner / "logs").running():
        return owner
    return None


def ready(layout: Layout, since: float | None = None) -> dict[str, Any]:
    """The node as the API server sees it: Ready (by a heartbeat at or after `since`, a Unix
    time, when given: a Node object outlives its kubelet), and its nvidia.com/gpu allocatable."""
    try:
        found = kube.api_get(layout, f"/api/v1/nodes/{NODE_NAME}")
    except (OSError, urllib.error.URLError, ValueError):
        return {"registered": False, "ready": False, "gpus": 0}
    conditions = {c["type"]: c for c in found.get("status", {}).get("conditions", [])}
    ready_condition = conditions.get("Ready", {})
    is_ready = ready_condition.get("status") == "True"
    if since is not None and is_ready:
        beat = dt.datetime.strptime(ready_condition.get("lastHeartbeatTime", "1970-01-01T00:00:00Z"),
                                    "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
        is_ready = beat.timestamp() >= int(since)
    gpus = int(found.get("status", {}).get("allocatable", {}).get(mockgpu.RESOURCE, "0"))
    return {"registered": True, "ready": is_ready, "gpus": gpus}


def up(layout: Layout, say: Callable[[str], None]) -> None:
    """Start the node (containerd, kubelet, mock GPUs, kube-proxy) against the running control
    plane; idempotent."""
    ds = daemons(layout)
    # kube-proxy may be another environment's (its chains are per machine): not required here.
    if all(d.running() for n, d in ds.items() if n != "kube-proxy") and ready(layout)["ready"]:
        say("node: already running")
        return
    if os.geteuid() != 0:
        raise LocalEnvError("the local node runs containerd and the kubelet as root: run `scripts/localenv up` as root")
    ensure_packages(NODE_PACKAGES)
    paths = NodePaths(layout)
    _check_socket_paths(paths)
    bins = kube.bin_dir()
    for name in ("containerd", "containerd-shim-runc-v2", "kubelet", "kube-proxy", *("bridge", "host-local",
                                                                                      "loopback", "portmap")):
        if not (bins / name).exists():
            raise LocalEnvError(f"missing toolchain binary {name} in {bins}: run scripts/bootstrap")
    require_free_ports({f"node {n}": p for n, p in (("kubelet", layout.ports.kubelet),
                                                     ("kubelet healthz", layout.ports.kubelet_healthz))
                        if not ds["kubelet"].running()})
    images.ensure_images(layout, say)

    pki = Pki(layout.kube_dir / "pki")
    _write(layout.kube_dir / "node.kubeconfig", kubeconfig_yaml(layout.api_url, pki, "node"))
    _write(layout.kube_dir / "kube-proxy.kubeconfig", kubeconfig_yaml(layout.api_url, pki, "kube-proxy"))
    _write(paths.containerd_config, containerd_config(layout))
    _write(paths.root / "certs.d" / images.registry_host(layout) / "hosts.toml", registry_hosts_toml(layout))
    _write(paths.cni_conf_dir / "10-atlas.conflist", json.dumps(cni_conflist(layout), indent=2))
    address = node_ip()
    _write(paths.root / "kubelet.yaml", yaml.safe_dump(kubelet_config(layout, pki, address), sort_keys=False))
    _write(paths.root / "kube-proxy.yaml", yaml.safe_dump(kube_proxy_config(layout), sort_keys=False))
    paths.run.mkdir(parents=True, exist_ok=True)
    paths.plugin_dir.mkdir(parents=True, exist_ok=True)
    _ensure_cgroup_root(paths)
    # Pods' IPs are reachable from this host (the API server's service proxy, probes); traffic
    # between pods on the bridge passes iptables (kube-proxy's Services).
    _sysctl("net/bridge/bridge-nf-call-iptables", "1")
    env = {**os.environ, "PATH": f"{bins}:{os.environ.get('PATH', '')}"}

    if not ds["containerd"].running():
        say("node: starting containerd")
        ds["containerd"].start(_in_node_namespace(
            [str(bins / "containerd"), "--config", str(paths.containerd_config)], layout), env=env)
        wait_for(lambda: paths.containerd_socket.exists(), "containerd's socket", 30, ds["containerd"])
    if not ds["mock-gpu"].running():
        say(f"node: starting the mock-GPU device plugin ({GPU_COUNT} x {mockgpu.RESOURCE}, mock)")
        ds["mock-gpu"].start([sys.executable, "-m", "infra.localenv.mockgpu", "--plugin-dir", str(paths.plugin_dir),
                              "--count", str(GPU_COUNT), "--node", NODE_NAME], cwd=REPO_ROOT)
    kubelet_started = time.time()
    if not ds["kubelet"].running():
        say(f"node: starting the kubelet ({NODE_NAME}, {address})")
        labels = ",".join(f"{k}={v}" for k, v in NODE_LABELS.items())
        ds["kubelet"].start(_in_node_namespace([
            str(bins / "kubelet"), f"--config={paths.root / 'kubelet.yaml'}",
            f"--kubeconfig={layout.kube_dir / 'node.kubeconfig'}", f"--root-dir={paths.kubelet_root}",
            f"--cert-dir={paths.root / 'kubelet-pki'}",
            f"--hostname-override={NODE_NAME}", f"--node-ip={address}", f"--node-labels={labels}", "--v=1",
        ], layout), env=env)
    else:
        kubelet_started = 0.0  # already running: its current heartbeat will do
    _start_kube_proxy(layout, say, env)
    _start_builds(layout, say)
    _wait_node_ready(layout, say, kubelet_started)


def _in_node_namespace(argv: list[str], layout: Layout) -> list[str]:
    """argv run in the node's mount namespace: joined when containerd or the kubelet already
    runs, else made (private propagation, the device-plugin folder bound to this environment's)."""
    for name in ("containerd", "kubelet"):
        pid = daemons(layout)[name].pid()
        if pid is not None:
            return ["nsenter", f"--target={pid}", "--mount", "--", *argv]
    plugin_dir = NodePaths(layout).plugin_dir
    script = 'mkdir -p "$1" && mount --bind "$2" "$1" && shift 2 && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "atlas-node",
            str(DEVICE_PLUGIN_PATH), str(plugin_dir), *argv]


def git_uri(layout: Layout) -> str:
    return f"git://{LOOPBACK}:{layout.ports.git}/{GIT_REPOSITORY}"


def _start_builds(layout: Layout, say: Callable[[str], None]) -> None:
    """The Git server and the BuildConfig runner (infra/localenv/builds.py, a stand-in)."""
    ds = daemons(layout)
    if not ds["git-daemon"].running():
        require_free_ports({"git daemon": layout.ports.git})
        served = layout.state_dir / "git"
        served.mkdir(parents=True, exist_ok=True)
        link = served / GIT_REPOSITORY
        if not link.is_symlink() or link.resolve() != REPO_ROOT.resolve():
            link.unlink(missing_ok=True)
            link.symlink_to(REPO_ROOT.resolve())
        say(f"node: serving this repository at {git_uri(layout)} (git daemon)")
        # Only this one repository is exported: the base path holds only its link, and git daemon
        # refuses paths with `..` in them.
        ds["git-daemon"].start(["git", "daemon", "--reuseaddr", f"--listen={LOOPBACK}", f"--port={layout.ports.git}",
                                f"--base-path={served}", "--export-all", str(served)])
        wait_for(lambda: port_open(layout.ports.git), "git daemon to listen", 15, ds["git-daemon"])
    if not ds["build-runner"].running():
        pki = Pki(layout.kube_dir / "pki")
        kubeconfig = layout.kube_dir / "build-runner.kubeconfig"
        _write(kubeconfig, kubeconfig_yaml(layout.api_url, pki, "build-runner"))
        say("node: starting the BuildConfig runner (stand-in for OpenShift's build controller)")
        ds["build-runner"].start([sys.executable, "-m", "infra.localenv.builds", str(layout.state_dir),
                                  str(kubeconfig), images.registry_host(layout)], cwd=REPO_ROOT)


def _start_kube_proxy(layout: Layout, say: Callable[[str], None], env: dict[str, str]) -> None:
    daemon = daemons(layout)["kube-proxy"]
    if daemon.running():
        return
    owner = kube_proxy_owner()
    if owner is not None and owner != layout.state_dir:
        say(f"node: kube-proxy not started: the environment in {owner} runs this machine's "
            "(its iptables chains are per machine); Services' cluster IPs work there")
        return
    say("node: starting kube-proxy (iptables)")
    daemon.start([str(kube.bin_dir() / "kube-proxy"), f"--config={NodePaths(layout).root / 'kube-proxy.yaml'}"],
                 env=env)
    KUBE_PROXY_OWNER.parent.mkdir(parents=True, exist_ok=True)
    KUBE_PROXY_OWNER.write_text(f"{layout.state_dir}\n")


def _wait_node_ready(layout: Layout, say: Callable[[str], None], since: float) -> None:
    started = time.monotonic()
    kubelet = daemons(layout)["kubelet"]
    wait_for(lambda: ready(layout, since)["ready"], f"node {NODE_NAME} to be Ready", 120, kubelet)
    wait_for(lambda: ready(layout)["gpus"] == GPU_COUNT, f"{GPU_COUNT} mock GPUs on {NODE_NAME}", 60,
             daemons(layout)["mock-gpu"])
    say(f"node: {NODE_NAME} Ready with {GPU_COUNT} mock GPUs ({time.monotonic() - started:.1f}s)")


CGROUP_V1 = Path("/sys/fs/cgroup")


def _cgroup_hierarchies() -> list[Path]:
    """The mounted cgroup v1 hierarchies (the kubelet uses cgroupfs on each)."""
    if not CGROUP_V1.is_dir():
        return []
    return [d for d in sorted(CGROUP_V1.iterdir())
            if d.is_dir() and d.name != "unified" and (d / "cgroup.procs").exists()]


def _ensure_cgroup_root(paths: NodePaths) -> None:
    """The kubelet's cgroupRoot must exist in every hierarchy before it starts."""
    for hierarchy in _cgroup_hierarchies():
        folder = hierarchy / paths.cgroup_root.lstrip("/")
        folder.mkdir(exist_ok=True)
        if hierarchy.name == "cpuset":
            # A new cpuset is empty: it takes its parent's CPUs and memory nodes.
            for name in ("cpuset.cpus", "cpuset.mems"):
                if not (folder / name).read_text().strip():
                    (folder / name).write_text((hierarchy / name).read_text())


def _remove_cgroup_root(paths: NodePaths) -> None:
    """Remove the node's cgroups, deepest first (each is empty once its processes are gone)."""
    for hierarchy in _cgroup_hierarchies():
        top = hierarchy / paths.cgroup_root.lstrip("/")
        if not top.is_dir():
            continue
        for folder in sorted((d for d in top.rglob("*") if d.is_dir()), key=lambda d: len(d.parts), reverse=True):
            with contextlib.suppress(OSError):
                folder.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()


def _sysctl(name: str, value: str) -> None:
    path = Path("/proc/sys") / name
    with contextlib.suppress(OSError):
        if path.read_text().strip() != value:
            path.write_text(value)


def _ctr(layout: Layout, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(kube.bin_dir() / "ctr"), "--address", str(NodePaths(layout).containerd_socket),
                           "--namespace", "k8s.io", *args], capture_output=True, text=True, check=False, timeout=60)


def _stop_containers(layout: Layout) -> int:
    """Kill and remove every container of this node's containerd (its shims then exit)."""
    listing = _ctr(layout, "tasks", "ls", "-q")
    tasks = [t for t in listing.stdout.split() if t]
    for task in tasks:
        _ctr(layout, "tasks", "kill", "--signal", "SIGKILL", task)
    for task in tasks:
        for _ in range(50):
            if _ctr(layout, "tasks", "delete", "--force", task).returncode == 0:
                break
            time.sleep(0.1)
    containers = [c for c in _ctr(layout, "containers", "ls", "-q").stdout.split() if c]
    if containers:
        _ctr(layout, "containers", "rm", *containers)
    return len(tasks)


def _unmount_under(*roots: Path) -> None:
    """Unmount what the node left mounted (volumes, rootfs, pod netns), deepest first."""
    prefixes = tuple(str(r) + "/" for r in roots)
    with open("/proc/self/mountinfo") as info:
        points = [line.split()[4] for line in info]
    for point in sorted((p for p in points if p.startswith(prefixes)), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, check=False)


def down(layout: Layout, say: Callable[[str], None]) -> None:
    ds = daemons(layout)
    paths = NodePaths(layout)
    for name in ("build-runner", "git-daemon"):
        if ds[name].stop():
            say(f"node: stopped the {name}")
    if ds["kube-proxy"].stop():
        subprocess.run([str(kube.bin_dir() / "kube-proxy"), "--cleanup"], capture_output=True, check=False)
        KUBE_PROXY_OWNER.unlink(missing_ok=True)
        say("node: stopped kube-proxy (its iptables rules removed)")
    if ds["kubelet"].stop():
        say("node: stopped the kubelet")
    if ds["mock-gpu"].stop():
        say("node: stopped the mock-GPU device plugin")
    if ds["containerd"].running():
        killed = _stop_containers(layout)
        if killed:
            say(f"node: stopped {killed} container(s)")
    if ds["containerd"].stop():
        say("node: stopped containerd")
    _kill_leftover_shims(paths)
    _unmount_under(paths.kubelet_root, paths.run, paths.root / "containerd")
    _remove_cgroup_root(paths)
    with contextlib.suppress(OSError):
        subprocess.run(["ip", "link", "delete", paths.bridge], capture_output=True, check=False)
    shutil.rmtree(paths.root / "cni" / "ipam", ignore_errors=True)
    shutil.rmtree(paths.run, ignore_errors=True)
    if images.stop_registry(layout):
        say("node: stopped the image registry")


def _kill_leftover_shims(paths: NodePaths) -> None:
    """Shims of this containerd that outlived it (a container killed outside, a crash)."""
    needle = str(paths.containerd_socket)
    for proc_dir in Path("/proc").iterdir():
        if not proc_dir.name.isdigit():
            continue
        try:
            cmdline = (proc_dir / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmdline and cmdline[0].endswith(b"containerd-shim-runc-v2") and needle.encode() in b" ".join(cmdline):
            with contextlib.suppress(OSError):
                os.killpg(int(proc_dir.name), 9)


def status(layout: Layout) -> dict[str, Any]:
    ds = daemons(layout)
    owner = kube_proxy_owner()
    return {
        "name": NODE_NAME,
        "components": {n: d.running() for n, d in ds.items()},
        **ready(layout),
        "gpus_provenance": mockgpu.PROVENANCE,
        "pod_cidr": str(Network.of(layout).pod_cidr),
        "git_uri": git_uri(layout),
        "kube_proxy": "this environment" if owner == layout.state_dir else (
            f"run by the environment in {owner}" if owner else "not running"),
        "registry": images.registry_status(layout),
    }
