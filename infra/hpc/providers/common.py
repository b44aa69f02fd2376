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
from infra.hpc.remote import SshEndpoint, SshHop
from infra.hpc.ssh.resolve import resolve_endpoint
from infra.hpc.target import HpcTarget

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
            "arrays.py",
            "apptainer.py",
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


def _hop_inputs(hop: SshHop) -> dict[str, Any]:
    inputs: dict[str, Any] = {
        "host": hop.host,
        "port": hop.port,
        "user": hop.user,
        "known_hosts": hop.known_hosts,
        "known_hosts_source": hop.known_hosts_source,
        "name": hop.name,
    }
    if hop.host_key_alias:
        inputs["host_key_alias"] = hop.host_key_alias
    if hop.identity_files:
        inputs["identity_files"] = list(hop.identity_files)
    if hop.agent:
        inputs["agent"] = hop.agent
    return inputs


def endpoint_inputs(endpoint: SshEndpoint) -> dict[str, Any]:
    """The `ssh` input of a resolved endpoint (infra/hpc/ssh/resolve.py), secrets aside (they travel
    in `ssh_secret`). A direct login with the target's own key gives exactly the six keys it always
    gave, so state written before the ssh config was read shows no change; what the config adds
    (the alias, jump hosts, the agent, IdentityFiles, a master's socket) appears only where it
    adds something. The agent is named, never its socket's path (infra/hpc/ssh/agent.py)."""
    inputs = ssh_inputs(
        endpoint.host,
        endpoint.port,
        endpoint.user,
        endpoint.known_hosts,
        endpoint.known_hosts_source,
        endpoint.private_key_file,
    )
    extra: dict[str, Any] = {
        "name": endpoint.name,
        "host_key_alias": endpoint.host_key_alias,
        "jumps": [_hop_inputs(hop) for hop in endpoint.jumps],
        "identity_files": list(endpoint.identity_files),
        "agent": endpoint.agent,
        "control_path": endpoint.control_path,
        "ssh_config": endpoint.ssh_config,
    }
    inputs.update({name: value for name, value in extra.items() if value})
    return inputs


def target_ssh_inputs(target: HpcTarget, key_from_secret: bool = False, key: str = "atlas:hpc") -> dict[str, Any]:
    """The `ssh` input for a cluster's login node, from its validated target and the user's ssh
    config; `key_from_secret`: its key arrives as a Pulumi secret (`ssh_secret`)."""
    return endpoint_inputs(resolve_endpoint(target, key, key_from_secret=key_from_secret))


class SshResource(DynamicResource):
    """A dynamic resource reached over SSH. The key (`ssh_secret`) is secret on the way in; this
    keeps it encrypted in state on the way out too."""

    SECRET_OUTPUTS = ("ssh_secret",)


def over_ssh(ssh_target: pulumi.Input[dict[str, Any]], ssh_secret: pulumi.Input[dict[str, Any]]) -> dict[str, Any]:
    """The inputs every resource reached over SSH has: the code version, the login node and its key."""
    return {"provider_version": PROVIDER_VERSION, "ssh": ssh_target, "ssh_secret": ssh_secret}
