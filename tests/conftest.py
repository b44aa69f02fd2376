"""Shared fixtures: the local environment, started when a test needs it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from infra.localenv import kube
from infra.localenv.layout import Layout, default_layout


@pytest.fixture(scope="session")
def kube_env() -> Iterator[Layout]:
    """The local Kubernetes control plane; started here (and stopped after) if not running."""
    layout = default_layout()
    started = not kube.status(layout)["ready"]
    if started:
        kube.up(layout, kube.KubeSettings(pod_run_seconds=3.0), print)
    yield layout
    if started:
        kube.down(layout, print)
