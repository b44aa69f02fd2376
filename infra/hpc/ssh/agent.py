"""The user's ssh-agent: where it listens (SSH_AUTH_SOCK, or IdentityAgent) and the keys it holds.

An endpoint carries only how to find the agent (`AGENT_FROM_ENVIRONMENT`, or IdentityAgent as the
ssh config writes it), never the socket's path from one login shell: the process that connects
(a provider started by `pulumi`, a script) finds it in its own environment when it connects. The
keys stay in the agent: it signs the login, Atlas never sees them.
"""

from __future__ import annotations

import getpass
import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from infra.hpc.remote import AGENT_FROM_ENVIRONMENT

if TYPE_CHECKING:
    import paramiko
else:
    from infra.hpc.ssh.lazy_paramiko import paramiko

AGENT_TIMEOUT_S = 10.0
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


@dataclass(frozen=True)
class AgentLocation:
    """Where an agent was looked for, and how a message names that place."""

    path: str | None  # None: nowhere (SSH_AUTH_SOCK unset)
    described: str


def agent_location(spec: str | None, environ: Mapping[str, str] | None = None) -> AgentLocation | None:
    """The socket an endpoint's `agent` names, in this process's environment; None: no agent.

    IdentityAgent's forms: SSH_AUTH_SOCK (the variable's value), `$VAR`/`${VAR}` (another
    variable's), a path with `~`, `%d` (home) and `%u` (local user) expanded; "none" is no agent."""
    env = os.environ if environ is None else environ
    if spec is None or spec.lower() == "none":
        return None
    if spec == AGENT_FROM_ENVIRONMENT:
        value = env.get(AGENT_FROM_ENVIRONMENT) or None
        return AgentLocation(value, f"SSH_AUTH_SOCK={value}" if value else "SSH_AUTH_SOCK is not set")
    whole = _VARIABLE.fullmatch(spec)
    if whole is not None:
        variable = whole.group(1) or whole.group(2)
        value = env.get(variable) or None
        return AgentLocation(value, f"IdentityAgent {spec}={value}" if value else f"IdentityAgent {spec} is not set")
    home = env.get("HOME") or str(Path.home())
    path = _VARIABLE.sub(lambda m: env.get(m.group(1) or m.group(2), ""), spec)
    path = path.replace("%d", home).replace("%u", getpass.getuser()).replace("%%", "%")
    if path.startswith("~"):
        path = home + path[1:]
    return AgentLocation(path, f"IdentityAgent {path}")


def connect_agent(path: str) -> paramiko.agent.AgentSSH:
    """paramiko's agent client on a socket of our choosing (paramiko.Agent reads SSH_AUTH_SOCK only);
    close it with `close_agent`."""
    agent = paramiko.agent.AgentSSH()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(AGENT_TIMEOUT_S)
    try:
        sock.connect(path)
        agent._connect(sock)  # type: ignore[attr-defined]  # asks for its keys: AgentSSH's one way in
    except BaseException:
        sock.close()
        raise
    return agent


def close_agent(agent: paramiko.agent.AgentSSH) -> None:
    agent._close()  # type: ignore[attr-defined]


def open_agent(location: AgentLocation) -> tuple[paramiko.agent.AgentSSH | None, str]:
    """The agent at `location` and its keys, or None and why not (one clause for a message)."""
    if location.path is None:
        return None, f"no ssh-agent ({location.described})"
    try:
        return connect_agent(location.path), ""
    except FileNotFoundError:
        return None, f"no ssh-agent listens at {location.described} (the socket is gone)"
    except (OSError, EOFError, paramiko.SSHException) as error:
        return None, f"the ssh-agent at {location.described} did not answer ({error or type(error).__name__})"


def describe_key(key: paramiko.PKey) -> str:
    """A public key as `ssh-add -l` shows it: type, SHA256 fingerprint, comment. Never the key."""
    comment = getattr(key, "comment", "") or ""
    name = key.get_name().replace("ssh-", "").upper()
    return f"{name} {key.fingerprint}" + (f" ({comment})" if comment else "")
