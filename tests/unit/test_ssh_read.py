"""Reading a remote command's output: complete even when the exit status comes first.

OpenSSH sends `exit-status` when the command exits, and what the command wrote may still be
in flight; the output is complete at the channel's EOF. These tests play the channel's events
on a fake clock, in the orders a server may send them.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from types import SimpleNamespace

import pytest
from paramiko.buffered_pipe import BufferedPipe

from infra.hpc import ssh
from infra.hpc.ssh import output


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class ScriptedChannel:
    """Events at fake times: stdout chunks, stderr chunks, the exit status, EOF."""

    clock: FakeClock
    stdout: list[tuple[float, bytes]]
    stderr: list[tuple[float, bytes]] = field(default_factory=list)
    exit_at: float = 0.0
    exit_code: int = 0
    eof_at: float | None = 0.0
    closed_by_us: bool = False

    def _due(self, chunks: list[tuple[float, bytes]]) -> list[tuple[float, bytes]]:
        return [c for c in chunks if c[0] <= self.clock.now]

    def recv_ready(self) -> bool:
        return bool(self._due(self.stdout))

    def recv(self, _n: int) -> bytes:
        chunk = self._due(self.stdout)[0]
        self.stdout.remove(chunk)
        return chunk[1]

    def recv_stderr_ready(self) -> bool:
        return bool(self._due(self.stderr))

    def recv_stderr(self, _n: int) -> bytes:
        chunk = self._due(self.stderr)[0]
        self.stderr.remove(chunk)
        return chunk[1]

    def exit_status_ready(self) -> bool:
        return self.clock.now >= self.exit_at

    def recv_exit_status(self) -> int:
        return self.exit_code

    @property
    def eof_received(self) -> bool:
        return self.eof_at is not None and self.clock.now >= self.eof_at

    @property
    def closed(self) -> bool:
        return self.closed_by_us

    def get_transport(self) -> ScriptedChannel:
        return self

    def is_active(self) -> bool:
        return True

    def close(self) -> None:
        self.closed_by_us = True

    def wait_readable(self, timeout: float) -> None:
        """As paramiko's buffers wake output._OutputArrived: at the next output chunk or the EOF (not
        at the exit status, which no buffer signals), or after `timeout`."""
        events = [t for t, _ in self.stdout + self.stderr] + ([self.eof_at] if self.eof_at is not None else [])
        upcoming = [t for t in events if t > self.clock.now]
        self.clock.now = min([self.clock.now + timeout, *upcoming])


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    fake = FakeClock()
    monkeypatch.setattr(output, "time", fake)
    monkeypatch.setattr(output, "_OutputArrived", ScriptedArrival)
    return fake


class ScriptedArrival:
    """output._OutputArrived on a scripted channel's fake clock."""

    def __init__(self, channel: ScriptedChannel) -> None:
        self.channel = channel

    def arm(self) -> None:
        pass

    def wait(self, timeout: float) -> None:
        self.channel.wait_readable(timeout)


LINES = [f"{i:064x}  /home/atlas/run/file{i}.py\n".encode() for i in range(17)]


@pytest.mark.parametrize(
    ("case", "stdout", "exit_at", "eof_at"),
    [
        ("data, EOF, then exit status", [(0.0, b"".join(LINES))], 0.02, 0.01),
        ("exit status before the last chunk", [(0.0, b"".join(LINES[:16])), (0.05, LINES[16])], 0.01, 0.06),
        ("exit status before any output", [(0.2, b"".join(LINES))], 0.0, 0.2),
        ("output in many chunks after the exit status", [(0.01 * i, line) for i, line in enumerate(LINES)], 0.0, 0.2),
    ],
)
def test_all_output_is_read_whatever_the_order(
    clock: FakeClock, case: str, stdout: list[tuple[float, bytes]], exit_at: float, eof_at: float
) -> None:
    eof = eof_at + 0.03
    channel = ScriptedChannel(
        clock,
        stdout=list(stdout),
        # After the exit status, but before the EOF: SSH sends no data, stderr neither, after EOF
        # (RFC 4254, 5.3).
        stderr=[(min(exit_at + 0.03, eof - 0.01), b"late warning\n")],
        exit_at=exit_at,
        exit_code=3,
        eof_at=eof,
    )
    out, err, code = output.read_all(channel, "sha256sum -- ...", deadline=60.0, host="login")  # type: ignore[arg-type]
    assert out == b"".join(LINES), case
    assert err == b"late warning\n", case
    assert code == 3


def test_a_command_that_never_sends_eof_returns_after_the_grace(clock: FakeClock) -> None:
    # `cmd &` leaving a child that holds stdout: no EOF until the child ends; the exit status counts.
    channel = ScriptedChannel(clock, stdout=[(0.0, b"12345\n")], exit_at=0.01, eof_at=None)
    out, _err, code = output.read_all(channel, "nohup sleep 600 & echo $!", deadline=600.0, host="login")  # type: ignore[arg-type]
    assert (out, code) == (b"12345\n", 0)
    assert output.EXIT_EOF_GRACE_S <= clock.now < output.EXIT_EOF_GRACE_S + 1


def test_a_command_that_runs_past_its_deadline_is_abandoned(clock: FakeClock) -> None:
    channel = ScriptedChannel(clock, stdout=[], exit_at=1000.0, eof_at=None)
    with pytest.raises(ssh.RemoteTimeoutError, match="did not finish in time"):
        output.read_all(channel, "sleep 1000", deadline=10.0, host="login")  # type: ignore[arg-type]
    assert channel.closed_by_us


def test_a_runaway_answer_is_abandoned_at_the_cap_not_held_in_memory(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(output, "MAX_OUTPUT_BYTES", 1000)
    channel = ScriptedChannel(clock, stdout=[(0.01 * i, b"x" * 300) for i in range(10)], exit_at=1.0, eof_at=1.0)
    with pytest.raises(ssh.RemoteOutputTooLargeError, match="printed more than"):
        output.read_all(channel, "squeue --json", deadline=60.0, host="login")  # type: ignore[arg-type]
    assert channel.closed_by_us
    # Stopped at the chunk that crossed the cap, not after reading the rest.
    assert len(channel.stdout) == 6


# What `bash -l` prints before the command: a site's banner, with lines a parser could take for
# an answer (a submission, a job id alone, a status line), on stdout and stderr.
BANNER = (
    "echo 'Welcome to Satori. Maintenance Friday.'; echo 'Submitted batch job 999999'; echo 424242; "
    "echo '777|RUNNING|normal|atlas-train-0123456789|None'; echo 'Job <31337> is submitted to queue <normal>.'; "
    "echo 'module: ignoring unknown module' >&2\n"
)


def login(tmp_path, command: str, profile: str = BANNER, stdin: bytes | None = None):
    """`command` as infra.hpc.ssh runs it, through a real `bash -l` whose profile is `profile`."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / ".bash_profile").write_text(profile)
    marker = output.new_marker()
    done = subprocess.run(  # noqa: S602 (the command line infra.hpc.ssh sends, run by a shell as sshd does)
        output.login_shell_command(command, marker),
        shell=True,
        input=stdin,
        capture_output=True,
        env={"HOME": str(home), "PATH": os.environ["PATH"]},
        check=False,
    )
    return output.after_marker(done.stdout, marker), output.after_marker(done.stderr, marker), done.returncode


def test_a_login_banner_is_cut_off_and_the_commands_output_exit_code_and_stdin_kept(tmp_path) -> None:
    out, err, code = login(tmp_path, "echo 'Submitted batch job 5'; echo oops >&2; exit 3")
    assert (out, err, code) == (b"Submitted batch job 5\n", b"oops\n", 3)
    out, _err, code = login(tmp_path, "cat && echo done", stdin=b"payload\n")
    assert (out, code) == (b"payload\ndone\n", 0)
    # A command ending in a comment or with its own && chain stays one command.
    out, _err, code = login(tmp_path, "false || echo fallback # trailing comment")
    assert (out, code) == (b"fallback\n", 0)


def test_a_profile_that_fails_before_the_command_is_shown_whole(tmp_path) -> None:
    out, err, code = login(tmp_path, "echo never", profile="echo 'quota exceeded' >&2; exit 12\n")
    assert (out, err, code) == (b"", b"quota exceeded\n", 12)


def test_the_marker_differs_every_time() -> None:
    assert len({output.new_marker() for _ in range(100)}) == 100


def test_output_on_either_buffer_wakes_the_reader_until_it_rearms() -> None:
    """paramiko's buffers clear their event when read empty; stdout read empty must not hide
    stderr's waiting output (a lost wake-up costs a command 50 ms)."""
    channel = SimpleNamespace(in_buffer=BufferedPipe(), in_stderr_buffer=BufferedPipe())
    arrived = output._OutputArrived(channel)  # type: ignore[arg-type]
    assert not arrived.is_set()
    channel.in_stderr_buffer.feed(b"warning\n")
    channel.in_buffer.feed(b"x")
    assert channel.in_buffer.read(1) == b"x"  # stdout now empty: paramiko clears its event
    assert arrived.is_set()
    arrived.arm()
    assert not arrived.is_set()
    channel.in_buffer.close()  # the EOF
    assert arrived.is_set()
