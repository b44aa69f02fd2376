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

The modules: `pool.py` (the connections), `keys.py` (host keys, the login key), `commands.py`
(`run_remote` and the sessions it runs in), `output.py` (the profile's marker, reading output),
`files.py` (SFTP uploads, checksums, removal), `errors.py`, `lazy_paramiko.py`. Callers use this
package's names (`ssh.run_remote`, `ssh.connection`, ...): they are its interface, and they stay
where they were when `infra.hpc.ssh` was one module, for state written before the split. The limits
(MAX_OUTPUT_BYTES, MAX_COMMAND_SESSIONS, ...) are read from the module that uses them, and set there.
"""

# The model lives in remote.py (no paramiko there); callers reach it as `ssh.SshEndpoint` too.
from infra.hpc.remote import RemoteResult, SshEndpoint
from infra.hpc.ssh.commands import run_remote
from infra.hpc.ssh.errors import (
    ConnectionLostError,
    HostKeyError,
    RemoteCommandError,
    RemoteOutputTooLargeError,
    RemoteTimeoutError,
    SshAuthError,
    SshConnectError,
    SshError,
    UploadVerificationError,
)
from infra.hpc.ssh.files import make_directories, remote_sha256, remove_files, sha256_hex, upload_bytes
from infra.hpc.ssh.keys import load_private_key
from infra.hpc.ssh.output import after_marker, login_shell_command, new_marker
from infra.hpc.ssh.pool import CONNECTIONS_DROPPED, CONNECTIONS_OPENED, PooledConnection, close_all, connection

__all__ = [
    "CONNECTIONS_DROPPED",
    "CONNECTIONS_OPENED",
    "ConnectionLostError",
    "HostKeyError",
    "PooledConnection",
    "RemoteCommandError",
    "RemoteOutputTooLargeError",
    "RemoteResult",
    "RemoteTimeoutError",
    "SshAuthError",
    "SshConnectError",
    "SshEndpoint",
    "SshError",
    "UploadVerificationError",
    "after_marker",
    "close_all",
    "connection",
    "load_private_key",
    "login_shell_command",
    "make_directories",
    "new_marker",
    "remote_sha256",
    "remove_files",
    "run_remote",
    "sha256_hex",
    "upload_bytes",
]
