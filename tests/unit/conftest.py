"""Unit tests never read the user's own kubeconfig: KUBECONFIG names a file of this session whose
one context points at a port nothing listens on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from infra.hpc.ssh import resolve

UNIT_KUBECONFIG = """apiVersion: v1
kind: Config
clusters:
- name: unit
  cluster: {server: "https://127.0.0.1:9"}
users:
- name: unit
  user: {token: unit-test-token}
contexts:
- name: unit
  context: {cluster: unit, user: unit}
current-context: unit
"""


@pytest.fixture(scope="session")
def unit_kubeconfig(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("kube") / "config"
    path.write_text(UNIT_KUBECONFIG)
    return path


@pytest.fixture(autouse=True)
def no_user_kubeconfig(unit_kubeconfig: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("KUBECONFIG", str(unit_kubeconfig))
    yield


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HOME of the test's own with an empty ~/.ssh, no agent, and neither the system's ssh_config
    nor its global known_hosts: what SSH resolution reads is only what the test writes."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    monkeypatch.setattr(resolve, "SYSTEM_CONFIG", tmp_path / "no-system-config")
    monkeypatch.setattr(resolve, "GLOBAL_KNOWN_HOSTS", (str(tmp_path / "no-global-known-hosts"),))
    (tmp_path / ".ssh").mkdir()
    return tmp_path
