"""The HPC dynamic resources' inputs, read from the props the engine passes (infra/hpc/providers/):
the SSH endpoint, the checks of paths and of the `ssh` input, and a BatchJob's typed inputs, each
default in one place. Pure: nothing here opens a connection.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pulumi.dynamic

from infra.dynamic.inputs import is_unknown, number
from infra.hpc.registry import scheduler_class
from infra.hpc.remote import SshEndpoint, SshHop
from infra.hpc.target import HpcConfigError
from infra.hpc.target_parser import validate_remote_path

DEFAULT_WAIT_TIMEOUT_S = 3600.0
DEFAULT_POLL_INTERVAL_S = 60.0


def _hop_from(hop: Mapping[str, Any]) -> SshHop:
    return SshHop(
        host=str(hop["host"]),
        port=int(hop["port"]),
        user=str(hop["user"]),
        known_hosts=str(hop["known_hosts"]),
        known_hosts_source=str(hop.get("known_hosts_source") or "known_hosts"),
        name=str(hop.get("name") or ""),
        host_key_alias=hop.get("host_key_alias") or None,
        identity_files=tuple(str(p) for p in hop.get("identity_files") or ()),
        agent=hop.get("agent") or None,
    )


def endpoint_from(props: Mapping[str, Any]) -> SshEndpoint:
    """The SSH endpoint from a resource's `ssh` (plain) and `ssh_secret` (secret) inputs. State
    written before the ssh config was read has none of the keys after `private_key_file`: it reads
    as the direct login with the target's own key that it was."""
    target = props["ssh"]
    secret = props.get("ssh_secret") or {}
    return SshEndpoint(
        host=str(target["host"]),
        port=int(target["port"]),
        user=str(target["user"]),
        known_hosts=str(target["known_hosts"]),
        known_hosts_source=str(target.get("known_hosts_source") or "known_hosts"),
        private_key_file=target.get("private_key_file") or None,
        private_key=secret.get("private_key") or None,
        passphrase=secret.get("passphrase") or None,
        name=str(target.get("name") or ""),
        host_key_alias=target.get("host_key_alias") or None,
        jumps=tuple(_hop_from(hop) for hop in target.get("jumps") or ()),
        identity_files=tuple(str(p) for p in target.get("identity_files") or ()),
        agent=target.get("agent") or None,
        control_path=target.get("control_path") or None,
        ssh_config=target.get("ssh_config") or None,
    )


# What, in an `ssh` input, lets the login node be logged in to without the target's own key.
_KEYS_BESIDES_OWN = ("agent", "identity_files", "control_path")


def check_ssh(props: Mapping[str, Any], failures: list[pulumi.dynamic.CheckFailure]) -> None:
    target = props.get("ssh")
    if is_unknown(target):
        return
    if not isinstance(target, Mapping):
        failures.append(pulumi.dynamic.CheckFailure("ssh", "expected an object with host, port, user, known_hosts"))
        return
    for key in ("host", "port", "user", "known_hosts"):
        if not target.get(key):
            failures.append(pulumi.dynamic.CheckFailure(f"ssh.{key}", "required"))
    secret = props.get("ssh_secret") or {}
    has_key = target.get("private_key_file") or any(target.get(k) for k in _KEYS_BESIDES_OWN)
    if not is_unknown(secret) and not has_key and not secret.get("private_key"):
        failures.append(
            pulumi.dynamic.CheckFailure(
                "ssh_secret.private_key",
                "no key: give private_key (secret) or ssh.private_key_file, or log in with the agent (ssh.agent)",
            )
        )
    for index, hop in enumerate(target.get("jumps") or ()):
        for key in ("host", "port", "user", "known_hosts"):
            if not isinstance(hop, Mapping) or not hop.get(key):
                failures.append(pulumi.dynamic.CheckFailure(f"ssh.jumps[{index}].{key}", "required"))


def check_relative_path(value: Any, prop: str, failures: list[pulumi.dynamic.CheckFailure]) -> None:
    if is_unknown(value):
        return
    if not isinstance(value, str) or value.startswith("/"):
        failures.append(pulumi.dynamic.CheckFailure(prop, f"expected a relative path, found {value!r}"))
        return
    try:
        validate_remote_path(value, prop)
    except HpcConfigError as error:
        failures.append(pulumi.dynamic.CheckFailure(prop, str(error)))


def check_remote_dir(value: Any, prop: str, failures: list[pulumi.dynamic.CheckFailure]) -> None:
    if is_unknown(value):
        return
    try:
        validate_remote_path(str(value), prop)
    except HpcConfigError as error:
        failures.append(pulumi.dynamic.CheckFailure(prop, str(error)))


def ssh_identity(props: Mapping[str, Any]) -> tuple[Any, ...]:
    """The login an `ssh` input names: the login node's address, port and user."""
    target = props.get("ssh") or {}
    return (target.get("host"), target.get("port"), target.get("user"))


def same_login(olds: Mapping[str, Any], news: Mapping[str, Any]) -> bool:
    """Whether two `ssh` inputs log in to the same account on the same login node, so its jobs and
    files are the ones already there. The port and user must match, and the host by its address or
    by the name the target wrote: a target that now names the login node by a Host alias of the
    ssh config (`satori`, HostName satori-login-001.mit.edu), or by a name the config maps to an
    address, is the login an older state knew by that name or address. The route (jump hosts, the
    agent, a master connection) is how it is reached, not which login it is: it never replaces."""
    old, new = olds.get("ssh") or {}, news.get("ssh") or {}
    if (old.get("port"), old.get("user")) != (new.get("port"), new.get("user")):
        return False
    names = {str(n) for n in (old.get("host"), old.get("name")) if n}
    return bool(names & {str(n) for n in (new.get("host"), new.get("name")) if n})


def scheduler_options_of(props: Mapping[str, Any]) -> dict[str, str]:
    """A BatchJob's (or its completion's) `scheduler_options`, read by its scheduler's class with
    every default filled in. State written before the input existed holds the scheduler's older
    spelling of its options instead (its class's `legacy_option_keys`): those
    read back as the same options, so the two compare equal. Raises HpcConfigError for options
    the scheduler does not take, UnknownSchedulerError for a scheduler Atlas does not drive."""
    scheduler = scheduler_class(props.get("scheduler"))
    legacy = {name: props[name] for name in scheduler.legacy_option_keys if props.get(name) is not None}
    return scheduler.parse_options(props.get("scheduler_options"), "inputs", legacy)


@dataclass(frozen=True)
class JobInputs:
    """A BatchJob's inputs (a JobCompletion has the same, less the script), parsed once per call."""

    scheduler: str
    scheduler_options: dict[str, str]
    step: str
    job_name: str
    run_dir: str
    script_path: str
    log_pattern: str
    requested_queue: str | None
    wait: bool
    wait_timeout_s: float
    poll_interval_s: float
    job_urn: str | None

    @classmethod
    def of(cls, props: Mapping[str, Any]) -> JobInputs:
        return cls(
            scheduler=str(props["scheduler"]),
            scheduler_options=scheduler_options_of(props),
            step=str(props.get("step")),
            job_name=str(props["job_name"]),
            run_dir=str(props["run_dir"]),
            script_path=str(props.get("script_path") or ""),
            log_pattern=str(props.get("log_pattern")),
            requested_queue=props.get("requested_queue"),
            wait=bool(props.get("wait")),
            wait_timeout_s=number(props, "wait_timeout_s", DEFAULT_WAIT_TIMEOUT_S),
            poll_interval_s=number(props, "poll_interval_s", DEFAULT_POLL_INTERVAL_S),
            job_urn=props.get("job_urn") or None,
        )
