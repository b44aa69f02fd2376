"""The SSH model: a login node to reach (`SshEndpoint`), the jump hosts on the way (`SshHop`), and what
a command there returned (`RemoteResult`).

Plain frozen dataclasses with no connection behind them, so the schedulers' pure parsers
(scheduler.py and each scheduler's package) and the providers' input readers use them without
importing paramiko; the ssh package connects with them. An endpoint is what
`infra.hpc.ssh.resolve.resolve_endpoint` made of a target and the user's OpenSSH config: every
hop's address, user and host keys resolved, the keys named but never read here.
"""

from __future__ import annotations

import hashlib
import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

from infra.provenance import Fact, loopback_host_fact

CONNECT_TIMEOUT_S = 15.0
KEEPALIVE_S = 30
# An endpoint's `agent` when the agent is the one SSH_AUTH_SOCK names in the environment of the
# process that connects (OpenSSH's default, and its IdentityAgent value of the same name). Only
# this name goes into Pulumi state, never the socket's path, which changes with every login shell.
AGENT_FROM_ENVIRONMENT = "SSH_AUTH_SOCK"


def remote_path_expression(path: str) -> str:
    """A login node's path as shell text: relative paths are under the login user's home, as
    for SFTP (a job or a command may start elsewhere)."""
    return shlex.quote(path) if path.startswith("/") else f'"$HOME"/{shlex.quote(path)}'


def host_key_name(host: str, port: int) -> str:
    """The name a host's key is filed under in known_hosts: `host`, or `[host]:port` off port 22."""
    return host if port == 22 else f"[{host}]:{port}"


@dataclass(frozen=True)
class SshHop:
    """One SSH server on the way: a jump host of ProxyJump, or the login node itself.

    `host` is the address connected to (its HostName), as the hop before it sees it; `name` is
    how the user's ssh config or ProxyJump calls it (an alias), for messages. The keys it is
    offered: the agent (`agent`: AGENT_FROM_ENVIRONMENT, or an IdentityAgent path as the config
    writes it; None: no agent) and `identity_files` (IdentityFile); the target's own key, when it
    has one, is the login node's and is offered to the jump hosts after theirs.
    """

    host: str
    port: int
    user: str
    known_hosts: str  # OpenSSH known_hosts lines for this host's key
    known_hosts_source: str  # how errors name them: "file ~/.ssh/known_hosts"
    name: str = ""
    host_key_alias: str | None = None  # HostKeyAlias: the name its key is filed under instead
    identity_files: tuple[str, ...] = ()
    agent: str | None = None

    @property
    def address(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"

    @property
    def label(self) -> str:
        """The hop as a message names it: its alias and its address."""
        return f"{self.name} ({self.address})" if self.name and self.name != self.host else self.address

    @property
    def key_name(self) -> str:
        """The name its host key is looked up under in known_hosts."""
        return host_key_name(self.host_key_alias or self.host, self.port)


@dataclass(frozen=True)
class SshEndpoint:
    """Everything needed to log in; the secret fields never appear in repr or logs.

    Reached directly, or through `jumps` (ProxyJump, first hop first), or, where `control_path`
    names the socket of an OpenSSH master connection the user opened (ControlMaster, for a site
    that asks for a second factor), through that connection while it runs. The key: the target's
    own (`private_key_file`, or `private_key` from a secret), or else the agent and the
    IdentityFiles of the user's ssh config.
    """

    host: str
    port: int
    user: str
    known_hosts: str  # OpenSSH known_hosts text
    known_hosts_source: str  # how errors name it: "file /path" or "config atlas:satori.known_hosts"
    private_key_file: str | None = None
    private_key: str | None = field(default=None, repr=False)
    passphrase: str | None = field(default=None, repr=False)
    connect_timeout_s: float = CONNECT_TIMEOUT_S
    keepalive_s: int = KEEPALIVE_S
    # What the user's ssh config added (none of it set: a direct login with the target's key).
    name: str = ""  # the Host alias the target named, when it is not `host` itself
    host_key_alias: str | None = None
    jumps: tuple[SshHop, ...] = ()
    identity_files: tuple[str, ...] = ()
    agent: str | None = None
    control_path: str | None = None  # an OpenSSH master connection's socket (ControlPath)
    ssh_config: str | None = None  # the OpenSSH config file the target named (`ssh -F`), if any

    @property
    def pool_key(self) -> tuple[str, int, str]:
        return (self.host, self.port, self.user)

    @property
    def address(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"

    @property
    def has_own_key(self) -> bool:
        """Whether the target gives its key (a file or a secret): then only that key logs in."""
        return bool(self.private_key or self.private_key_file)

    def login_hop(self) -> SshHop:
        """The login node as the last hop of the route."""
        return SshHop(
            host=self.host,
            port=self.port,
            user=self.user,
            known_hosts=self.known_hosts,
            known_hosts_source=self.known_hosts_source,
            name=self.name,
            host_key_alias=self.host_key_alias,
            identity_files=self.identity_files,
            agent=self.agent,
        )

    @property
    def route(self) -> str:
        """The login node and how it is reached, as messages say it."""
        text = self.login_hop().label
        if self.jumps:
            text += " via " + " then ".join(hop.label for hop in self.jumps)
        return text

    def stand_in_facts(self) -> tuple[Fact, ...]:
        """The hops of the route on this machine (infra.provenance): each hop on loopback while
        every hop before it is too (a later hop's loopback is the hop before it, another machine).
        A route that starts on loopback is never `real`, a tunnel to a real site included."""
        facts = []
        for index, hop in enumerate((*self.jumps, self.login_hop())):
            role = "login node" if index == len(self.jumps) else f"jump host {hop.name or hop.host}"
            fact = loopback_host_fact(role, hop.host)
            if fact is None:
                break
            facts.append(fact)
        return tuple(facts)

    @property
    def master_hint(self) -> str:
        """The command that opens the master connection Atlas uses at `control_path`."""
        config = f"-F {self.ssh_config} " if self.ssh_config else ""
        return f"ssh {config}-M -S {self.control_path} -fN {self.name or self.host}"

    def identity(self) -> str:
        """A digest of what the connection was made with; a change means reconnect."""
        route = json.dumps(
            [
                [hop.host, hop.port, hop.user, hop.known_hosts, hop.host_key_alias, hop.identity_files, hop.agent]
                for hop in self.jumps
            ]
            + [self.host_key_alias, self.identity_files, self.agent, self.control_path]
        )
        material = "\0".join(
            [self.known_hosts, self.private_key_file or "", self.private_key or "", self.passphrase or "", route]
        )
        return hashlib.sha256(material.encode()).hexdigest()


@dataclass(frozen=True)
class RemoteResult:
    command: str
    exit_code: int
    stdout: str
    stderr: str


# Runs one shell command on the login node: `ssh.run_remote` over a pooled connection in a
# provider or a script, recorded output in tests.
Runner = Callable[[str], RemoteResult]
