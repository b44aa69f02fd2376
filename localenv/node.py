"""The local cluster's real node: a kubelet over containerd and runc, CNI networking, kube-proxy,
NetworkPolicy enforced by kube-router's policy controller (localenv/netpol.py), and mock GPUs
handed out through the kubelet's device-plugin API.

Modelled on Kubernetes' own `hack/local-up-cluster.sh`: the node's parts run as local
processes beside the control plane (localenv/kube.py), KWOK's simulated nodes stay
for the tests that need many. The kubelet is the pinned Kubernetes version, containerd and
the CNI plugins are built from Go modules by `scripts/bootstrap`, runc is Debian's.

This machine has cgroup v1 only: kubelet >= 1.35 starts there only with `failCgroupV1:
false`, and the cgroup driver is cgroupfs (no systemd). Several local environments can run
on one machine (the tests', a demo's): each node has its own containerd, kubelet root,
cgroup root, pod subnet and bridge, derived from the environment's port base. kube-proxy's
and kube-router's iptables chains are per machine, so one environment at a time runs each (the
first that starts); `status` says which.

The GPUs are mock (localenv/mockgpu.py): the node carries the labels and taint of a
GPU node of the NVIDIA GPU operator and `atlas.dev/gpu-mock=true`, so every figure that
comes from them is labelled mock, never measured GPU use.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from infra.toolchain.pins import REPO_ROOT
from localenv import images, kube, mockgpu, netpol, records
from localenv.layout import LOOPBACK, Layout, Ports
from localenv.node_config import (
    Network,
    NodePaths,
    cni_conflist,
    containerd_config,
    kube_proxy_config,
    kubelet_config,
    registry_hosts_toml,
    subnet_holders,
)
from localenv.pki_files import NODE_NAME, Pki, kubeconfig_yaml
from localenv.procs import Daemon, LocalEnvError, port_open, require_free_ports, wait_for
from localenv.system import ensure_packages

NODE_PACKAGES = ("runc", "conntrack", *netpol.PACKAGES, *images.IMAGE_PACKAGES)
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
COMPONENTS = ("containerd", "kubelet", "mock-gpu", "kube-proxy", netpol.DAEMON, "git-daemon", "build-runner")
# Run by one environment of the machine at a time (their iptables chains are per machine).
MACHINE_WIDE = ("kube-proxy", netpol.DAEMON)
# The repository as a Git server on loopback, for the BuildConfigs' Git source (what OpenShift
# builds is what is committed, as from any Git server): git://127.0.0.1:<base+418>/atlas.
GIT_REPOSITORY = "atlas"
UNIX_PATH_MAX = 107
KUBE_PROXY_OWNER = Path("/run/atlas/kube-proxy.owner")
# The kubelet's device-plugin folder is a constant of the API (v1beta1.DevicePluginPath), not
# under --root-dir: each node's kubelet and containerd share a mount namespace of their own in
# which this folder is the environment's, so two nodes on one machine never meet there. Their
# mounts (volumes, container root filesystems) live and die in that namespace too.
DEVICE_PLUGIN_PATH = Path("/var/lib/kubelet/device-plugins")


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


def _can_lower_oom_score() -> bool:
    """Whether this machine lets root set a negative oom_score_adj (CAP_SYS_RESOURCE)."""
    probe = subprocess.run(["sh", "-c", "echo -1 > /proc/self/oom_score_adj"], capture_output=True, check=False)
    return probe.returncode == 0


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
    if Daemon("kube-proxy", Layout(owner, Ports(0)).pids_dir, owner / "logs").running():
        return owner
    return None


def kube_proxy_owner_named() -> Path | None:
    """The state folder the owner file names, whether or not its kube-proxy still runs."""
    try:
        return Path(KUBE_PROXY_OWNER.read_text().strip())
    except OSError:
        return None


def cleanup_kube_proxy() -> None:
    """Remove the iptables chains and rules kube-proxy made (`kube-proxy --cleanup`), and its owner file."""
    subprocess.run([str(kube.bin_dir() / "kube-proxy"), "--cleanup"], capture_output=True, check=False)
    KUBE_PROXY_OWNER.unlink(missing_ok=True)


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
    # kube-proxy and kube-router may be another environment's (their chains are per machine).
    if all(d.running() for n, d in ds.items() if n not in MACHINE_WIDE) and ready(layout)["ready"]:
        say("node: already running")
        return
    if os.geteuid() != 0:
        raise LocalEnvError("the local node runs containerd and the kubelet as root: run `scripts/localenv up` as root")
    ensure_packages(NODE_PACKAGES)
    records.write_record(layout, REPO_ROOT)  # before any daemon: findable even if its folder goes
    paths = NodePaths(layout)
    _check_socket_paths(paths)
    bins = kube.bin_dir()
    for name in ("containerd", "containerd-shim-runc-v2", "kubelet", "kube-proxy", netpol.BINARY,
                 *("bridge", "host-local", "loopback", "portmap")):
        if not (bins / name).exists():
            raise LocalEnvError(f"missing toolchain binary {name} in {bins}: run scripts/bootstrap")
    require_free_ports({f"node {n}": p for n, p in (("kubelet", layout.ports.kubelet),
                                                     ("kubelet healthz", layout.ports.kubelet_healthz))
                        if not ds["kubelet"].running()})
    _free_pod_subnet(layout, paths, say)
    images.ensure_images(layout, say)

    pki = Pki(layout.kube_dir / "pki")
    _write(layout.kube_dir / "node.kubeconfig", kubeconfig_yaml(layout.api_url, pki, "node"))
    _write(layout.kube_dir / "kube-proxy.kubeconfig", kubeconfig_yaml(layout.api_url, pki, "kube-proxy"))
    lower_oom_score = _can_lower_oom_score()
    _write(paths.containerd_config, containerd_config(layout, pause_image=images.pause_image(layout), cni_bin_dir=bins,
                                                      lower_oom_score=lower_oom_score))
    registry_host = images.registry_host(layout)
    _write(paths.root / "certs.d" / registry_host / "hosts.toml", registry_hosts_toml(registry_host))
    _write(paths.cni_conf_dir / "10-atlas.conflist", json.dumps(cni_conflist(layout), indent=2))
    address = node_ip()
    _write(paths.root / "kubelet.yaml", yaml.safe_dump(
        kubelet_config(layout, pki, address, lower_oom_score=lower_oom_score), sort_keys=False))
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
        ds["mock-gpu"].start([sys.executable, "-m", "localenv.mockgpu", "--plugin-dir", str(paths.plugin_dir),
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
    # After the node registered: kube-router reads its Node object for the IP its pods are on.
    netpol.start(layout, bins, pki, say, env)


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


def _git_daemon_program() -> Path:
    """git's own git-daemon program, run directly: `git daemon` runs it as a child, so its pid
    file would name the `git` parent, and a SIGKILL to that (a killed environment) would leave
    the daemon holding the port."""
    exec_path = subprocess.run(["git", "--exec-path"], capture_output=True, text=True, check=True).stdout.strip()
    program = Path(exec_path) / "git-daemon"
    if not program.is_file():
        raise LocalEnvError(f"git's daemon program is not at {program} (`git --exec-path`): install git "
                            "(Debian's git package has it) and run `scripts/localenv up` again")
    return program


def _start_builds(layout: Layout, say: Callable[[str], None]) -> None:
    """The Git server and the BuildConfig runner (localenv/builds.py, a stand-in)."""
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
        ds["git-daemon"].start([str(_git_daemon_program()), "--reuseaddr", f"--listen={LOOPBACK}",
                                f"--port={layout.ports.git}", f"--base-path={served}", "--export-all", str(served)])
        wait_for(lambda: port_open(layout.ports.git), "git daemon to listen", 15, ds["git-daemon"])
    if not ds["build-runner"].running():
        pki = Pki(layout.kube_dir / "pki")
        kubeconfig = layout.kube_dir / "build-runner.kubeconfig"
        _write(kubeconfig, kubeconfig_yaml(layout.api_url, pki, "build-runner"))
        say("node: starting the BuildConfig runner (stand-in for OpenShift's build controller)")
        ds["build-runner"].start([sys.executable, "-m", "localenv.builds", str(layout.state_dir),
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
    remove_cgroup_tree(paths.cgroup_root.lstrip("/"))


def cgroup_roots() -> tuple[str, ...]:
    """The top-level cgroup folders named like a node's cgroup root (`atlas-<id>`), in any hierarchy."""
    found = {d.name for h in _cgroup_hierarchies() for d in h.iterdir() if d.is_dir() and d.name.startswith("atlas-")}
    return tuple(sorted(found))


def remove_cgroup_tree(name: str) -> None:
    """Remove the cgroup folder `name` from every hierarchy, deepest first; processes still in it
    (containers of a node whose containerd is gone) are killed first, or the folders stay busy."""
    for hierarchy in _cgroup_hierarchies():
        top = hierarchy / name
        if not top.is_dir():
            continue
        killed = [_kill_listed(procs) for procs in top.rglob("cgroup.procs")]
        if any(killed):
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and any(_listed(p) for p in top.rglob("cgroup.procs")):
                time.sleep(0.05)
        for folder in sorted((d for d in top.rglob("*") if d.is_dir()), key=lambda d: len(d.parts), reverse=True):
            with contextlib.suppress(OSError):
                folder.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()


def _listed(procs: Path) -> list[int]:
    try:
        return [int(pid) for pid in procs.read_text().split()]
    except (OSError, ValueError):
        return []


def _kill_listed(procs: Path) -> bool:
    """SIGKILL every process a cgroup.procs file lists; whether there was any."""
    pids = _listed(procs)
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, 9)
    return bool(pids)


def _free_pod_subnet(layout: Layout, paths: NodePaths, say: Callable[[str], None]) -> None:
    """Remove the bridge of an environment killed without `down` (a session ended, a machine's
    processes stopped) that still holds this node's pod subnet: with two routes to the subnet the
    host's packets to pods (kubelet probes, the API server's proxy) leave by the dead bridge and
    time out. An environment still running here would have held our ports (checked above), so an
    `atl*` bridge in our subnet is a dead one's; any other interface there is refused by name."""
    listed = subprocess.run(["ip", "-j", "-4", "addr", "show"], capture_output=True, text=True, check=False)
    if listed.returncode != 0:
        raise LocalEnvError(f"`ip -j -4 addr show` exited {listed.returncode}: {listed.stderr.strip()}")
    pod_cidr = Network.of(layout).pod_cidr
    for name in subnet_holders(json.loads(listed.stdout or "[]"), pod_cidr, paths.bridge):
        if not name.startswith("atl"):
            raise LocalEnvError(
                f"interface {name} holds an address in the node's pod subnet {pod_cidr}: choose another "
                "ATLAS_LOCALENV_PORT_BASE (the subnet is 10.201.<base/100 % 256>.0/24) or free the subnet"
            )
        deleted = subprocess.run(["ip", "link", "delete", name], capture_output=True, text=True, check=False)
        if deleted.returncode != 0:
            raise LocalEnvError(f"`ip link delete {name}` exited {deleted.returncode}: {deleted.stderr.strip()}")
        say(f"node: removed bridge {name}, left by an environment stopped without `down` (it held {pod_cidr})")


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
        cleanup_kube_proxy()
        say("node: stopped kube-proxy (its iptables rules removed)")
    elif kube_proxy_owner_named() == layout.state_dir:
        # This environment's kube-proxy died without `down` (killed with the rest): its chains stay.
        cleanup_kube_proxy()
        say("node: removed the iptables chains of this environment's kube-proxy (it had stopped without `down`)")
    netpol.stop(layout, say)
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
        "network_policy": netpol.status(layout),
        "registry": images.registry_status(layout),
    }
