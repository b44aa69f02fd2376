"""The local node takes back its pod subnet from an environment killed without `down`: that
one's bridge, still up and holding the subnet, would route the host's packets to pods (kubelet
probes, the API server's proxy) into nothing. Real interfaces on this machine, in a subnet no
other test uses."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from localenv import node
from localenv.layout import Layout, Ports
from localenv.node_config import Network, NodePaths
from localenv.procs import LocalEnvError

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("root")]

PORT_BASE = 23700  # pod subnet 10.201.237.0/24


def ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False)


def exists(name: str) -> bool:
    return ip("link", "show", name).returncode == 0


@pytest.fixture
def layout(tmp_path: Path) -> Iterator[Layout]:
    made = Layout(state_dir=tmp_path / "env", ports=Ports(PORT_BASE))
    yield made
    for name in ("atlstale237", "xstale237"):
        ip("link", "delete", name)


def test_a_dead_environment_s_bridge_in_the_pod_subnet_is_removed(layout: Layout) -> None:
    gateway = f"{Network.of(layout).gateway}/24"
    assert ip("link", "add", "atlstale237", "type", "bridge").returncode == 0
    assert ip("addr", "add", gateway, "dev", "atlstale237").returncode == 0
    assert ip("link", "set", "atlstale237", "up").returncode == 0
    said: list[str] = []
    node._free_pod_subnet(layout, NodePaths(layout), said.append)
    assert not exists("atlstale237")
    assert said == ["node: removed bridge atlstale237, left by an environment stopped without `down` "
                    "(it held 10.201.237.0/24)"]
    node._free_pod_subnet(layout, NodePaths(layout), said.append)  # nothing left to remove
    assert len(said) == 1


def test_an_interface_not_of_atlas_in_the_pod_subnet_is_refused_by_name(layout: Layout) -> None:
    assert ip("link", "add", "xstale237", "type", "bridge").returncode == 0
    assert ip("addr", "add", "10.201.237.9/24", "dev", "xstale237").returncode == 0
    with pytest.raises(LocalEnvError) as refused:
        node._free_pod_subnet(layout, NodePaths(layout), print)
    assert str(refused.value).startswith(
        "interface xstale237 holds an address in the node's pod subnet 10.201.237.0/24: choose another "
        "ATLAS_LOCALENV_PORT_BASE"
    )
    assert exists("xstale237")  # not ours: left alone
