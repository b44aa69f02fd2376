"""The route to a login node over paramiko: directly, or hop by hop through ProxyJump's jump hosts.

Each hop is a paramiko Transport whose socket is the previous hop's `direct-tcpip` channel (what
`ssh -J` asks a bastion for): the login node's session is end-to-end encrypted, the bastion sees
only bytes. Every hop's host key is checked before any key is offered to it; each failure names
the hop (its alias, address and place on the route) and the fix: a jump host that cannot be
reached or will not forward, a key refused by every hop's rules, a second factor asked for (Atlas
never prompts: the fix is a master connection, master.py).
"""

from __future__ import annotations

import logging
import socket
from typing import TYPE_CHECKING

from infra.hpc.remote import SshEndpoint, SshHop
from infra.hpc.ssh.errors import SecondFactorError, SshAuthError, SshConnectError
from infra.hpc.ssh.keys import KeyRing, check_host_key, credentials, key_ring, prefer_known_key_types

if TYPE_CHECKING:
    import paramiko
else:
    from infra.hpc.ssh.lazy_paramiko import paramiko

log = logging.getLogger(__name__)

# What an SSH server's channel-open refusal codes mean (RFC 4254, 5.1).
_OPEN_FAILURES = {1: "administratively prohibited", 2: "connect failed", 3: "unknown channel type", 4: "no resources"}


def _position(index: int, hops: list[SshHop]) -> str:
    hop = hops[index]
    if index == len(hops) - 1:
        return f"the login node {hop.label}"
    return f"jump host {hop.label} (hop {index + 1} of {len(hops) - 1} on the way to {hops[-1].label})"


def _tcp(hop: SshHop, position: str, endpoint: SshEndpoint) -> socket.socket:
    try:
        sock = socket.create_connection((hop.host, hop.port), timeout=endpoint.connect_timeout_s)
    except OSError as error:
        raise SshConnectError(
            f"cannot reach {position}: {error.strerror or error or type(error).__name__}; check that it is up and "
            "reachable from here (its HostName and Port in your ssh config, or the target's host and port)"
        ) from None
    # Each command is a few small packets: with Nagle's algorithm on, one waits for the server's
    # delayed ACK, 40 ms a command. OpenSSH's client turns it off too.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _through(previous: paramiko.Transport, hop: SshHop, position: str, before: str, timeout: float) -> paramiko.Channel:
    try:
        return previous.open_channel("direct-tcpip", (hop.host, hop.port), ("127.0.0.1", 0), timeout=timeout)
    except paramiko.ChannelException as refused:
        reason = _OPEN_FAILURES.get(refused.code, f"code {refused.code}")
        raise SshConnectError(
            f"{before} would not open a connection to {position} ({reason}: {refused.text or 'no reason given'}); "
            f"check that {hop.host}:{hop.port} is the address the jump host reaches it at (HostName and Port in "
            "your ssh config) and that the site lets you forward to it (AllowTcpForwarding, PermitOpen)"
        ) from None
    except (paramiko.SSHException, OSError, EOFError) as error:
        raise SshConnectError(
            f"{before} dropped while connecting on to {position}: {error or type(error).__name__}"
        ) from None


def _authenticate(transport: paramiko.Transport, hop: SshHop, position: str, endpoint: SshEndpoint,
                  ring: KeyRing, is_login: bool) -> None:
    offered = credentials(hop, endpoint, ring, is_login)
    if not offered.keys:
        raise SshAuthError(
            f"no key to offer {position}: {offered.describe()}. Start an agent and `ssh-add` your key, name a key "
            "with IdentityFile in your ssh config, or give the target private_key_file or a secret private_key"
        )
    refused = []
    for credential in offered.keys:
        try:
            remaining = transport.auth_publickey(hop.user, credential.key)
        except paramiko.BadAuthenticationType as error:
            raise SshAuthError(
                f"{position} takes no keys from {hop.user} (it allows {', '.join(error.allowed_types) or 'nothing'}); "
                "Atlas logs in with keys only: ask the site how to log in with a key"
            ) from None
        except paramiko.AuthenticationException:
            refused.append(credential.described)
            continue
        except (paramiko.SSHException, EOFError, OSError) as error:
            if not transport.is_active():
                why = error or type(error).__name__
                raise SshAuthError(
                    f"{position} closed the connection after {len(refused) + 1} key(s) ({why}; sshd's "
                    "MaxAuthTries): name the key it takes with IdentityFile (and IdentitiesOnly yes) or the "
                    "target's private_key_file"
                ) from None
            refused.append(f"{credential.described} (could not sign: {error or type(error).__name__})")
            continue
        if not remaining:
            return
        alias = endpoint.name or endpoint.host
        fix = (
            f"Open a master connection once (answering the prompt), then run again: `{endpoint.master_hint}`"
            if endpoint.control_path
            else "Open a master connection once and let Atlas use it: set ControlMaster auto and ControlPath for "
            f"{alias} in your ssh config, then `ssh -M -fN {alias}`"
        )
        raise SecondFactorError(
            f"{position} accepted {credential.described} for {hop.user} and then asks for "
            f"{' or '.join(remaining)}: a second factor, and Atlas never prompts. {fix}"
        )
    left_out = f" ({'; '.join(offered.left_out)})" if offered.left_out else ""
    raise SshAuthError(
        f"{position} refused every key offered to {hop.user}: {'; '.join(refused)}{left_out}. Authorize one of them "
        "there (its public half in ~/.ssh/authorized_keys), or `ssh-add` the key it takes; check the user too"
    )


def open_route(endpoint: SshEndpoint) -> list[paramiko.Transport]:
    """Log in to every hop in turn; the transports, the login node's last. Each hop's transport
    is kept alive (keepalive) and closed with the others when the connection is dropped."""
    hops = [*endpoint.jumps, endpoint.login_hop()]
    transports: list[paramiko.Transport] = []
    timeout = endpoint.connect_timeout_s
    try:
        with key_ring() as ring:
            for index, hop in enumerate(hops):
                position = _position(index, hops)
                if index == 0:
                    sock: socket.socket | paramiko.Channel = _tcp(hop, position, endpoint)
                else:
                    sock = _through(transports[-1], hop, position, _position(index - 1, hops), timeout)
                transport = paramiko.Transport(sock)
                transports.append(transport)
                transport.banner_timeout = timeout
                transport.auth_timeout = timeout
                transport.channel_timeout = timeout
                prefer_known_key_types(transport, hop)
                try:
                    transport.start_client(timeout=timeout)
                except (paramiko.SSHException, OSError, EOFError) as error:
                    raise SshConnectError(
                        f"no SSH session with {position}: {error or type(error).__name__}; check its HostName and "
                        "Port (is an SSH server listening there?)"
                    ) from None
                check_host_key(transport, hop, position)
                _authenticate(transport, hop, position, endpoint, ring, is_login=index == len(hops) - 1)
                transport.set_keepalive(endpoint.keepalive_s)
    except BaseException:
        for transport in reversed(transports):
            transport.close()
        raise
    log.debug("ssh: logged in to %s", endpoint.route)
    return transports
