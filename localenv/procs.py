"""Background processes of the local environment: start with a pid file, stop exactly those.

`down` must stop what `up` started and nothing else, so every daemon is recorded in
`/run/atlas/envs/<id>/pids/<name>.pid` (localenv/layout.py: outside the state folder, so an
environment whose folder was deleted can still be stopped) together with its start time (from /proc), and a pid whose
start time no longer matches (the pid was reused) is never signalled.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path


class LocalEnvError(RuntimeError):
    """A problem a user can fix; the message says what and how."""


def _proc_start_time(pid: int) -> str | None:
    """The process's start time (field 22 of /proc/<pid>/stat), or None if it is gone. A zombie
    (exited, not yet reaped: a daemon this very process started that crashed) counts as gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The fields after the parenthesised command name, which may hold spaces: state, ..., starttime.
    fields = stat.rsplit(")", 1)[1].split()
    if fields[0] == "Z":
        _reap(pid)
        return None
    return fields[19]


@dataclass(frozen=True)
class Daemon:
    name: str
    pids_dir: Path
    logs_dir: Path

    @property
    def pid_file(self) -> Path:
        return self.pids_dir / f"{self.name}.pid"

    @property
    def log_file(self) -> Path:
        return self.logs_dir / f"{self.name}.log"

    def pid(self) -> int | None:
        """The recorded pid if that very process is still alive."""
        try:
            pid_text, started = self.pid_file.read_text().split()
            pid = int(pid_text)
        except (OSError, ValueError):
            return None
        if _proc_start_time(pid) != started:
            return None
        return pid

    def running(self) -> bool:
        return self.pid() is not None

    def start(self, argv: Sequence[str], env: Mapping[str, str] | None = None, cwd: Path | None = None) -> int:
        """Start argv detached (own session, output to the log file) and record it."""
        self.pids_dir.mkdir(parents=True, exist_ok=True)
        self.logs_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as log:
            proc = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=dict(env) if env is not None else None,
                cwd=cwd,
                start_new_session=True,
            )
        started = None
        for _ in range(50):
            started = _proc_start_time(proc.pid)
            if started:
                break
            time.sleep(0.01)
        self.pid_file.write_text(f"{proc.pid} {started}\n")
        return proc.pid

    def record(self, pid: int) -> None:
        """Record a daemon that forked itself (it wrote its own pid file)."""
        self.pids_dir.mkdir(parents=True, exist_ok=True)
        self.pid_file.write_text(f"{pid} {_proc_start_time(pid)}\n")

    def stop(self, timeout: float = 10.0) -> bool:
        """SIGTERM, then SIGKILL after timeout. True if something was stopped."""
        pid = self.pid()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return False
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.pid() is not None:
            _reap(pid)
            time.sleep(0.05)
        if self.pid() is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            for _ in range(100):
                _reap(pid)
                if self.pid() is None:
                    break
                time.sleep(0.05)
        self.pid_file.unlink(missing_ok=True)
        return True

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return True
            raise
    return False


def require_free_ports(ports: Mapping[str, int]) -> None:
    taken = {name: port for name, port in ports.items() if port_in_use(port)}
    if taken:
        listing = ", ".join(f"{name} on 127.0.0.1:{port}" for name, port in sorted(taken.items()))
        raise LocalEnvError(
            f"port already in use: {listing}. Stop what listens there (`ss -ltnp`), or move the "
            "local environment's ports with ATLAS_LOCALENV_PORT_BASE=<another base, default 16000>."
        )


def wait_for(check: Callable[[], bool], what: str, timeout: float, daemon: Daemon | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if daemon is not None and not daemon.running():
            raise LocalEnvError(f"{daemon.name} exited while waiting for {what}; its log ends:\n{daemon.log_tail()}")
        time.sleep(0.1)
    tail = f"; {daemon.name}'s log ends:\n{daemon.log_tail()}" if daemon else ""
    raise LocalEnvError(f"timed out after {timeout:.0f}s waiting for {what}{tail}")


def port_listening(port: int) -> bool:
    """Whether some socket on this machine listens on TCP `port` (the kernel's tables, so a
    firewall rule that keeps this process from connecting does not hide it)."""
    wanted = f":{port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[1].endswith(wanted) and fields[3] == "0A":  # 0A: LISTEN
                return True
    return False


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False
