"""Helpers the integration and end-to-end tests share."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


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
