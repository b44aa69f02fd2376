"""SSH to a cluster's login node: one pooled paramiko connection per (host, port, user).

Why a module-level pool: Pulumi pickles dynamic providers into state, so they must hold no
live objects; every provider method asks `connection(endpoint)` instead, and all resources
served by one provider process (a sweep of 50 jobs) share one SSH connection per host.
OpenSSH's own per-command cost (TCP, key exchange, login) is paid once.

Rules kept here, each from a failure seen in other tools (Pulumi's command provider, submitit, Toil):
- host keys only from the configured known_hosts; an unknown or changed key is refused
  with the host and the known_hosts source named (never AutoAddPolicy);
- credentials arrive as values (Pulumi secrets), are never logged, never in a repr;
- connect, banner and auth timeouts, transport keepalive;
- every command runs as `bash -lc <shlex-quoted>` so the scheduler's profile is loaded, and
  what the profile prints (a site's banner, quota notices, module chatter) is cut off at a
  marker the command prints first, so it can never be read as a job id or a state;
- a command's output is capped (MAX_OUTPUT_BYTES): a runaway answer is an error, not memory;
- a command abandoned while output still streams (the cap, a deadline) closes its channel only:
  the reader waits on an event, not paramiko's OS pipe, which close() shut under the transport
  thread and ended the whole login;
- stdout and stderr are read fully before the exit status;
- a command is retried after a dropped connection only when the caller says it is safe;
- at most MAX_COMMAND_SESSIONS commands run at once on a connection, fewer once sshd refuses a
  session (its MaxSessions): a refused session waits for a slot, it is not a lost connection.
"""

from __future__ import annotations

import hashlib
import io
import logging
import secrets
import shlex
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import PurePosixPath
from types import ModuleType
from typing import TYPE_CHECKING, Any, NoReturn

# The model lives in remote.py (no paramiko there); callers reach it as `ssh.SshEndpoint` too.
from infra.hpc.remote import RemoteResult as RemoteResult
from infra.hpc.remote import SshEndpoint as SshEndpoint

if TYPE_CHECKING:
    import paramiko
else:

    class _ImportedOnFirstUse(ModuleType):
        """paramiko, imported when first used. The Pulumi program imports this module for its
        types and never connects (its dynamic providers do, in their own process), and paramiko
        with its cryptography is a fifth of the program's start-up."""

        def __getattr__(self, name: str) -> Any:
            import paramiko as module

            globals()["paramiko"] = module
            return getattr(module, name)

    paramiko = _ImportedOnFirstUse("paramiko")

log = logging.getLogger(__name__)

DEFAULT_COMMAND_TIMEOUT_S = 120.0
SAFE_RETRIES = 2  # extra attempts for commands that are safe to repeat
EXIT_EOF_GRACE_S = 5.0  # how long output may trail the exit status (see _read_all)
# Far above any scheduler answer Atlas asks for (even `squeue --json` of thousands of jobs is a
# few MiB; files travel over SFTP, not through commands): more is a runaway or hostile answer.
MAX_OUTPUT_BYTES = 64 * 2**20
# Commands running at once on one connection. OpenSSH's sshd refuses a connection's session past
# MaxSessions (10 unless the site lowers it, and then Atlas comes down to it), and the SFTP
# subsystem holds one: 8 leaves room for it and for a closed session sshd has not yet counted
# off. Past the limit, a command waits for a slot.
MAX_COMMAND_SESSIONS = 8


class SshError(Exception):
    """Base of everything this module raises; messages name the host and the fix."""


class HostKeyError(SshError):
    """The server's host key is unknown or differs from the configured known_hosts."""


class SshAuthError(SshError):
    """The key was refused, or could not be loaded."""


class SshConnectError(SshError):
    """The login node could not be reached."""


class ConnectionLostError(SshError):
    """The connection dropped while a command was in flight: it may or may not have run."""

    def __init__(self, message: str, command: str) -> None:
        super().__init__(message)
        self.command = command


class RemoteTimeoutError(SshError):
    def __init__(self, message: str, command: str) -> None:
        super().__init__(message)
        self.command = command


class RemoteOutputTooLargeError(SshError):
    """A command printed more than MAX_OUTPUT_BYTES; it was abandoned, its output discarded."""

    def __init__(self, message: str, command: str) -> None:
        super().__init__(message)
        self.command = command


class RemoteCommandError(SshError):
    """A remote command exited non-zero; carries everything needed to see why."""

    def __init__(self, command: str, exit_code: int, stdout: str, stderr: str, host: str = "") -> None:
        self.command = command
        self.exit_code = exit_code
        self.stdout = stdout
        self.stderr = stderr
        self.host = host
        where = f" on {host}" if host else ""
        detail = (stderr.strip() or stdout.strip() or "(no output)")[-2000:]
        super().__init__(f"`{command}`{where} exited with {exit_code}: {detail}")


# Connections opened per (host, port, user) in this process: the bench and tests read it.
CONNECTIONS_OPENED: Counter[tuple[str, int, str]] = Counter()
# Why each open connection was closed, per (host, port, user) and reason: a test that counts
# logins says which reconnect it did not expect.
CONNECTIONS_DROPPED: Counter[tuple[tuple[str, int, str], str]] = Counter()


def _reject_with_source(source: str) -> paramiko.MissingHostKeyPolicy:
    """RejectPolicy, with a message that says which known_hosts was consulted and how to fix it."""

    class RejectWithSource(paramiko.RejectPolicy):
        def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> NoReturn:
            raise HostKeyError(
                f"host key of {hostname} ({key.get_name()} SHA256:{key.fingerprint.split(':', 1)[-1]}) is not in "
                f"{source}; Atlas never trusts a key on first use. Check the key with the cluster's admins "
                "and add it (`ssh-keyscan -p PORT HOST`, verified out of band) to the configured known_hosts"
            )

    return RejectWithSource()


def _host_key_name(host: str, port: int) -> str:
    return host if port == 22 else f"[{host}]:{port}"


def _load_host_keys(client: paramiko.SSHClient, text: str, source: str) -> None:
    keys = client.get_host_keys()
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            entry = paramiko.hostkeys.HostKeyEntry.from_line(stripped, lineno=number)
        except (paramiko.SSHException, ValueError) as error:
            raise HostKeyError(f"{source}: line {number} cannot be read as a host key ({error})") from None
        if entry is None or entry.key is None:
            continue
        for name in entry.hostnames:
            keys.add(name, entry.key.get_name(), entry.key)


def _key_classes() -> tuple[type[paramiko.PKey], ...]:
    return (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey)


def load_private_key(endpoint: SshEndpoint) -> paramiko.PKey:
    """The login key from secret text or a file; errors never include key material."""
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
        _load_host_keys(client, ep.known_hosts, ep.known_hosts_source)
        client.set_missing_host_key_policy(_reject_with_source(ep.known_hosts_source))
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
                f"host key of {_host_key_name(ep.host, ep.port)} CHANGED: the server offered "
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


def login_shell_command(command: str, marker: str) -> str:
    """There is no login-shell flag in SSH: `bash -lc` loads profile.lsf and module setups.

    The profile runs before the command, and whatever it prints arrives first: the command
    starts by printing `marker` on stdout and stderr, and `after_marker` keeps what follows."""
    begin = f"printf '%s\\n' {marker} && printf '%s\\n' {marker} >&2 && {{ {command}\n}}"
    return f"bash -lc {shlex.quote(begin)}"


def new_marker() -> str:
    # Random per command: no banner, file or job output can contain it by chance or design.
    return f"atlas-output-{secrets.token_hex(8)}"


def after_marker(output: bytes, marker: str) -> bytes:
    """The command's own output: what follows the marker's line. Without the marker (the
    profile exited before the command ran), everything, so the profile's complaint is seen."""
    _profile, found, tail = output.partition(marker.encode() + b"\n")
    return tail if found else output


class _OutputArrived(threading.Event):
    """Set the moment output or the EOF arrives on either of a channel's buffers, with no file
    descriptor. paramiko's own wake-up (`channel.fileno()`, for select) is an OS pipe that
    `Channel.close()` shuts while the transport thread may still be writing to it: a command
    abandoned mid-output (too much of it, a deadline) then ended the whole login with EBADF on
    the transport, cutting every other command on it (paramiko issues 692 and 2271, unfixed).

    The buffers call set() on output and clear() when read empty; one buffer read empty says
    nothing of the other, so only the reader clears, with arm(), before it looks at both. The
    reader's wait() also returns after its timeout, to look at the exit status, the connection
    and the deadline: no sleep adds its latency to every command."""

    def __init__(self, channel: paramiko.Channel) -> None:
        super().__init__()
        channel.in_buffer.set_event(self)
        channel.in_stderr_buffer.set_event(self)

    def clear(self) -> None:
        pass

    def arm(self) -> None:
        super().clear()


def _read_all(channel: paramiko.Channel, command: str, deadline: float, host: str) -> tuple[bytes, bytes, int]:
    stdout, stderr = bytearray(), bytearray()
    exited_at: float | None = None
    pause = 0.001
    arrived = _OutputArrived(channel)
    while True:
        arrived.arm()
        progressed = False
        if channel.recv_ready():
            stdout += channel.recv(65536)
            progressed = True
        if channel.recv_stderr_ready():
            stderr += channel.recv_stderr(65536)
            progressed = True
        if len(stdout) + len(stderr) > MAX_OUTPUT_BYTES:
            channel.close()
            raise RemoteOutputTooLargeError(
                f"`{command}` on {host} printed more than {MAX_OUTPUT_BYTES // 2**20} MiB; it was abandoned "
                "and its output not read (a scheduler answering this much is misconfigured or hostile: "
                "ask the site's admins)",
                command,
            )
        if progressed:
            pause = 0.001
            continue
        # The exit status can arrive before the last of the output: OpenSSH sends it when the
        # command exits, while what the command wrote may still be on its way. The output is
        # complete at the channel's EOF (or close), which follows. A command that leaves a
        # background process holding its stdout open never sends EOF: after EXIT_EOF_GRACE_S,
        # what has arrived is the output.
        if channel.exit_status_ready():
            if exited_at is None:
                exited_at = time.monotonic()
            if channel.eof_received or channel.closed or time.monotonic() - exited_at > EXIT_EOF_GRACE_S:
                while channel.recv_ready():
                    stdout += channel.recv(65536)
                while channel.recv_stderr_ready():
                    stderr += channel.recv_stderr(65536)
                return bytes(stdout), bytes(stderr), channel.recv_exit_status()
        transport = channel.get_transport()
        if channel.closed or transport is None or not transport.is_active():
            raise ConnectionLostError(
                f"the SSH connection to {host} dropped while `{command}` ran; it may or may not have run",
                command,
            )
        if time.monotonic() > deadline:
            channel.close()
            raise RemoteTimeoutError(f"`{command}` on {host} did not finish in time; it was abandoned", command)
        if channel.eof_received:
            # Only the exit status is still to come (it may trail the EOF): short sleeps.
            time.sleep(pause)
            pause = min(pause * 2, 0.02)
        else:
            arrived.wait(0.05)


def _take_slot(conn: PooledConnection) -> None:
    with conn.sessions:
        while conn.open_sessions >= conn.session_limit:
            conn.sessions.wait()
        conn.open_sessions += 1


def _give_slot(conn: PooledConnection) -> None:
    with conn.sessions:
        conn.open_sessions -= 1
        conn.sessions.notify_all()


def _open_session(conn: PooledConnection) -> paramiko.Channel:
    """A session channel for a command that holds a slot; nothing has been sent yet, so any
    command may be tried again. sshd refusing one more session is not a lost connection
    (dropping it would cut every other command on it): it is the site's MaxSessions, below
    MAX_COMMAND_SESSIONS. The limit comes down to the sessions of ours sshd had open, and this
    command waits for a slot under it."""
    timeout = conn.endpoint.connect_timeout_s
    deadline = time.monotonic() + timeout
    pause = 0.05
    while True:
        try:
            return conn.open_session()
        except paramiko.ChannelException as refused:
            if not conn.is_active():
                why = f"the connection closed while a session was refused ({refused})"
                break
            with conn.sessions:
                others = conn.open_sessions - 1
                if others > 0:
                    conn.session_limit = min(conn.session_limit, others)
            if others > 0:
                _give_slot(conn)
                _take_slot(conn)
                continue
            # Refused with no other command of ours open: sshd has not yet counted off a session
            # we closed, or it allows none beside the SFTP one.
            if time.monotonic() + pause > deadline:
                raise SshConnectError(
                    f"{conn.endpoint.address} refused every new session on an open connection for {timeout:.0f} s "
                    f"({refused}) with no other command running: its sshd allows too few sessions per "
                    "connection (MaxSessions): ask the site's admins for at least 2"
                ) from None
            time.sleep(pause)  # nothing of ours to wait for: sshd's own bookkeeping
            pause = min(pause * 2, 1.0)
        except (paramiko.SSHException, OSError, EOFError) as error:
            why = f"opening a session failed: {error or type(error).__name__}"
            break
    conn.drop(why)
    return conn.open_session()


def _run_once(conn: PooledConnection, command: str, stdin: bytes | None, timeout: float) -> RemoteResult:
    _take_slot(conn)
    try:
        return _run_in_session(conn, command, stdin, timeout)
    finally:
        _give_slot(conn)


def _run_in_session(conn: PooledConnection, command: str, stdin: bytes | None, timeout: float) -> RemoteResult:
    host = conn.endpoint.address
    channel = _open_session(conn)
    marker = new_marker()
    try:
        channel.exec_command(login_shell_command(command, marker))
        if stdin:
            channel.sendall(stdin)
        channel.shutdown_write()
        out, err, code = _read_all(channel, command, time.monotonic() + timeout, host)
    except (paramiko.SSHException, OSError, EOFError) as error:
        conn.drop(f"`{command}` failed: {error or type(error).__name__}")
        raise ConnectionLostError(
            f"the SSH connection to {host} failed while `{command}` ran ({error or type(error).__name__}); "
            "it may or may not have run",
            command,
        ) from None
    except ConnectionLostError:
        conn.drop(f"the connection dropped while `{command}` ran")
        raise
    finally:
        channel.close()
    out, err = after_marker(out, marker), after_marker(err, marker)
    return RemoteResult(command, code, out.decode(errors="replace"), err.decode(errors="replace"))


def run_remote(
    conn: PooledConnection,
    command: str,
    *,
    stdin: str | bytes | None = None,
    timeout: float = DEFAULT_COMMAND_TIMEOUT_S,
    check: bool = True,
    safe_to_retry: bool = False,
) -> RemoteResult:
    """Run `command` under `bash -lc` on the login node; the one way Atlas runs remote commands.

    `command` is shell text that the caller built with every value shlex-quoted. With
    `check`, a non-zero exit raises `RemoteCommandError(command, exit_code, stdout, stderr)`.
    A dropped connection is retried (after reconnecting) only with `safe_to_retry`, for reads
    and for steps whose repetition is harmless; otherwise `ConnectionLostError` tells the
    caller that the command may have run, so it can find out (e.g. look a job up by name).
    """
    data = stdin.encode() if isinstance(stdin, str) else stdin
    attempts = 1 + (SAFE_RETRIES if safe_to_retry else 0)
    for attempt in range(attempts):
        try:
            result = _run_once(conn, command, data, timeout)
            break
        except (ConnectionLostError, SshConnectError):
            if attempt + 1 >= attempts:
                raise
            time.sleep(0.5 * (attempt + 1))
    if check and result.exit_code != 0:
        raise RemoteCommandError(command, result.exit_code, result.stdout, result.stderr, conn.endpoint.address)
    return result


# --- files ------------------------------------------------------------------------------------


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_directories(conn: PooledConnection, directories: Iterable[str]) -> None:
    dirs = sorted(set(directories))
    if dirs:
        run_remote(conn, "mkdir -p -- " + shlex.join(dirs), safe_to_retry=True)


def remote_sha256(conn: PooledConnection, paths: Sequence[str]) -> dict[str, str | None]:
    """sha256 of each remote file (None where it is missing), in one command."""
    if not paths:
        return {}
    # `|| true`: sha256sum exits 1 when a file is missing; the missing ones are simply absent below.
    result = run_remote(conn, f"sha256sum -- {shlex.join(paths)} 2>/dev/null || true", safe_to_retry=True)
    found: dict[str, str | None] = dict.fromkeys(paths)
    for line in result.stdout.splitlines():
        digest, _, name = line.partition("  ")
        if name in found and len(digest) == 64:
            found[name] = digest
    return found


class UploadVerificationError(SshError):
    pass


def upload_bytes(conn: PooledConnection, content: bytes, remote_path: str, mode: int = 0o644) -> str:
    """Write `content` to `remote_path` atomically over SFTP and check its sha256 on the remote side."""
    expected = sha256_hex(content)
    partial = f"{remote_path}.atlas-partial"
    for attempt in range(1 + SAFE_RETRIES):  # an upload to a temporary name is safe to repeat
        try:
            with conn.sftp_lock:
                sftp = conn.sftp()
                with sftp.open(partial, "wb") as handle:
                    handle.set_pipelined(True)
                    handle.write(content)
                sftp.chmod(partial, mode)
                sftp.posix_rename(partial, remote_path)
            break
        except (paramiko.SSHException, EOFError, TimeoutError, ConnectionError) as error:
            conn.drop(f"SFTP upload of {remote_path} failed: {error or type(error).__name__}")
            if attempt >= SAFE_RETRIES:
                raise ConnectionLostError(
                    f"upload of {remote_path} to {conn.endpoint.address} failed: {error}", "sftp put"
                ) from None
        except OSError as error:
            raise SshError(
                f"cannot write {remote_path} on {conn.endpoint.address}: {error.strerror or error}; "
                "check remote_work_dir and its permissions"
            ) from None
    actual = remote_sha256(conn, [remote_path])[remote_path]
    if actual != expected:
        raise UploadVerificationError(
            f"{remote_path} on {conn.endpoint.address} has sha256 {actual}, expected {expected} after upload; "
            "the remote disk may be full or the file is being changed by someone else"
        )
    return expected


def remove_files(conn: PooledConnection, paths: Iterable[str]) -> None:
    """Remove files (missing ones are fine), then any directories left empty by that."""
    files = sorted(set(paths))
    if not files:
        return
    parents = sorted(
        {str(PurePosixPath(p).parent) for p in files if str(PurePosixPath(p).parent) not in ("", ".")},
        key=lambda p: -p.count("/"),
    )
    command = "rm -f -- " + shlex.join(files)
    if parents:
        command += " && (rmdir -- " + shlex.join(parents) + " 2>/dev/null || true)"
    run_remote(conn, command, safe_to_retry=True)
