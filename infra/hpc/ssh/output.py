"""A remote command's output: the marker that cuts off the login profile's chatter, and reading it whole.

Reading waits on an event, not paramiko's OS pipe; stdout and stderr are read fully before the exit
status; more than MAX_OUTPUT_BYTES is an error, not memory.
"""

from __future__ import annotations

import secrets
import shlex
import threading
import time
from typing import TYPE_CHECKING

from infra.hpc.ssh.errors import ConnectionLostError, RemoteOutputTooLargeError, RemoteTimeoutError

if TYPE_CHECKING:
    import paramiko

EXIT_EOF_GRACE_S = 5.0  # how long output may trail the exit status (see read_all)
# Far above any scheduler answer Atlas asks for (even `squeue --json` of thousands of jobs is a
# few MiB; files travel over SFTP, not through commands): more is a runaway or hostile answer.
MAX_OUTPUT_BYTES = 64 * 2**20


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


def read_all(channel: paramiko.Channel, command: str, deadline: float, host: str) -> tuple[bytes, bytes, int]:
    """A command's stdout, stderr and exit status, read until the output is complete; past `deadline`
    (a `time.monotonic()` reading) or MAX_OUTPUT_BYTES the channel is closed and the command abandoned."""
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
