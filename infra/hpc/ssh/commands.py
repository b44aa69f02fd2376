"""Running a command on the login node: `run_remote`, the one function every remote command goes through.

At most MAX_COMMAND_SESSIONS commands run at once on a connection, fewer once sshd refuses a
session; a command is retried after a dropped connection only when the caller says it is safe.
Over paramiko a command is a session channel of the pooled transport; through a master
connection (master.py) it is one run of the OpenSSH client over the master's socket, with the
same marker, limits and errors.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from infra.hpc.remote import RemoteResult
from infra.hpc.ssh import master
from infra.hpc.ssh.errors import ConnectionLostError, RemoteCommandError, SshConnectError
from infra.hpc.ssh.output import after_marker, login_shell_command, new_marker, read_all
from infra.hpc.ssh.pool import PooledConnection

if TYPE_CHECKING:
    import paramiko
else:
    from infra.hpc.ssh.lazy_paramiko import paramiko

DEFAULT_COMMAND_TIMEOUT_S = 120.0
SAFE_RETRIES = 2  # extra attempts for commands that are safe to repeat


def _take_slot(conn: PooledConnection) -> None:
    with conn.sessions:
        while conn.open_sessions >= conn.session_limit:
            conn.sessions.wait()
        conn.open_sessions += 1


def _give_slot(conn: PooledConnection) -> None:
    with conn.sessions:
        conn.open_sessions -= 1
        conn.sessions.notify_all()


def _yield_to_own_sessions(conn: PooledConnection) -> bool:
    """sshd refused one more session: the limit comes down to the sessions of ours it had open.
    True where some were (this command gave its slot back and took one under the new limit: try
    again at once); False where none were (sshd's own bookkeeping: the caller waits, then tries)."""
    with conn.sessions:
        others = conn.open_sessions - 1
        if others > 0:
            conn.session_limit = min(conn.session_limit, others)
    if others > 0:
        _give_slot(conn)
        _take_slot(conn)
        return True
    return False


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
            if _yield_to_own_sessions(conn):
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
        link = conn.master()
        if link is not None:
            return _run_over_master(conn, link, command, stdin, timeout)
        return _run_in_session(conn, command, stdin, timeout)
    finally:
        _give_slot(conn)


def _run_over_master(
    conn: PooledConnection, link: master.MasterLink, command: str, stdin: bytes | None, timeout: float
) -> RemoteResult:
    """One command through the master connection. The client exits 255 for its own failures as
    well as for a command that does: a command that ran printed the marker first, so 255 without
    it is the client's. No master at the socket, or a session refused (MaxSessions), means the
    command never started; any other failure of the client may have come after it started."""
    ep = conn.endpoint
    deadline = time.monotonic() + timeout
    pause = 0.05
    while True:
        marker = new_marker()
        left = max(deadline - time.monotonic(), 1.0)
        out, err, code = link.run(login_shell_command(command, marker), stdin, left, command)
        said = err.decode(errors="replace").strip()
        if code != 255 or marker.encode() + b"\n" in out:
            break
        if master.SESSION_REFUSED in said:
            if _yield_to_own_sessions(conn):
                continue
            if time.monotonic() + pause > deadline:
                raise SshConnectError(
                    f"the master connection to {ep.route} refused every new session for {timeout:.0f} s with no "
                    "other command of Atlas's running: close some of your own sessions on it, or ask the site's "
                    "admins for a higher MaxSessions"
                )
            time.sleep(pause)  # nothing of ours to wait for: sshd's own bookkeeping
            pause = min(pause * 2, 1.0)
            continue
        last = said.splitlines()[-1] if said else "no message"
        conn.drop(f"the master connection failed ({last})")
        if master.NO_MASTER in said:
            raise master.refuse_missing_master(ep, f"the master connection at {ep.control_path} is gone ({last})")
        raise ConnectionLostError(
            f"the master connection at {ep.control_path} to {ep.route} failed while `{command}` ran ({last}); it may "
            f"or may not have run. If the master was closed, open it again: `{ep.master_hint}`",
            command,
        )
    stdout, stderr = after_marker(out, marker), after_marker(err, marker)
    return RemoteResult(command, code, stdout.decode(errors="replace"), stderr.decode(errors="replace"))


def _run_in_session(conn: PooledConnection, command: str, stdin: bytes | None, timeout: float) -> RemoteResult:
    host = conn.endpoint.address
    channel = _open_session(conn)
    marker = new_marker()
    try:
        channel.exec_command(login_shell_command(command, marker))
        if stdin:
            channel.sendall(stdin)
        channel.shutdown_write()
        out, err, code = read_all(channel, command, time.monotonic() + timeout, host)
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
