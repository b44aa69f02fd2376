"""Files on the login node: atomic SFTP uploads checked by sha256, directories made, files removed."""

from __future__ import annotations

import hashlib
import shlex
from collections.abc import Iterable, Sequence
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from infra.hpc.ssh.commands import SAFE_RETRIES, run_remote
from infra.hpc.ssh.errors import ConnectionLostError, SshError, UploadVerificationError
from infra.hpc.ssh.pool import PooledConnection

if TYPE_CHECKING:
    import paramiko
else:
    from infra.hpc.ssh.lazy_paramiko import paramiko


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
