"""A login through the user's OpenSSH master connection (ControlMaster, ControlPath), for sites with a second factor.

A site that asks for a code after the key cannot be logged in to by a program that must never
prompt (`pulumi up` is non-interactive); its users open one connection by hand (`ssh -M -S
<socket> -fN <host>`, answering the prompt) and let later ones ride on it. paramiko cannot speak
OpenSSH's multiplexing protocol, so Atlas runs the OpenSSH client over the master's socket: each
command is `ssh -S <socket> ... <login shell command>`, and SFTP is paramiko's SFTP client on the
pipes of `ssh -S <socket> -s <host> sftp`. The client runs with BatchMode (it never prompts) and
`ProxyCommand=false`: a client that finds no master fails at once instead of dialling the host
itself, and `-F /dev/null`, so nothing of the user's config but the socket changes what it does.
run_remote (commands.py) still wraps every command: the marker, the output cap, the deadline, the
session limit and the retry rules are the same as over paramiko.
"""

from __future__ import annotations

import contextlib
import os
import select
import selectors
import socket
import subprocess
import tempfile
import threading
import time
from typing import TYPE_CHECKING

from infra.hpc.remote import SshEndpoint
from infra.hpc.ssh.errors import MasterConnectionError, RemoteOutputTooLargeError, RemoteTimeoutError
from infra.hpc.ssh.output import MAX_OUTPUT_BYTES

if TYPE_CHECKING:
    import paramiko
else:
    from infra.hpc.ssh.lazy_paramiko import paramiko

SSH_CLIENT = "ssh"
CHECK_TIMEOUT_S = 10.0
# What OpenSSH's mux client prints when the master refuses one more session (sshd's MaxSessions):
# nothing ran, the command may be tried again when a session of ours has ended.
SESSION_REFUSED = "Session open refused by peer"
# What it prints when there is no master at the socket: nothing ran.
NO_MASTER = "Control socket connect"


def client_argv(endpoint: SshEndpoint, *args: str) -> list[str]:
    """The OpenSSH client over the endpoint's master socket, never prompting, never dialling."""
    assert endpoint.control_path is not None
    return [
        SSH_CLIENT, "-F", "/dev/null", "-S", endpoint.control_path,
        "-o", "ControlMaster=no", "-o", "BatchMode=yes", "-o", "ProxyCommand=false", "-o", "LogLevel=ERROR",
        "-p", str(endpoint.port), "-l", endpoint.user, *args,
    ]


def master_state(endpoint: SshEndpoint) -> tuple[bool, str]:
    """Whether a master connection answers at the endpoint's ControlPath (`ssh -O check`), and if
    not, why not (one clause for a message)."""
    path = endpoint.control_path
    if path is None:
        return False, "no ControlPath"
    if not os.path.exists(path):
        return False, f"no master connection is open at {path}"
    argv = [SSH_CLIENT, "-F", "/dev/null", "-S", path, "-O", "check", endpoint.host]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=CHECK_TIMEOUT_S, check=False)
    except FileNotFoundError:
        return False, "the OpenSSH client (ssh) is not installed, and only it can use a master connection"
    except subprocess.TimeoutExpired:
        return False, f"the master connection at {path} did not answer in {CHECK_TIMEOUT_S:.0f} s"
    if done.returncode == 0:
        return True, ""
    said = (done.stderr or done.stdout).strip().splitlines()
    return False, f"the master connection at {path} is not running ({said[-1] if said else 'no answer'})"


def refuse_missing_master(endpoint: SshEndpoint, why: str) -> MasterConnectionError:
    return MasterConnectionError(f"{why}: open it again (answering the site's prompt): `{endpoint.master_hint}`")


class _SftpSocket(socket.socket):
    """One end of the socket pair whose other end is `ssh -s ... sftp`'s stdin and stdout: what
    paramiko's SFTPClient asks of its channel besides send and recv."""

    def get_name(self) -> str:
        return "sftp-over-master"

    def recv_ready(self) -> bool:
        return bool(select.select([self], [], [], 0)[0])


def _read_capped(proc: subprocess.Popen[bytes], deadline: float, command: str, where: str) -> tuple[bytes, bytes]:
    """A client's stdout and stderr until both end, within the deadline and MAX_OUTPUT_BYTES."""
    assert proc.stdout is not None and proc.stderr is not None
    chunks: dict[int, bytearray] = {proc.stdout.fileno(): bytearray(), proc.stderr.fileno(): bytearray()}
    with selectors.DefaultSelector() as selector:
        for descriptor in chunks:
            selector.register(descriptor, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                proc.kill()
                raise RemoteTimeoutError(f"`{command}` on {where} did not finish in time; it was abandoned", command)
            for ready, _ in selector.select(min(left, 1.0)):
                data = os.read(ready.fd, 65536)
                if not data:
                    selector.unregister(ready.fd)
                    continue
                chunks[ready.fd] += data
            if sum(len(c) for c in chunks.values()) > MAX_OUTPUT_BYTES:
                proc.kill()
                raise RemoteOutputTooLargeError(
                    f"`{command}` on {where} printed more than {MAX_OUTPUT_BYTES // 2**20} MiB; it was abandoned "
                    "and its output not read (a scheduler answering this much is misconfigured or hostile: "
                    "ask the site's admins)",
                    command,
                )
    return bytes(chunks[proc.stdout.fileno()]), bytes(chunks[proc.stderr.fileno()])


class MasterLink:
    """A login carried by a master connection: commands and SFTP through the OpenSSH client."""

    def __init__(self, endpoint: SshEndpoint) -> None:
        self.endpoint = endpoint
        self._sftp_client: subprocess.Popen[bytes] | None = None

    def run(self, remote_command: str, stdin: bytes | None, timeout: float, command: str) -> tuple[bytes, bytes, int]:
        """Run `remote_command` (the login shell's command line) on the login node: its stdout,
        stderr and exit status (255 with stderr from the client itself when the master failed)."""
        where = self.endpoint.route
        try:
            proc = subprocess.Popen(
                client_argv(self.endpoint, "-T", self.endpoint.host, remote_command),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except FileNotFoundError:
            raise MasterConnectionError(
                "the OpenSSH client (ssh) is not installed, and only it can use a master connection"
            ) from None
        assert proc.stdin is not None

        def feed() -> None:
            with contextlib.suppress(OSError):
                if stdin:
                    proc.stdin.write(stdin)  # type: ignore[union-attr]
                proc.stdin.close()  # type: ignore[union-attr]

        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
        try:
            out, err = _read_capped(proc, time.monotonic() + timeout, command, where)
            code = proc.wait(timeout=max(1.0, timeout))
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            writer.join(timeout=5)
        return out, err, code

    def open_sftp(self) -> paramiko.SFTPClient:
        """An SFTP session over the master (the sftp subsystem of one more multiplexed session)."""
        self.close_sftp()
        ours, theirs = socket.socketpair()
        errors = tempfile.TemporaryFile()  # noqa: SIM115 (kept open while the client runs)
        try:
            proc = subprocess.Popen(
                client_argv(self.endpoint, "-s", self.endpoint.host, "sftp"),
                stdin=theirs.fileno(),
                stdout=theirs.fileno(),
                stderr=errors,
            )
        except FileNotFoundError:
            ours.close()
            errors.close()
            raise MasterConnectionError(
                "the OpenSSH client (ssh) is not installed, and only it can use a master connection"
            ) from None
        finally:
            theirs.close()
        try:
            # SFTPClient takes any object with a Channel's send, recv and close (it reads a real
            # socket through select, so a dead client is an EOF, not a hang).
            client = paramiko.SFTPClient(_SftpSocket(fileno=ours.detach()))  # type: ignore[arg-type]
        except (paramiko.SSHException, EOFError, OSError) as error:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
            errors.seek(0)
            said = errors.read().decode(errors="replace").strip() or str(error) or type(error).__name__
            errors.close()
            if proc.poll() is None:
                proc.kill()
            raise refuse_missing_master(
                self.endpoint, f"SFTP over the master connection at {self.endpoint.control_path} failed ({said})"
            ) from None
        errors.close()
        self._sftp_client = proc
        return client

    def sftp_running(self) -> bool:
        return self._sftp_client is not None and self._sftp_client.poll() is None

    def close_sftp(self) -> None:
        proc, self._sftp_client = self._sftp_client, None
        if proc is not None and proc.poll() is None:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
