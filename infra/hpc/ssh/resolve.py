"""How a target's login node is reached: the target and the user's OpenSSH config, resolved once into an `SshEndpoint`.

The one place Atlas reads an OpenSSH config, for the stack program (at config load, so `pulumi
preview` refuses what cannot work) and for `atlas compare`, `monitor`, `nodes` and `doctor`:
- which config: the file the target names (`ssh_config`, as `ssh -F`: then nothing else), or
  `~/.ssh/config` (`~` is $HOME) followed by `/etc/ssh/ssh_config`; `Include` lines expanded
  here (paramiko's SSHConfig, which parses the rest, does not); the first value found wins;
- for the target's `host` (a `Host` alias or a name): HostName, User, Port, IdentityFile,
  IdentityAgent, HostKeyAlias, UserKnownHostsFile and GlobalKnownHostsFile, ProxyJump (every jump
  host resolved through the config in turn, its own ProxyJump included; `ProxyJump a,b` reaches b
  through a), and ControlPath (expanded by OpenSSH itself, `ssh -G`, as its `%C` hash is
  OpenSSH's own). What the target gives itself (port, user, key, known_hosts) wins, as
  `ssh -p -l -i` do;
- host keys: the target's known_hosts or known_hosts_file for the login node (all of it, as
  before), and for every other hop, or when the target gives none, the lines of the config's
  known_hosts files naming that host (only those go into Pulumi state). Every hop must have one:
  StrictHostKeyChecking is read and ignored, Atlas never trusts a key on first use;
- ProxyCommand is refused (ProxyJump says the same for `ssh -W`), so is a config that loops.

`resolve_endpoint` reads files only (the components call it when they build their inputs);
`check_endpoint` also asks this machine what a connection will need: that the first host
resolves (an unknown alias is named with the config's Host entries), that some key is there to
offer every hop (the target's, the agent's, an IdentityFile), unless a master connection already
runs at ControlPath. `target_connection` gives the pooled connection for a target.
"""

from __future__ import annotations

import difflib
import getpass
import glob
import logging
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infra.hpc.remote import AGENT_FROM_ENVIRONMENT, SshEndpoint, SshHop, host_key_name
from infra.hpc.ssh import known_hosts
from infra.hpc.ssh.errors import SshError
from infra.hpc.ssh.keys import DEFAULT_IDENTITY_FILES, credentials, key_ring
from infra.hpc.ssh.master import SSH_CLIENT, master_state
from infra.hpc.ssh.pool import PooledConnection, connection
from infra.hpc.target import HpcConfigError, HpcTarget
from infra.hpc.target_parser import HOST_NAME, IPV6, USER_NAME, load_known_hosts
from infra.provenance import refusal

if TYPE_CHECKING:
    import paramiko
else:
    from infra.hpc.ssh.lazy_paramiko import paramiko

log = logging.getLogger(__name__)

SYSTEM_CONFIG = Path("/etc/ssh/ssh_config")
USER_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")
MAX_JUMPS = 8
MAX_INCLUDE_DEPTH = 16
SSH_G_TIMEOUT_S = 10.0
_IPV4 = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")


class NoKeyError(HpcConfigError):
    """Nothing to log in to some hop with: no key of the target's, no agent with keys, no IdentityFile."""


def _home() -> Path:
    return Path(os.path.expanduser("~"))


@dataclass(frozen=True)
class ConfigFiles:
    """The OpenSSH config files read for a target, in order, and whether the target named them."""

    files: tuple[Path, ...]
    named: bool

    def describe(self) -> str:
        return " and ".join(str(f) for f in self.files) if self.files else "no ssh config (none found)"


def config_files(target: HpcTarget) -> ConfigFiles:
    if target.ssh_config is not None:
        return ConfigFiles((target.ssh_config,), named=True)
    found = [p for p in (_home() / ".ssh" / "config", SYSTEM_CONFIG) if p.is_file()]
    return ConfigFiles(tuple(found), named=False)


def _include_text(path: Path, key: str, base: Path, depth: int = 0) -> str:
    """A config file's text with its `Include` lines replaced by the files they name (globs in name
    order; relative paths under `base`: ~/.ssh for the user's config, /etc/ssh for the system's).

    The one difference from OpenSSH: an Include inside a Host block is read here as if its text
    stood there, so the lines after it in the including file belong to the included file's last
    Host block, where OpenSSH returns to the including block. Includes are usually first."""
    if depth > MAX_INCLUDE_DEPTH:
        raise HpcConfigError(
            f"{key}: {path}: Include nests deeper than {MAX_INCLUDE_DEPTH}; is a file including itself?"
        )
    try:
        text = path.read_text()
    except OSError as error:
        raise HpcConfigError(
            f"{key}: the ssh config {path} cannot be read ({error.strerror or error}); fix the file or the "
            "target's ssh_config"
        ) from None
    lines = []
    for line in text.splitlines():
        words = line.strip().split(None, 1)
        if len(words) == 2 and words[0].lower() == "include":
            for pattern in words[1].split():
                pattern = pattern.strip('"')
                full = os.path.expanduser(pattern)
                if not os.path.isabs(full):
                    full = str(base / full)
                for included in sorted(glob.glob(full)):
                    lines.append(_include_text(Path(included), key, base, depth + 1))
            continue
        lines.append(line)
    return "\n".join(lines) + "\n"


def load_config(files: ConfigFiles, key: str) -> paramiko.SSHConfig:
    config = paramiko.SSHConfig()
    for path in files.files:
        try:
            base = SYSTEM_CONFIG.parent if path == SYSTEM_CONFIG else _home() / ".ssh"
            config.parse(_include_text(path, key, base).splitlines())
        except paramiko.ssh_exception.ConfigParseError as error:
            raise HpcConfigError(f"{key}: the ssh config {path} cannot be parsed ({error}); fix that line") from None
    return config


def _lookup(config: paramiko.SSHConfig, name: str, files: ConfigFiles, key: str) -> Mapping[str, Any]:
    try:
        return config.lookup(name)
    except Exception as error:  # noqa: BLE001 (Match exec without invoke, a canonicalization failure...)
        raise HpcConfigError(
            f"{key}: {files.describe()} cannot be applied to {name!r} ({type(error).__name__}: {error}); "
            "Atlas reads Host and Match host/user blocks: simplify the block that matches it"
        ) from None


def _aliases(config: paramiko.SSHConfig) -> list[str]:
    return sorted(h for h in config.get_hostnames() if not any(ch in h for ch in "*?!"))


def _is_address(value: str) -> bool:
    return bool(HOST_NAME.match(value) or (":" in value and IPV6.match(value)))


def _expand_path(value: str, hop: tuple[str, int, str]) -> str:
    host, port, user = hop
    replaced = (
        value.replace("%%", "\0").replace("%d", str(_home())).replace("%u", getpass.getuser())
        .replace("%h", host).replace("%p", str(port)).replace("%r", user).replace("\0", "%")
    )
    return os.path.expanduser(replaced)


@dataclass(frozen=True)
class _Jump:
    user: str | None
    host: str
    port: int | None


def _jump_specs(value: str, where: str, key: str) -> list[_Jump]:
    """ProxyJump's `[user@]host[:port]` (or `ssh://[user@]host[:port]`) list, in order."""
    jumps = []
    for part in value.split(","):
        text = part.strip()
        if text.startswith("ssh://"):
            text = text[len("ssh://") :].rstrip("/")
        user, _, hostport = text.rpartition("@")
        host, port_text = hostport, ""
        if hostport.startswith("["):
            host, _, rest = hostport[1:].partition("]")
            port_text = rest[1:] if rest.startswith(":") else ""
        elif hostport.count(":") == 1:
            host, port_text = hostport.split(":")
        if not host or (port_text and not port_text.isdigit()):
            raise HpcConfigError(f"{key}: {where}: ProxyJump {value!r} is not `[user@]host[:port]`; fix that line")
        jumps.append(_Jump(user or None, host, int(port_text) if port_text else None))
    return jumps


class _Resolver:
    """One target's resolution: its config, read once, applied to every host on the route."""

    def __init__(self, target: HpcTarget, key: str, key_from_secret: bool) -> None:
        self.target = target
        self.key = key
        self.files = config_files(target)
        self.config = load_config(self.files, key)
        self.own_key = key_from_secret or target.private_key is not None or target.private_key_file is not None
        self.stack_known_hosts = load_known_hosts(target) if target.has_known_hosts else None

    def options(self, name: str) -> Mapping[str, Any]:
        return _lookup(self.config, name, self.files, self.key)

    def _where(self, name: str) -> str:
        return f"{self.files.describe()} (Host {name})"

    def _port(self, value: Any, name: str) -> int:
        text = str(value)
        if not text.isdigit() or not 1 <= int(text) <= 65535:
            raise HpcConfigError(f"{self.key}: {self._where(name)}: Port {text!r} is not a port number; fix that line")
        return int(text)

    def _hostname(self, options: Mapping[str, Any], name: str) -> str:
        value = str(options.get("hostname") or name)
        if not _is_address(value):
            if value == name:
                raise HpcConfigError(
                    f"{self.key}.host: {name!r} is not a host name or address, and {self.files.describe()} gives no "
                    f"HostName for it; write the login node's address, or add `Host {name}` with its HostName"
                )
            raise HpcConfigError(
                f"{self.key}: {self._where(name)}: HostName {value!r} is not a host name or address; fix that line"
            )
        return value

    def _user(self, value: Any, name: str) -> str:
        text = str(value)
        if not USER_NAME.match(text):
            raise HpcConfigError(f"{self.key}: {self._where(name)}: User {text!r} is not a login name; fix that line")
        return text

    def _refuse_proxy_command(self, options: Mapping[str, Any], name: str) -> None:
        if options.get("proxycommand") and not options.get("proxyjump"):
            raise HpcConfigError(
                f"{self.key}: {self._where(name)} sets ProxyCommand, which Atlas does not run (it would be a "
                "program of yours between Atlas and the host key check); write ProxyJump instead: "
                "`ProxyCommand ssh -W %h:%p bastion` is `ProxyJump bastion`"
            )

    def known_hosts_of(self, options: Mapping[str, Any], hop: tuple[str, int, str], name: str, alias: str | None,
                       position: str) -> tuple[str, str]:
        """The known_hosts lines for one host, and how messages name where they came from."""
        lookup = host_key_name(alias or hop[0], hop[1])
        if self.stack_known_hosts is not None and known_hosts.entries_for(self.stack_known_hosts, lookup):
            return known_hosts.lines_for(self.stack_known_hosts, [lookup]), self.target.known_hosts_source
        user_files = str(options.get("userknownhostsfile") or " ".join(USER_KNOWN_HOSTS)).split()
        global_files = str(options.get("globalknownhostsfile") or " ".join(GLOBAL_KNOWN_HOSTS)).split()
        paths = [_expand_path(p, hop) for p in (*user_files, *global_files) if p.lower() != "none"]
        text, sources = "", []
        for path in paths:
            try:
                lines = known_hosts.lines_for(Path(path).read_text(), [lookup])
            except OSError:
                continue
            if lines:
                text += lines
                sources.append(path)
        if not text:
            first = paths[0] if paths else str(_home() / ".ssh" / "known_hosts")
            raise HpcConfigError(
                f"{self.key}: no host key for {position} {lookup} in {', '.join(paths) or 'any known_hosts file'}"
                f"{' or the target' + chr(39) + 's known_hosts' if self.stack_known_hosts is not None else ''}; "
                "Atlas never trusts a key on first use, whatever StrictHostKeyChecking says: get it "
                f"(`ssh-keyscan -p {hop[1]} {alias or hop[0]}`), check its fingerprint with the site, add it to {first}"
            )
        return text, "file " + ", file ".join(sources)

    def agent_of(self, options: Mapping[str, Any]) -> str | None:
        value = options.get("identityagent")
        if value is None or str(value) == AGENT_FROM_ENVIRONMENT:
            return AGENT_FROM_ENVIRONMENT
        return None if str(value).lower() == "none" else str(value)

    def identity_files_of(self, options: Mapping[str, Any]) -> tuple[str, ...]:
        named = tuple(os.path.expanduser(str(p)) for p in options.get("identityfile") or ())
        if not named and self.agent_of(options) is None:
            # No agent and no IdentityFile: OpenSSH's default files, named as written (each process
            # that connects reads them from its own home).
            return DEFAULT_IDENTITY_FILES
        return named

    def route_to(self, name: str, user: str | None, port: int | None, override: list[_Jump] | None,
                 trail: tuple[str, ...]) -> list[SshHop]:
        """The jump hosts up to and including `name` (a jump host), each resolved through the config."""
        if len(trail) >= MAX_JUMPS or name in trail:
            raise HpcConfigError(
                f"{self.key}: ProxyJump in {self.files.describe()} goes {' -> '.join((*trail, name))}: a loop, or more "
                f"than {MAX_JUMPS} jump hosts; fix the ProxyJump lines"
            )
        options = self.options(name)
        self._refuse_proxy_command(options, name)
        before = self.jumps_of(options, override, (*trail, name), name)
        hostname = self._hostname(options, name)
        port = port or self._port(options.get("port", 22), name)
        user = user or (self._user(options["user"], name) if options.get("user") else getpass.getuser())
        alias = options.get("hostkeyalias")
        position = f"jump host {name}"
        text, source = self.known_hosts_of(options, (hostname, port, user), name, alias, position)
        return [
            *before,
            SshHop(
                host=hostname, port=port, user=user, known_hosts=text, known_hosts_source=source, name=name,
                host_key_alias=alias, identity_files=self.identity_files_of(options), agent=self.agent_of(options),
            ),
        ]

    def jumps_of(self, options: Mapping[str, Any], override: list[_Jump] | None, trail: tuple[str, ...],
                 name: str) -> list[SshHop]:
        if override is not None:
            specs = override
        else:
            value = options.get("proxyjump")
            if value is None or str(value).lower() == "none":
                return []
            specs = _jump_specs(str(value), self._where(name), self.key)
        *rest, last = specs
        return self.route_to(last.host, last.user, last.port, rest or None, trail)

    def control_path(self, options: Mapping[str, Any], user: str, port: int) -> str | None:
        if not options.get("controlpath") or str(options["controlpath"]).lower() == "none":
            return None
        ssh = shutil.which(SSH_CLIENT)
        if ssh is None:
            log.info("ssh: ControlPath is set for %s; without the OpenSSH client no master is used", self.target.host)
            return None
        user_file = _home() / ".ssh" / "config"
        config: list[str] = []
        if self.files.named:
            config = ["-F", str(self.files.files[0])]
        elif user_file.is_file():
            config = ["-F", str(user_file)]
        argv = [ssh, "-G", *config, "-p", str(port), "-l", user, self.target.host]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=SSH_G_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise HpcConfigError(
                f"{self.key}: `ssh -G` could not read ControlPath for {self.target.host} ({error})"
            ) from None
        for line in done.stdout.splitlines():
            word, _, value = line.partition(" ")
            if word == "controlpath":
                return None if value.strip().lower() == "none" else value.strip()
        if done.returncode != 0:
            raise HpcConfigError(
                f"{self.key}: OpenSSH cannot read {self.files.describe()} for {self.target.host} "
                f"({done.stderr.strip() or 'ssh -G failed'}); fix the config"
            )
        return None

    def unknown_host(self, host: str, port: int, name: str) -> HpcConfigError | None:
        """The refusal for a first hop that does not resolve here (None where it does): a HostName
        of the config, or a name that is no Host entry (with the entries there are, and the
        nearest)."""
        why = _resolves(host, port)
        if not why:
            return None
        if name and name != host:
            return HpcConfigError(
                f"{self.key}: the HostName {host!r} of {name} ({self.files.describe()}) does not resolve "
                f"here ({why}); fix it, or check this machine's DNS"
            )
        aliases = _aliases(self.config)
        near = difflib.get_close_matches(host, aliases, n=1)
        known = f" (its Host entries: {', '.join(aliases)})" if aliases else ""
        return HpcConfigError(
            f"{self.key}.host: {host!r} is no Host entry of {self.files.describe()}{known} and does not resolve "
            f"here ({why}); "
            + (f"did you mean {near[0]!r}? " if near else "")
            + "write a Host alias of your ssh config or the login node's address, or add "
            f"`Host {host}` with its HostName"
        )

    def endpoint(self) -> SshEndpoint:
        target, name = self.target, self.target.host
        options = self.options(name)
        self._refuse_proxy_command(options, name)
        jumps = self.jumps_of(options, None, (name,), name)
        hostname = self._hostname(options, name)
        port = target.port or self._port(options.get("port", 22), name)
        if target.user is not None:
            user = target.user
        elif options.get("user"):
            user = self._user(options["user"], name)
        else:
            # A name that is neither a Host entry nor an address says so first: the User it lacks follows.
            unknown = self.unknown_host(name, port, name) if hostname == name else None
            if unknown is not None:
                raise unknown
            raise HpcConfigError(
                f"{self.key}.user: not set, and {self.files.describe()} gives no User for {name}; set it "
                f"(`pulumi config set --path {self.key}.user <login name>`) or add `User <login name>` under "
                f"`Host {name}`"
            )
        alias = options.get("hostkeyalias")
        hop = (hostname, port, user)
        if self.stack_known_hosts is not None:
            # All of it, as before the ssh config was read (check_endpoint asks it has the host's key).
            text, source = self.stack_known_hosts, target.known_hosts_source
        else:
            text, source = self.known_hosts_of(options, hop, name, alias, "the login node")
        return SshEndpoint(
            host=hostname,
            port=port,
            user=user,
            known_hosts=text,
            known_hosts_source=source,
            private_key_file=str(target.private_key_file) if target.private_key_file is not None else None,
            private_key=target.private_key,
            passphrase=target.private_key_passphrase,
            name=name if name != hostname else "",
            host_key_alias=alias,
            jumps=tuple(jumps),
            identity_files=() if self.own_key else self.identity_files_of(options),
            agent=None if self.own_key else self.agent_of(options),
            control_path=self.control_path(options, user, port),
            ssh_config=str(target.ssh_config) if target.ssh_config is not None else None,
        )


def resolve_endpoint(target: HpcTarget, key: str = "atlas:hpc", *, key_from_secret: bool = False) -> SshEndpoint:
    """The endpoint of a target's login node: its config and known_hosts files read, nothing asked
    of the network or the agent. `key` is the target's config key (`atlas:hpc.satori`), which every
    error names; `key_from_secret`: its key arrives separately, as a Pulumi secret (then, as with
    private_key_file, only that key logs in to the login node)."""
    return _Resolver(target, key, key_from_secret).endpoint()


def refuse_real_route(provenance: str, endpoint: SshEndpoint, key: str) -> None:
    """`provenance: real` for a login route that starts on this machine's loopback is refused
    (infra/provenance.py: a stack may narrow a label, never make a stand-in real)."""
    why = refusal(provenance, endpoint.stand_in_facts())
    if why:
        raise HpcConfigError(
            f"{key}.provenance: {why}; say what stands in instead, e.g. `pulumi config set --path "
            f"{key}.provenance 'local stand-in: Slurm on this host'`, or leave it out"
        )


def _resolves(host: str, port: int) -> str:
    """Why `host` does not resolve here, or "" when it does."""
    if _IPV4.match(host) or ":" in host:
        return ""
    try:
        socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as error:
        return str(getattr(error, "strerror", None) or error)
    return ""


def check_endpoint(
    target: HpcTarget, key: str = "atlas:hpc", *, key_from_secret: bool = False, dns: bool = True
) -> SshEndpoint:
    """`resolve_endpoint`, then what this machine can tell before connecting: the login node's host
    key is on file, the first host on the route resolves (with `dns`; without, nothing is asked
    of the network), and some key is there to offer every hop (unless a master connection runs
    at ControlPath, which needs none). Raises HpcConfigError naming the key and the fix."""
    resolver = _Resolver(target, key, key_from_secret)
    endpoint = resolver.endpoint()
    login = endpoint.login_hop()
    if not known_hosts.entries_for(endpoint.known_hosts, login.key_name):
        raise HpcConfigError(
            f"{key}.known_hosts: {endpoint.known_hosts_source} has no key for {login.key_name}, the login node; Atlas "
            f"never trusts a key on first use: add its entry (`ssh-keyscan -p {login.port} "
            f"{login.host_key_alias or login.host}`, checked with the site)"
        )
    if endpoint.control_path is not None and master_state(endpoint)[0]:
        return endpoint
    hops = [*endpoint.jumps, endpoint.login_hop()]
    first = hops[0]
    unknown = resolver.unknown_host(first.host, first.port, first.name) if dns else None
    if unknown is not None:
        raise unknown
    with key_ring() as ring:
        for index, hop in enumerate(hops):
            is_login = index == len(hops) - 1
            try:
                offered = credentials(hop, endpoint, ring, is_login)
            except SshError as error:
                raise HpcConfigError(f"{key}: {error}") from None
            if not offered.keys:
                where = "the login node" if is_login else "jump host"
                hint = ""
                if endpoint.control_path is not None:
                    hint = f" (or open a master connection: `{endpoint.master_hint}`)"
                raise NoKeyError(
                    f"{key}: no key to log in to {where} {hop.label} with: {offered.describe()}. Start an "
                    "ssh-agent and `ssh-add` your key, name it with IdentityFile in your ssh config, or give the "
                    f"target private_key_file or a secret private_key{hint}"
                )
    return endpoint


def target_connection(target: HpcTarget, key: str = "atlas:hpc", *, check: bool = True) -> PooledConnection:
    """The pooled connection to a target's login node (connected on first use): what `atlas compare`,
    `monitor`, `nodes` and `doctor` log in with. With `check`, `check_endpoint`'s refusals come first."""
    endpoint = check_endpoint(target, key) if check else resolve_endpoint(target, key)
    return connection(endpoint)


def describe_route(endpoint: SshEndpoint) -> Sequence[str]:
    """One line per hop, as `atlas doctor` may list them: `jump host <alias> (<user@host:port>)`, ..."""
    lines = [f"jump host {hop.label}" for hop in endpoint.jumps]
    lines.append(f"login node {endpoint.login_hop().label}")
    if endpoint.control_path is not None:
        lines.append(f"master connection (ControlPath) {endpoint.control_path}")
    return lines
