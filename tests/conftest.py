"""Shared fixtures: the local environment, started when a test needs it and stopped after."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from localenv import kube, kube_user, node
from localenv.cli import clean_up_after_others, forget_if_stopped
from localenv.layout import Layout, default_layout
from tests.support import ProjectUserSite


@pytest.fixture(scope="session")
def kube_env(root: None) -> Iterator[Layout]:
    """The local cluster: the control plane with KWOK's simulated nodes, and the real node
    (kubelet, containerd, mock GPUs, the registry and the BuildConfig runner); started here
    (and stopped after) if not running. The node runs containerd and the kubelet as root."""
    layout = default_layout()
    started = not kube.status(layout)["ready"]
    if started:
        start_clean_cluster(layout)
    node_started = not node.ready(layout)["ready"] or not all(node.status(layout)["components"][n]
                                                               for n in ("containerd", "kubelet", "mock-gpu"))
    if node_started:
        node.up(layout, print)
    yield layout
    if node_started:
        node.down(layout, print)
    if started:
        kube.down(layout, print)
    forget_if_stopped(layout)


@pytest.fixture(scope="session")
def kube_api_env() -> Iterator[Layout]:
    """The local control plane alone (the API server, its controllers and KWOK's simulated nodes),
    for tests of the API that start no pod on a real node; started here (and stopped after) if
    not running."""
    layout = default_layout()
    started = not kube.status(layout)["ready"]
    if started:
        start_clean_cluster(layout)
    yield layout
    if started:
        kube.down(layout, print)
    forget_if_stopped(layout)


def start_clean_cluster(layout: Layout) -> None:
    """Start the local cluster the tests own with no objects of an earlier run: the tests' state
    folder outlives a run (scripts/test keeps it per checkout), and a run that was killed, or a
    stack a failed test could not destroy, would otherwise hold pool volumes and namespaces into
    this one (a CI run found every ReadWriteMany volume still claimed by one before it). Whatever
    of it still runs is stopped first; certificates and the node's image cache are kept. What an
    environment stopped without `down` left on the machine goes first, as `localenv up` does."""
    clean_up_after_others(layout, print)
    kube.down(layout, print)
    kube.reset(layout)
    kube.up(layout, kube.KubeSettings(pod_run_seconds=3.0), print)


@pytest.fixture(scope="session")
def root() -> None:
    """The one check for tests that need root (the local Satori's sshd and Slurm, the node's
    containerd and kubelet, a memory cgroup of their own): asked for by the fixtures that start
    those or by `pytest.mark.usefixtures("root")`, it fails, never skips, without root: CI runs
    as root and must run them all."""
    if os.geteuid() != 0:
        pytest.fail(
            "this test needs root (the local Satori runs sshd and Slurm, the local node containerd and the "
            "kubelet, as root): run the tests as root, as CI does (.ci/run)"
        )


@pytest.fixture(scope="session")
def satori_env(root: None) -> Iterator[Layout]:
    """The local Satori (sshd, Slurm, LSF command set) of the same layout."""
    from localenv import satori

    layout = default_layout()
    # The login user must reach the state folder (slurm.conf, the munge socket).
    for folder in (layout.state_dir, layout.state_dir.parent):
        folder.mkdir(parents=True, exist_ok=True)
        folder.chmod(folder.stat().st_mode | 0o005)
    started = not satori.status(layout)["ssh"].get("running", False)
    if started:
        satori.up(layout)
    yield layout
    if started:
        satori.down(layout)
    forget_if_stopped(layout)


@pytest.fixture(scope="session")
def moto_env() -> Iterator[Layout]:
    """The local AWS (a moto server) of the same layout; started here (and stopped after) if not running."""
    from localenv import moto

    layout = default_layout()
    started = not moto.status(layout)["aws"]["ready"]
    if started:
        moto.up(layout)
    yield layout
    if started:
        moto.down(layout)
    forget_if_stopped(layout)


@pytest.fixture(scope="session")
def site_env(satori_env: Layout) -> Iterator[Layout]:
    """The local site (localenv/site.py) in front of the local Satori of the same layout: the bastion,
    the login node behind it and the one that asks a code, the user's agent (and an empty one) and
    their home (~/.ssh/config with the aliases, known_hosts); started here (and stopped after) if
    not running. Its HOME and SSH_AUTH_SOCK are `site.status(layout)["env"]`."""
    from localenv import site

    started = not site.status(satori_env)["running"]
    if started:
        site.up(satori_env)
    yield satori_env
    if started:
        site.down(satori_env)
    forget_if_stopped(satori_env)


@pytest.fixture(scope="module")
def project_user(kube_api_env: Layout, tmp_path_factory: pytest.TempPathFactory) -> ProjectUserSite:
    """The project `atlas-probe` made beforehand, its ServiceAccount with the project's rights only
    and a token for it, and that user's two-file KUBECONFIG in a folder of its own. A new token for
    each module: a test may revoke the account's tokens (`kube_user.revoke`), as a logout does."""
    user = kube_user.ensure_project_user(kube_api_env)
    folder = tmp_path_factory.mktemp("user-kube")
    return ProjectUserSite(kube_api_env, user, kube_user.write_user_kubeconfig(kube_api_env, user, folder), folder)
