"""Host keys and login keys: known_hosts only (never trust on first use), keys never in a message.

Every hop's host key is checked against the known_hosts lines its endpoint carries, whatever the
user's StrictHostKeyChecking says; an unknown, changed or revoked key is refused naming the hop,
the fingerprint offered and where the host keys came from. The keys offered to log in are, per
hop (`credentials`): the target's own key alone for the login node when the target gives one;
otherwise the agent's keys, then the IdentityFiles (OpenSSH's default files where the config
names none), an encrypted file skipped (Atlas never prompts) and said so when nothing else
worked; a jump host is offered the target's own key after its own. Messages show a key's type,
fingerprint and comment, never the key.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from infra.hpc.remote import SshEndpoint, SshHop
from infra.hpc.ssh import known_hosts
from infra.hpc.ssh.agent import agent_location, close_agent, describe_key, open_agent
from infra.hpc.ssh.errors import HostKeyError, SshAuthError

if TYPE_CHECKING:
    import paramiko
else:
    from infra.hpc.ssh.lazy_paramiko import paramiko

# OpenSSH's default identity files, those paramiko reads, in OpenSSH's order of trying them.
DEFAULT_IDENTITY_FILES = ("~/.ssh/id_rsa", "~/.ssh/id_ecdsa", "~/.ssh/id_ed25519")
# Host key algorithms to ask for in place of a known `ssh-rsa` key (RSA keys sign with SHA-2).
_RSA_ALGORITHMS = ("rsa-sha2-512", "rsa-sha2-256", "ssh-rsa")


def _known_hosts_file(source: str) -> str:
    return source[len("file ") :] if source.startswith("file ") else "the configured known_hosts"


def prefer_known_key_types(transport: paramiko.Transport, hop: SshHop) -> None:
    """Ask the server first for a host key of a type on file, as OpenSSH orders HostKeyAlgorithms:
    a host with an Ed25519 and an RSA key, whose Ed25519 key alone is known, must offer that one."""
    options = transport.get_security_options()
    wanted: list[str] = []
    for key_type in known_hosts.known_key_types(hop.known_hosts, hop.key_name):
        for algorithm in _RSA_ALGORITHMS if key_type == "ssh-rsa" else (key_type,):
            if algorithm in options.key_types and algorithm not in wanted:
                wanted.append(algorithm)
    if wanted:
        options.key_types = tuple(wanted) + tuple(t for t in options.key_types if t not in wanted)


def check_host_key(transport: paramiko.Transport, hop: SshHop, position: str) -> None:
    """Raise HostKeyError unless the key the server offered is on file for the hop."""
    key = transport.get_remote_server_key()
    offered = f"{key.get_name()} {known_hosts.fingerprint(key.get_base64())}"
    source, name = hop.known_hosts_source, hop.key_name
    verdict = known_hosts.verdict(hop.known_hosts, name, key.get_name(), key.get_base64())
    if verdict is known_hosts.HostKeyVerdict.KNOWN:
        return
    file = _known_hosts_file(source)
    if verdict is known_hosts.HostKeyVerdict.REVOKED:
        raise HostKeyError(
            f"host key of {position} {name} ({offered}) is marked @revoked in {source}; refusing to connect: "
            "ask the site's admins for the host's current key"
        )
    if verdict is known_hosts.HostKeyVerdict.CHANGED:
        on_file = ", ".join(
            f"{e.key_type} {known_hosts.fingerprint(e.key_base64)}"
            for e in known_hosts.entries_for(hop.known_hosts, name)
            if e.marker is None
        )
        raise HostKeyError(
            f"host key of {position} {name} CHANGED: the server offered {offered}, {source} has {on_file}. "
            "Refusing to connect: ask the site's admins whether the host was re-keyed, then update the entry "
            f"(`ssh-keygen -R '{name}' -f {file}`, then add the new key)"
        )
    raise HostKeyError(
        f"host key of {position} {name} ({offered}) is not in {source}; Atlas never trusts a key on first use, "
        "whatever StrictHostKeyChecking says. Check the fingerprint with the site's admins and add it to "
        f"{file} (`ssh-keyscan -p {hop.port} {hop.host_key_alias or hop.host}`, verified out of band)"
    )


def _key_classes() -> tuple[type[paramiko.PKey], ...]:
    return (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey)


def load_private_key(endpoint: SshEndpoint) -> paramiko.PKey:
    """The target's own key from secret text or a file; errors never include key material."""
    what = (
        "the private key from secret config"
        if endpoint.private_key
        else f"private key file {endpoint.private_key_file}"
    )
    for key_class in _key_classes():
        try:
            if endpoint.private_key is not None:
                return key_class.from_private_key(io.StringIO(endpoint.private_key), password=endpoint.passphrase)
            if endpoint.private_key_file is not None:
                return key_class.from_private_key_file(endpoint.private_key_file, password=endpoint.passphrase)
        except paramiko.PasswordRequiredException:
            raise SshAuthError(
                f"{what} is encrypted: set private_key_passphrase (as a secret) for {endpoint.address}"
            ) from None
        except FileNotFoundError:
            raise SshAuthError(f"{what} does not exist; fix private_key_file for {endpoint.address}") from None
        except PermissionError:
            raise SshAuthError(f"{what} cannot be read (permission denied)") from None
        except (paramiko.SSHException, ValueError):
            continue  # not this key type (or a wrong passphrase): try the next
    if endpoint.private_key is None and endpoint.private_key_file is None:
        raise SshAuthError(f"no private key configured for {endpoint.address}: set private_key or private_key_file")
    raise SshAuthError(f"{what} is not an Ed25519, ECDSA or RSA key that paramiko can read, or its passphrase is wrong")


def _load_identity_file(path: Path) -> paramiko.PKey | str:
    """An IdentityFile's key, or why it cannot be used without asking anyone."""
    for key_class in _key_classes():
        try:
            return key_class.from_private_key_file(str(path))
        except paramiko.PasswordRequiredException:
            return f"{path} is encrypted and Atlas never prompts: add it to your agent (`ssh-add {path}`)"
        except (FileNotFoundError, IsADirectoryError):
            return ""
        except PermissionError:
            return f"{path} cannot be read (permission denied)"
        except (paramiko.SSHException, ValueError):
            continue
    return f"{path} is not an Ed25519, ECDSA or RSA key paramiko can read"


@dataclass(frozen=True)
class Credential:
    """A key to offer a server, and how messages name it (never the key)."""

    described: str
    key: paramiko.PKey


@dataclass
class OfferedKeys:
    """The keys one hop is offered, in order, and why others were left out (for a refusal's message)."""

    keys: list[Credential] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)

    def describe(self) -> str:
        """The keys offered and why others were not: `agent key ED25519 SHA256:... (me@laptop); ...`."""
        return "; ".join([c.described for c in self.keys] + self.left_out) or "nothing"


class KeyRing:
    """The agents one login opens (each asked once for its keys, kept open while it signs) and the
    key files read for it; closed when the route is up."""

    def __init__(self) -> None:
        self._agents: dict[str, tuple[list[paramiko.PKey], str]] = {}  # by socket path
        self._open: list[paramiko.agent.AgentSSH] = []

    def agent_keys(self, spec: str | None) -> tuple[list[paramiko.PKey], str]:
        """The agent's keys, or [] and why there are none."""
        location = agent_location(spec)
        if location is None:
            return [], ""
        key = location.path or location.described
        if key not in self._agents:
            agent, why = open_agent(location)
            if agent is None:
                self._agents[key] = ([], why)
            else:
                self._open.append(agent)
                keys: list[paramiko.PKey] = list(agent.get_keys())
                self._agents[key] = (keys, "" if keys else f"the ssh-agent at {location.described} holds no key")
        return self._agents[key]

    def close(self) -> None:
        for agent in self._open:
            close_agent(agent)
        self._open.clear()


def _identity_paths(hop: SshHop) -> list[Path]:
    named = hop.identity_files or DEFAULT_IDENTITY_FILES
    return [Path(os.path.expanduser(p)) for p in named]


def credentials(hop: SshHop, endpoint: SshEndpoint, ring: KeyRing, is_login: bool) -> OfferedKeys:
    """The keys to offer `hop`, in the order they are tried."""
    found = OfferedKeys()
    if is_login and endpoint.has_own_key:
        own = load_private_key(endpoint)
        found.keys.append(Credential(f"the target's key ({endpoint.private_key_file or 'secret'})", own))
        return found
    agent_keys, why = ring.agent_keys(hop.agent)
    if why:
        found.left_out.append(why)
    found.keys += [Credential(f"agent key {describe_key(k)}", k) for k in agent_keys]
    paths = _identity_paths(hop)
    read = 0
    for path in paths:
        loaded = _load_identity_file(path)
        if isinstance(loaded, str):
            if loaded:
                found.left_out.append(loaded)
            continue
        read += 1
        if not any(c.key.get_base64() == loaded.get_base64() for c in found.keys):
            found.keys.append(Credential(f"{path} ({describe_key(loaded)})", loaded))
    if not read and not any(path.exists() for path in paths):
        found.left_out.append(f"no key file ({', '.join(str(p) for p in paths)} not there)")
    if not is_login and endpoint.has_own_key:
        own = load_private_key(endpoint)
        if not any(c.key.get_base64() == own.get_base64() for c in found.keys):
            found.keys.append(Credential(f"the target's key ({endpoint.private_key_file or 'secret'})", own))
    return found


@contextmanager
def key_ring() -> Iterator[KeyRing]:
    ring = KeyRing()
    try:
        yield ring
    finally:
        ring.close()
