"""The SSH model: a login node to reach (`SshEndpoint`) and what a command there returned (`RemoteResult`).

Plain frozen dataclasses with no connection behind them, so the schedulers' pure parsers
(scheduler.py and each scheduler's package) and the providers' input readers use them without
importing paramiko; the ssh package connects with them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

CONNECT_TIMEOUT_S = 15.0
KEEPALIVE_S = 30


@dataclass(frozen=True)
class SshEndpoint:
    """Everything needed to log in; the secret fields never appear in repr or logs."""

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

    @property
    def pool_key(self) -> tuple[str, int, str]:
        return (self.host, self.port, self.user)

    @property
    def address(self) -> str:
        return f"{self.user}@{self.host}:{self.port}"

    def identity(self) -> str:
        """A digest of what the connection was made with; a change means reconnect."""
        material = "\0".join(
            [self.known_hosts, self.private_key_file or "", self.private_key or "", self.passphrase or ""]
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
