"""The connection pool: one paramiko connection per (host, port, user) per process, reconnected when dropped.

Every provider method asks `connection(endpoint)`: Pulumi pickles dynamic providers into state,
so they hold no live connection, and all resources one provider process serves share one.
"""

from __future__ import annotations

import logging
import socket
import threading
from collections import Counter
from typing import TYPE_CHECKING

from infra.hpc.remote import SshEndpoint
from infra.hpc.ssh.errors import HostKeyError, SshAuthError, SshConnectError
from infra.hpc.ssh.keys import host_key_name, load_host_keys, load_private_key, reject_with_source

if TYPE_CHECKING:
    import paramiko
else:
    from infra.hpc.ssh.lazy_paramiko import paramiko

log = logging.getLogger(__name__)

# Commands running at once on one connection. OpenSSH's sshd refuses a connection's session past
# MaxSessions (10 unless the site lowers it, and then Atlas comes down to it), and the SFTP
# subsystem holds one: 8 leaves room for it and for a closed session sshd has not yet counted
# off. Past the limit, a command waits for a slot.
MAX_COMMAND_SESSIONS = 8


# Connections opened per (host, port, user) in this process: the bench and tests read it.
CONNECTIONS_OPENED: Counter[tuple[str, int, str]] = Counter()
# Why each open connection was closed, per (host, port, user) and reason: a test that counts
# logins says which reconnect it did not expect.
CONNECTIONS_DROPPED: Counter[tuple[tuple[str, int, str], str]] = Counter()


class PooledConnection:
    """One SSH client per endpoint, reconnected when its transport has dropped."""

    def __init__(self, endpoint: SshEndpoint) -> None:
        self.endpoint = endpoint
        self._lock = threading.RLock()
        # paramiko's SFTPClient is not safe for concurrent requests, and the engine runs
        # several resources' operations at once in one provider process: one at a time.
        self.sftp_lock = threading.Lock()
        # Commands' sessions open now, and how many may be: MAX_COMMAND_SESSIONS, or fewer once
        # sshd has refused one (the site's MaxSessions, found by meeting it).
        self.sessions = threading.Condition()
        self.open_sessions = 0
        self.session_limit = MAX_COMMAND_SESSIONS
        self._client: paramiko.SSHClient | None = None
        self._sftp: paramiko.SFTPClient | None = None

    def _connect(self) -> paramiko.SSHClient:
        ep = self.endpoint
        client = paramiko.SSHClient()
        load_host_keys(client, ep.known_hosts, ep.known_hosts_source)
        client.set_missing_host_key_policy(reject_with_source(ep.known_hosts_source))
        pkey = load_private_key(ep)
        try:
            client.connect(
                hostname=ep.host,
                port=ep.port,
                username=ep.user,
                pkey=pkey,
                look_for_keys=False,
                allow_agent=False,
                timeout=ep.connect_timeout_s,
                banner_timeout=ep.connect_timeout_s,
                auth_timeout=ep.connect_timeout_s,
                channel_timeout=ep.connect_timeout_s,
            )
        except paramiko.BadHostKeyException as error:
            client.close()
            raise HostKeyError(
                f"host key of {host_key_name(ep.host, ep.port)} CHANGED: the server offered "
                f"{error.key.get_name()} SHA256:{error.key.fingerprint.split(':', 1)[-1]}, {ep.known_hosts_source} "
                f"has SHA256:{error.expected_key.fingerprint.split(':', 1)[-1]}. Refusing to connect: ask the "
                "cluster's admins whether the host was re-keyed, then update the known_hosts entry"
            ) from None
        except HostKeyError:
            client.close()
            raise
        except paramiko.AuthenticationException as error:
            client.close()
            raise SshAuthError(
                f"{ep.address} refused the configured key ({error}); check that its public half is in "
                "~/.ssh/authorized_keys on the login node and that user is right"
            ) from None
        except (OSError, paramiko.SSHException, EOFError) as error:
            client.close()
            raise SshConnectError(
                f"cannot connect to {ep.address}: {error or type(error).__name__}; check host, port and "
                "that the login node is reachable from here"
            ) from None
        transport = client.get_transport()
        if transport is not None:
            transport.set_keepalive(ep.keepalive_s)
            # Each command is a few small packets (channel open, exec, EOF, close): with Nagle's
            # algorithm on, one waits for the server's delayed ACK, 40 ms a command. OpenSSH's
            # client turns it off too.
            if isinstance(transport.sock, socket.socket):
                transport.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        CONNECTIONS_OPENED[ep.pool_key] += 1
        log.debug("ssh: connected to %s", ep.address)
        return client

    def client(self) -> paramiko.SSHClient:
        with self._lock:
            client = self._client
            transport = client.get_transport() if client is not None else None
            if client is None or transport is None or not transport.is_active():
                ended = transport.get_exception() if transport is not None else None
                self._drop_locked(f"the transport was no longer active ({ended!r})")
                client = self._connect()
                self._client = client
            return client

    def transport(self) -> paramiko.Transport:
        transport = self.client().get_transport()
        if transport is None:  # pragma: no cover - client() just made it active
            raise SshConnectError(f"no transport to {self.endpoint.address}")
        return transport

    def open_session(self) -> paramiko.Channel:
        """A session channel, one open at a time: paramiko keeps a failed open's reason in one
        slot per transport, so two opens refused at once can swap it or lose it (the loser sees
        a bare "Unable to open channel.", as if the connection had failed)."""
        with self._lock:
            return self.transport().open_session(timeout=self.endpoint.connect_timeout_s)

    def is_active(self) -> bool:
        """Whether the connection is up, without reconnecting."""
        with self._lock:
            transport = self._client.get_transport() if self._client is not None else None
            return transport is not None and transport.is_active()

    def sftp(self) -> paramiko.SFTPClient:
        with self._lock:
            client = self.client()
            channel = self._sftp.get_channel() if self._sftp is not None else None
            if self._sftp is None or channel is None or channel.closed:
                self._sftp = client.open_sftp()
            return self._sftp

    def _drop_locked(self, why: str) -> None:
        if self._client is not None:
            CONNECTIONS_DROPPED[self.endpoint.pool_key, why] += 1
        if self._sftp is not None:
            self._sftp.close()
        if self._client is not None:
            self._client.close()
        self._sftp = None
        self._client = None

    def drop(self, why: str) -> None:
        """Close the connection; the next use reconnects."""
        with self._lock:
            self._drop_locked(why)


_POOL: dict[tuple[str, int, str], PooledConnection] = {}
_POOL_LOCK = threading.Lock()


def connection(endpoint: SshEndpoint) -> PooledConnection:
    """The process's connection to this endpoint (created on first use, connected lazily)."""
    with _POOL_LOCK:
        pooled = _POOL.get(endpoint.pool_key)
        if pooled is not None and pooled.endpoint.identity() != endpoint.identity():
            # Same host and user, new key or known_hosts: never reuse a login made with the old ones.
            pooled.drop("a new key or known_hosts for the same login")
            pooled = None
        if pooled is None:
            pooled = PooledConnection(endpoint)
            _POOL[endpoint.pool_key] = pooled
        return pooled


def close_all() -> None:
    with _POOL_LOCK:
        for pooled in _POOL.values():
            pooled.drop("close_all")
        _POOL.clear()
