"""An environment left behind does not break the next one (localenv/records.py).

As seen on this machine: an environment whose state folder was deleted while it ran, its
processes then killed, left its bridge holding the pod subnet the next environment uses; every
probe of the next one then failed. Here that very situation is made (a real node, SIGKILL, the
folder deleted) and the next `localenv up` with the same subnet must find and remove what was
left, and come up Ready. And an environment whose folder is gone but whose processes still run
is stopped from another checkout's `localenv down --state-dir`, and refused by name until then.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.toolchain.pins import REPO_ROOT
from localenv import images, kube, node, records
from localenv.cli import running_daemons
from localenv.layout import Layout, Ports
from localenv.node_config import NodePaths
from localenv.procs import port_open
from tests.support import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("root")]
PORT_BASE = 19300  # pod subnet 10.201.193.0/24: no other test uses it


def localenv(state_dir: Path, *args: str, base: int = PORT_BASE,
             timeout: float = 600) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ATLAS_LOCALENV_DIR": str(state_dir), "ATLAS_LOCALENV_PORT_BASE": str(base)}
    return subprocess.run([sys.executable, "-m", "localenv.cli", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def bridges() -> set[str]:
    listed = subprocess.run(["ip", "-j", "link", "show", "type", "bridge"], capture_output=True, text=True, check=True)
    return {link["ifname"] for link in json.loads(listed.stdout or "[]")}


def cgroup_exists(name: str) -> bool:
    return Path("/sys/fs/cgroup/memory", name.lstrip("/")).is_dir()


def start_pod(layout: Layout) -> None:
    """A pod on the real node that runs until killed: the pause image, which the node has."""
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "holder", "namespace": "default"},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {node.NODE_KIND_LABEL: "kubelet"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "containers": [{"name": "hold", "image": images.pause_image(layout),
                            "resources": {"limits": {"cpu": "50m", "memory": "32Mi"}}}],
        },
    }
    kube.kubectl(layout, "apply", "-f", "-", stdin=json.dumps(pod))


def running_pod_ip(layout: Layout) -> str | None:
    status = json.loads(kube.kubectl(layout, "get", "pod", "holder", "-n", "default", "-o", "json"))["status"]
    return status.get("podIP") if status.get("phase") == "Running" else None


def route_device(address: str) -> str:
    """The interface this machine sends packets for `address` out of."""
    found = subprocess.run(["ip", "-j", "route", "get", address], capture_output=True, text=True, check=True)
    return str(json.loads(found.stdout)[0]["dev"])


def kill_all(layout: Layout) -> list[str]:
    """SIGKILL every daemon of the environment, as a machine's processes are when a session ends."""
    killed = []
    for daemon in running_daemons(layout):
        pid = daemon.pid()
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        killed.append(daemon.name)
    return killed


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A folder under /tmp for the environments' state: pytest's tmp_path is too long for the
    kubelet's unix sockets (107 bytes), which `localenv up` refuses."""
    folder = Path(tempfile.mkdtemp(prefix="atl-left-", dir="/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_the_next_up_removes_what_a_killed_environment_left(short_dir: Path) -> None:
    dead = Layout(state_dir=short_dir / "deleted-env", ports=Ports(PORT_BASE))
    nxt = Layout(state_dir=short_dir / "next-env", ports=Ports(PORT_BASE))
    dead_paths = NodePaths(dead)
    try:
        for part in ("kube", "node"):
            started = localenv(dead.state_dir, "up", "--only", part)
            assert started.returncode == 0, started.stdout + started.stderr
        # A pod running: the CNI makes the node's bridge on the first pod's network set-up.
        start_pod(dead)
        wait_until(lambda: dead_paths.bridge in bridges(), f"the node's bridge {dead_paths.bridge}", 120,
                   detail=lambda: kube.kubectl(dead, "get", "pods", "-o", "wide"))
        assert cgroup_exists(dead_paths.cgroup_root)
        assert records.find_record(dead.state_dir) is not None
        # Its folder deleted while it runs, then every process of it killed.
        shutil.rmtree(dead.state_dir, ignore_errors=True)
        assert "kubelet" in kill_all(dead)

        up = localenv(nxt.state_dir, "up", "--only", "kube")
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"cleanup: the environment in {dead.state_dir} stopped without `down`" in up.stdout, up.stdout
        assert dead_paths.bridge not in bridges(), up.stdout
        assert not cgroup_exists(dead_paths.cgroup_root), up.stdout
        assert records.find_record(dead.state_dir) is None
        node_up = localenv(nxt.state_dir, "up", "--only", "node")
        assert node_up.returncode == 0, node_up.stdout + node_up.stderr
        assert node.ready(nxt)["ready"]
        # What broke before: the host reaches the new node's pods by the new bridge, not a dead one's.
        start_pod(nxt)
        pod_ip = wait_until(lambda: running_pod_ip(nxt), "the next node's pod to run", 120,
                            detail=lambda: kube.kubectl(nxt, "get", "pods", "-o", "wide"))
        assert route_device(pod_ip) == NodePaths(nxt).bridge, (pod_ip, bridges())
    finally:
        localenv(nxt.state_dir, "down")
        localenv(dead.state_dir, "down", "--state-dir", str(dead.state_dir))
    assert records.find_record(nxt.state_dir) is None  # a full `down` forgets it
    assert NodePaths(nxt).bridge not in bridges()


def test_a_running_environment_without_its_folder_is_refused_then_stopped_from_anywhere(short_dir: Path) -> None:
    orphan = Layout(state_dir=short_dir / "orphan-env", ports=Ports(PORT_BASE))
    other = short_dir / "other-env"
    try:
        started = localenv(orphan.state_dir, "up", "--only", "kube")
        assert started.returncode == 0, started.stdout + started.stderr
        shutil.rmtree(orphan.state_dir, ignore_errors=True)
        assert {d.name for d in running_daemons(orphan)} >= {"etcd", "kube-apiserver"}

        refused = localenv(other, "up", "--only", "kube")
        assert refused.returncode == 1
        assert f"the environment in {orphan.state_dir} (its state folder is gone) still runs" in refused.stderr
        assert f"`scripts/localenv down --state-dir {orphan.state_dir}` (from any checkout)" in refused.stderr
        assert not (other / "kube").exists()  # refused before anything was started or written

        listed = localenv(other, "list")
        assert f"{orphan.state_dir}  ports {PORT_BASE}+" in listed.stdout and "(state folder gone)" in listed.stdout

        stopped = localenv(other, "down", "--state-dir", str(orphan.state_dir))
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        assert running_daemons(orphan) == []
        assert not port_open(orphan.ports.apiserver)
        assert records.find_record(orphan.state_dir) is None
    finally:
        localenv(other, "down")
        localenv(orphan.state_dir, "down", "--state-dir", str(orphan.state_dir))
