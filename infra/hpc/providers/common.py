"""What the HPC side's dynamic providers share: the code version they carry, their error, the
`ssh` input built from a target, and the base of every resource reached over SSH."""

from __future__ import annotations

import datetime
import inspect
from pathlib import Path, PurePosixPath
from typing import Any

import pulumi

from infra.dynamic.registration import DynamicResource
from infra.dynamic.version import provider_version
from infra.hpc.registry import SCHEDULER_CLASSES
from infra.hpc.target import HpcTarget
from infra.hpc.target_parser import load_known_hosts

_HPC_DIR = Path(__file__).resolve().parents[1]
# Every source file the providers run: this package, their inputs, the scheduler interface and
# each registered scheduler's package, SSH and the status boards.
PROVIDER_SOURCES: tuple[Path, ...] = (
    *sorted((_HPC_DIR / "providers").glob("*.py")),
    *(
        _HPC_DIR / name
        for name in (
            "provider_inputs.py",
            "scheduler.py",
            "registry.py",
            "options.py",
            "remote.py",
            "polling.py",
        )
    ),
    # The SSH package, every module of it.
    *sorted((_HPC_DIR / "ssh").glob("*.py")),
    *sorted({path for cls in SCHEDULER_CLASSES.values() for path in Path(inspect.getfile(cls)).parent.glob("*.py")}),
)
# Code changes show up in `pulumi preview` as an update of every HPC resource (and nothing else).
PROVIDER_VERSION = provider_version(PROVIDER_SOURCES)


class HpcProviderError(Exception):
    """A failure in a provider call; the message names the job or file and what to do."""


def utc_now() -> str:
    return datetime.datetime.now(tz=datetime.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def join_remote(run_dir: str, relative: str) -> str:
    """A path under a remote run directory."""
    return str(PurePosixPath(run_dir) / relative)


def ssh_inputs(
    host: str, port: int, user: str, known_hosts: str, known_hosts_source: str, private_key_file: str | None
) -> dict[str, Any]:
    return {
        "host": host,
        "port": port,
        "user": user,
        "known_hosts": known_hosts,
        "known_hosts_source": known_hosts_source,
        "private_key_file": private_key_file,
    }


def target_ssh_inputs(target: HpcTarget) -> dict[str, Any]:
    """The `ssh` input for a cluster's login node, from its validated target."""
    return ssh_inputs(
        target.host,
        target.port,
        target.user,
        load_known_hosts(target),
        target.known_hosts_source,
        str(target.private_key_file) if target.private_key_file else None,
    )


class SshResource(DynamicResource):
    """A dynamic resource reached over SSH. The key (`ssh_secret`) is secret on the way in; this
    keeps it encrypted in state on the way out too."""

    SECRET_OUTPUTS = ("ssh_secret",)


def over_ssh(ssh_target: pulumi.Input[dict[str, Any]], ssh_secret: pulumi.Input[dict[str, Any]]) -> dict[str, Any]:
    """The inputs every resource reached over SSH has: the code version, the login node and its key."""
    return {"provider_version": PROVIDER_VERSION, "ssh": ssh_target, "ssh_secret": ssh_secret}
