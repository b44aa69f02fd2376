"""Unit tests never read the user's own kubeconfig: KUBECONFIG names a file of this session whose
one context points at a port nothing listens on."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

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
