"""SSH to a cluster's login node as its users reach it: one pooled login per (host, port, user).

How a target is reached is resolved once (`resolve.py`: `resolve_endpoint`, `check_endpoint`)
from the target and the user's OpenSSH config into an `SshEndpoint`: a Host alias, jump hosts
(ProxyJump, `route.py` chains them with paramiko), keys from the target, the ssh-agent
(`agent.py`) or IdentityFile, and a master connection the user opened (ControlPath, `master.py`:
for sites that ask a second factor, run through the OpenSSH client).

Why a module-level pool: Pulumi pickles dynamic providers into state, so they must hold no
live objects; every provider method asks `connection(endpoint)` instead, and all resources
served by one provider process (a sweep of 50 jobs) share one SSH connection per host.
OpenSSH's own per-command cost (TCP, key exchange, login) is paid once.

Rules kept here, each from a failure seen in other tools (Pulumi's command provider, submitit, Toil):
- host keys only from known_hosts (the target's, or the ssh config's files), on every hop; an
  unknown, changed or revoked key is refused with the hop, the fingerprint and the known_hosts
  source named (never AutoAddPolicy, whatever StrictHostKeyChecking says);
- credentials arrive as values (Pulumi secrets) or stay in the agent, are never logged, never
  in a repr; the agent's socket path never enters Pulumi state;
- never a prompt: a site that asks a second factor is refused with the command that opens a
  master connection, and used through that connection;
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

The modules: `resolve.py` (target + ssh config -> endpoint), `pool.py` (the connections),
`route.py` (paramiko, hop by hop), `master.py` (the OpenSSH master), `keys.py` (host keys, the
keys offered), `known_hosts.py` (the file format), `agent.py`, `commands.py` (`run_remote` and
the sessions it runs in), `output.py` (the profile's marker, reading output), `files.py` (SFTP
uploads, checksums, removal), `errors.py`, `lazy_paramiko.py`. Callers use this
package's names (`ssh.run_remote`, `ssh.connection`, ...): they are its interface, and they stay
where they were when `infra.hpc.ssh` was one module, for state written before the split. The limits
(MAX_OUTPUT_BYTES, MAX_COMMAND_SESSIONS, ...) are read from the module that uses them, and set there.
"""

# The model lives in remote.py (no paramiko there); callers reach it as `ssh.SshEndpoint` too.
from infra.hpc.remote import RemoteResult, SshEndpoint, SshHop
from infra.hpc.ssh.commands import run_remote
from infra.hpc.ssh.errors import (
    ConnectionLostError,
    HostKeyError,
    MasterConnectionError,
    RemoteCommandError,
    RemoteOutputTooLargeError,
    RemoteTimeoutError,
    SecondFactorError,
    SshAuthError,
    SshConnectError,
    SshError,
    UploadVerificationError,
)
from infra.hpc.ssh.files import make_directories, remote_sha256, remove_files, sha256_hex, upload_bytes
from infra.hpc.ssh.keys import load_private_key
from infra.hpc.ssh.output import after_marker, login_shell_command, new_marker
from infra.hpc.ssh.pool import CONNECTIONS_DROPPED, CONNECTIONS_OPENED, PooledConnection, close_all, connection
from infra.hpc.ssh.resolve import NoKeyError, check_endpoint, resolve_endpoint, target_connection

__all__ = [
    "CONNECTIONS_DROPPED",
    "CONNECTIONS_OPENED",
    "ConnectionLostError",
    "HostKeyError",
    "MasterConnectionError",
    "NoKeyError",
    "PooledConnection",
    "RemoteCommandError",
    "RemoteOutputTooLargeError",
    "RemoteResult",
    "RemoteTimeoutError",
    "SecondFactorError",
    "SshAuthError",
    "SshConnectError",
    "SshEndpoint",
    "SshError",
    "SshHop",
    "UploadVerificationError",
    "after_marker",
    "check_endpoint",
    "close_all",
    "connection",
    "load_private_key",
    "login_shell_command",
    "make_directories",
    "new_marker",
    "remote_sha256",
    "remove_files",
    "resolve_endpoint",
    "run_remote",
    "sha256_hex",
    "target_connection",
    "upload_bytes",
]
