"""The connection pool: one login per (host, port, user) per process, reconnected when dropped.

Every provider method asks `connection(endpoint)`: Pulumi pickles dynamic providers into state,
so they hold no live connection, and all resources one provider process serves share one.
A login is either paramiko's (route.py: directly or through the jump hosts, with the target's
key or the agent's) or, where the endpoint names a ControlPath and a master connection answers
there, the user's own OpenSSH master connection (master.py); each (re)connection chooses again,
so a master opened after a refusal is used by the next attempt.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import TYPE_CHECKING

from infra.hpc.remote import SshEndpoint
from infra.hpc.ssh.errors import SshConnectError
from infra.hpc.ssh.master import MasterLink, master_state
from infra.hpc.ssh.route import open_route

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
    """One login per endpoint, reconnected when it has dropped."""

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
        # paramiko's route: every hop's transport, the login node's last.
        self._transports: list[paramiko.Transport] = []
        self._master: MasterLink | None = None
        self._sftp: paramiko.SFTPClient | None = None

    def _connect_locked(self) -> None:
        ep = self.endpoint
        if ep.control_path is not None:
            running, why = master_state(ep)
            if running:
                self._master = MasterLink(ep)
                CONNECTIONS_OPENED[ep.pool_key] += 1
                log.debug("ssh: %s through the master connection at %s", ep.route, ep.control_path)
                return
            log.debug("ssh: %s; logging in to %s directly", why, ep.route)
        self._transports = open_route(ep)
        CONNECTIONS_OPENED[ep.pool_key] += 1

    def _alive_locked(self) -> bool:
        if self._master is not None:
            return True
        return bool(self._transports) and all(t.is_active() for t in self._transports)

    def _ensure_locked(self) -> None:
        if not self._alive_locked():
            if self._master is not None or self._transports:
                ended = [repr(t.get_exception()) for t in self._transports if not t.is_active()]
                self._drop_locked(f"the transport was no longer active ({', '.join(ended)})")
            self._connect_locked()

    def master(self) -> MasterLink | None:
        """The master connection carrying this login, or None when paramiko does (connects if needed)."""
        with self._lock:
            self._ensure_locked()
            return self._master

    def transport(self) -> paramiko.Transport:
        """The login node's paramiko transport (connects if needed); a login through a master
        connection has none."""
        with self._lock:
            self._ensure_locked()
            if self._master is not None:
                raise SshConnectError(
                    f"{self.endpoint.route} is reached through the master connection at {self.endpoint.control_path}: "
                    "it has no paramiko transport"
                )
            return self._transports[-1]

    def open_session(self) -> paramiko.Channel:
        """A session channel, one open at a time: paramiko keeps a failed open's reason in one
        slot per transport, so two opens refused at once can swap it or lose it (the loser sees
        a bare "Unable to open channel.", as if the connection had failed)."""
        with self._lock:
            return self.transport().open_session(timeout=self.endpoint.connect_timeout_s)

    def is_active(self) -> bool:
        """Whether the connection is up, without reconnecting."""
        with self._lock:
            return self._alive_locked()

    def sftp(self) -> paramiko.SFTPClient:
        with self._lock:
            self._ensure_locked()
            if self._master is not None:
                if self._sftp is None or not self._master.sftp_running():
                    self._close_sftp_locked()
                    self._sftp = self._master.open_sftp()
                return self._sftp
            channel = self._sftp.get_channel() if self._sftp is not None else None
            if self._sftp is None or channel is None or channel.closed:
                self._sftp = paramiko.SFTPClient.from_transport(self._transports[-1])
                if self._sftp is None:  # pragma: no cover - paramiko returns None only when the open failed
                    raise SshConnectError(f"{self.endpoint.route} would not open an SFTP session")
            return self._sftp

    def _close_sftp_locked(self) -> None:
        if self._sftp is not None:
            self._sftp.close()
        self._sftp = None
        if self._master is not None:
            self._master.close_sftp()

    def _drop_locked(self, why: str) -> None:
        if self._transports or self._master is not None:
            CONNECTIONS_DROPPED[self.endpoint.pool_key, why] += 1
        self._close_sftp_locked()
        for transport in reversed(self._transports):
            transport.close()
        self._transports = []
        self._master = None

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
            # Same host and user, new key, known_hosts or route: never reuse a login made with the old ones.
            pooled.drop("a new key, known_hosts or route for the same login")
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
