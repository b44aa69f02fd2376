"""Helpers the integration and end-to-end tests share."""

from __future__ import annotations

import contextlib
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from localenv import kube_user
    from localenv.layout import Layout


def wait_until(
    check: Callable[[], Any],
    what: str,
    timeout: float = 90.0,
    pause: float = 0.5,
    detail: Callable[[], object] | None = None,
) -> Any:
    """`check()`'s first truthy value; AssertionError naming `what` (and the last value) after `timeout` s.
    For events the test cannot be told of (a pod's phase, a job's state): it polls, it never sleeps blind.
    `detail()`, when given, is added to the timeout's message: the state that shows why the wait failed
    (the scheduler's records, say), which a check returning None on failure cannot carry."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(pause)
    shown = f"; {detail()}" if detail is not None else ""
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last: {last!r}){shown}")


REPO_ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def scratch_namespace(layout: Layout, prefix: str) -> Iterator[str]:
    """A namespace of its own on the local cluster, `prefix`-<8 hex digits>, for one test; deleted
    after it without waiting (the cluster removes what it holds)."""
    from localenv import kube

    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    kube.kubectl(layout, "create", "namespace", name)
    yield name
    kube.kubectl(layout, "delete", "namespace", name, "--wait=false")


def closed_port() -> int:
    """A loopback port nothing listens on (bound a moment by this process, then let go)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def project_with_workloads(folder: Path) -> Path:
    """`folder` as a Pulumi project root for config tests: its workloads/ is the repository's, so
    `atlas:workload: probe` names a definition there as it does in a checkout."""
    link = folder / "workloads"
    if not link.exists():
        link.symlink_to(REPO_ROOT / "workloads")
    return folder


def hpc_outputs(raw: Any, name: str = "site") -> Any:
    """An HPC side's outputs as the readers get them (infra.outputs.HpcOutputs) from a test's dict,
    the fields it does not care about (where the login node is, the run folder) left empty."""
    from infra.outputs import HpcOutputs, read_environment

    defaults = {
        "scheduler": "",
        "host": "",
        "port": 22,
        "user": "",
        "run_dir": "",
        "telemetry": {"path": ""},
        "logs": {"path": ""},
    }
    return read_environment(HpcOutputs, {**defaults, **raw}, name)


@dataclass(frozen=True)
class ProjectUserSite:
    """A project's user on the local cluster (localenv/kube_user.py) and the KUBECONFIG `oc login`
    leaves them: two files, the current context a dead server, the project's in the second."""

    layout: Layout
    user: kube_user.ProjectUser
    kubeconfig: kube_user.UserKubeconfig
    folder: Path

    @property
    def env(self) -> dict[str, str]:
        return {"KUBECONFIG": self.kubeconfig.kubeconfig_env}
