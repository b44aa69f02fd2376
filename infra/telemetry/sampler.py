"""Run a step's command as a child and record what it uses, every interval, as JSONL.

    python3 -m infra.telemetry.sampler --out telemetry/train.jsonl --interval 5 --step train -- python main.py ...

Guarantees, because a measurement must never cost the run it measures:
- the child is never killed: SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are
  forwarded to it, and the sampler waits for it and exits with its exit code (128+N when
  a signal N ended it, as a shell reports it);
- records are appended one line at a time with line buffering: a kill -9 of the sampler
  (or of the whole job) leaves every earlier line complete and readable;
- a metric that cannot be read is written as {"measured": false, "reason": ...}, never 0;
- it is cheap: a handful of /proc reads and NVML calls per sample, no threads, no polling
  between samples (it sleeps on a pidfd of the child). bench/telemetry_overhead.py
  measures it.

Record types: "start", "sample", "signal", "end" (see infra/telemetry/parsers/sampler_jsonl.py).
Units are in the key names: *_bytes, *_percent, *_s (seconds), t (Unix time, seconds).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import resource
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from infra.telemetry import gpu, procfs
from infra.telemetry.columns import ColumnWriter, columns_path

FORMAT_VERSION = 1
FORWARDED_SIGNALS = (
    signal.SIGTERM,
    signal.SIGINT,
    signal.SIGHUP,
    signal.SIGQUIT,
    signal.SIGUSR1,
    signal.SIGUSR2,
)
PR_SET_CHILD_SUBREAPER = 36
UNITS = {
    "t": "Unix time, s",
    "cpu.tree_percent": "% of one core (200 = two cores busy)",
    "cpu.host_percent": "% of all the host's cores",
    "*_bytes": "bytes",
    "memory.cgroup_peak_bytes": (
        "the step's own memory cgroup's high-water mark since its creation (page cache included); null where"
        " the cgroup is not the step's own (the start record's memory_figure says why)"
    ),
    "gpu.devices[].utilization_percent": (
        "% of the time a kernel ran: the mean of NVML's samples since the last reading (utilization_method says how)"
    ),
    "disk.*, network.*": "cumulative bytes; rates are differences between samples",
}


def _measured(block: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """Run one reader; any failure becomes a not-measured block with the reason."""
    try:
        return {"measured": True, **block()}
    except Exception as error:  # noqa: BLE001 (every failure is recorded, none may stop the sampler)
        return gpu.not_measured(f"{type(error).__name__}: {error}")


class Sampler:
    def __init__(
        self,
        out: TextIO,
        interval_s: float,
        gpu_reader: gpu.GpuReader,
        columns: ColumnWriter | None = None,
        out_offset: int = 0,
        memory_cgroup: procfs.MemoryCgroup | procfs.NoMemoryCgroup | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.out = out
        # The binary rows beside the JSONL (infra/telemetry/columns.py); each names its line's offset.
        self.columns = columns
        self.out_offset = out_offset
        self.interval_s = interval_s
        self.gpu_reader = gpu_reader
        self.child: subprocess.Popen[bytes] | None = None
        self.pending_signals: list[int] = []
        self.samples = 0
        self.write_failed = False
        self.previous_tree: dict[int, tuple[int, int]] = {}  # pid -> (start ticks, cpu ticks)
        self.previous_host: procfs.HostCpu | None = None
        self.previous_t = time.monotonic()
        # Found and judged once: a process does not change cgroups by itself, and each sample then
        # reads one file. Its peak is read only where the cgroup is the step's own (a Slurm or LSF
        # job's, a pod's): a cgroup shared with a daemon or a session would credit the step with
        # their memory, so there the RSS sum stands and the start record says why.
        self.memory_cgroup = memory_cgroup if memory_cgroup is not None else procfs.find_memory_cgroup()
        self.memory_verdict = (
            procfs.judge_memory_cgroup(
                self.memory_cgroup.version, self.memory_cgroup.name, os.environ if environ is None else environ
            )
            if isinstance(self.memory_cgroup, procfs.MemoryCgroup)
            else None
        )
        self.peak_cgroup: procfs.MemoryCgroup | procfs.NoMemoryCgroup = (
            procfs.NoMemoryCgroup(self.memory_verdict.reason)
            if self.memory_verdict is not None and not self.memory_verdict.own
            else self.memory_cgroup
        )

    # -- output --------------------------------------------------------------------------
    def write(self, record: dict[str, Any]) -> None:
        # ASCII (json.dumps escapes the rest): characters are bytes, so offsets are byte offsets.
        line = json.dumps(record, separators=(",", ":")) + "\n"
        offset = self.out_offset
        try:
            self.out.write(line)
            self.out_offset += len(line)
            # The row after its line: a crash between the two leaves a line without a row, which
            # readers take from the JSONL, never a row without a line.
            if self.columns is not None and record.get("type") == "sample":
                self.columns.append(record, offset)
        except (OSError, ValueError) as error:
            # A full disk must not stop the job: say so once and go on waiting for it. Rows stop
            # with the first failure, since the offsets of later lines are no longer known.
            if not self.write_failed:
                print(f"atlas-sampler: cannot write telemetry ({error}); the step keeps running", file=sys.stderr)
            self.write_failed = True
            self.columns = None

    # -- signals -------------------------------------------------------------------------
    def on_signal(self, signum: int, _frame: FrameType | None) -> None:
        if self.child is None:
            self.pending_signals.append(signum)
            return
        self._forward(signum)

    def _forward(self, signum: int) -> None:
        assert self.child is not None
        forwarded = True
        if signum == signal.SIGINT and _terminal_delivered_to_group():
            # ^C at a terminal already reached the child (same foreground process group).
            forwarded = False
        else:
            try:
                os.kill(self.child.pid, signum)
            except ProcessLookupError:
                forwarded = False
        self.write(
            {
                "type": "signal",
                "t": time.time(),
                "signal": signal.Signals(signum).name,
                "forwarded_to": self.child.pid if forwarded else None,
            }
        )

    # -- sampling ------------------------------------------------------------------------
    def _cpu_and_rss(self, now: float) -> tuple[dict[str, Any], dict[str, Any]]:
        tree = [p for p in procfs.process_tree(os.getpid()) if p.pid != os.getpid()]
        elapsed = max(now - self.previous_t, 1e-9)
        ticks = 0
        current: dict[int, tuple[int, int]] = {}
        for process in tree:
            current[process.pid] = (process.start_ticks, process.cpu_ticks)
            before = self.previous_tree.get(process.pid)
            # A process new since the last sample (or a reused pid) counts from its start.
            ticks += process.cpu_ticks - (before[1] if before and before[0] == process.start_ticks else 0)
        self.previous_tree, self.previous_t = current, now
        cpu: dict[str, Any] = {
            "measured": True,
            "tree_percent": round(100 * ticks / procfs.CLOCK_TICKS / elapsed, 2),
            "tree_processes": len(tree),
        }
        host = procfs.read_host_cpu()
        if self.previous_host is not None and host.total_ticks > self.previous_host.total_ticks:
            busy = host.busy_ticks - self.previous_host.busy_ticks
            cpu["host_percent"] = round(100 * busy / (host.total_ticks - self.previous_host.total_ticks), 2)
        else:
            cpu["host_percent"] = None
            cpu["host_percent_reason"] = "no earlier /proc/stat reading to difference against"
        cpu["host_cpus"] = host.cpus
        self.previous_host = host
        memory: dict[str, Any] = {"measured": True, "tree_rss_bytes": sum(p.rss_bytes for p in tree)}
        return cpu, memory

    def sample(self) -> dict[str, Any]:
        now = time.monotonic()
        cpu, memory = _safe_pair(lambda: self._cpu_and_rss(now))
        if memory.get("measured"):
            memory.update(_measured(_host_memory))
            memory.update(_cgroup_peak(self.peak_cgroup))
        return {
            "type": "sample",
            "t": time.time(),
            "cpu": cpu,
            "memory": memory,
            "gpu": _gpu_block(self.gpu_reader),
            "disk": _measured(self._disk),
            "network": _measured(_network),
            "sampler": {"cpu_s": round(_own_cpu_seconds(), 4)},
        }

    def _disk(self) -> dict[str, Any]:
        read, written = procfs.read_disk_bytes()
        block: dict[str, Any] = {"host_read_bytes": read, "host_write_bytes": written}
        tree_read = tree_written = 0
        for pid in self.previous_tree:
            try:
                r, w = procfs.read_process_io(pid)
            except (OSError, KeyError, ValueError):
                continue  # exited, or /proc/<pid>/io not readable for this user
            tree_read += r
            tree_written += w
        block["tree_read_bytes"], block["tree_write_bytes"] = tree_read, tree_written
        return block

    # -- the run -------------------------------------------------------------------------
    def run(self, argv: list[str], step: str) -> int:
        _become_subreaper()
        for signum in FORWARDED_SIGNALS:
            signal.signal(signum, self.on_signal)
        self.previous_host = _try(procfs.read_host_cpu)
        cgroup_at_start = _cgroup_description(self.memory_cgroup, self.memory_verdict)  # before the child adds to it
        started = time.time()
        start_monotonic = time.monotonic()
        try:
            self.child = subprocess.Popen(argv)
        except OSError as error:
            self.write({"type": "start", "t": started, "step": step, "argv": argv, "error": str(error)})
            self.write({"type": "end", "t": time.time(), "exit_code": 127, "signal": None, "duration_s": 0.0})
            print(f"atlas-sampler: cannot start {argv[0]!r}: {error}", file=sys.stderr)
            return 127
        self.previous_t = time.monotonic()
        self.write(
            {
                "type": "start",
                "version": FORMAT_VERSION,
                "t": started,
                "step": step,
                "argv": argv,
                "pid": self.child.pid,
                "sampler_pid": os.getpid(),
                "host": socket.gethostname(),
                "interval_s": self.interval_s,
                "gpu_source": self.gpu_reader.source,
                "memory_cgroup": cgroup_at_start,
                "memory_figure": _memory_figure(cgroup_at_start),
                "units": UNITS,
            }
        )
        for pending in self.pending_signals:
            self._forward(pending)
        status = self._wait_and_sample(start_monotonic)
        code = _exit_code(status)
        self.write(
            {
                "type": "end",
                "t": time.time(),
                "exit_code": code if code >= 0 else 128 - code,
                "signal": signal.Signals(-code).name if code < 0 else None,
                "duration_s": round(time.monotonic() - start_monotonic, 3),
                "samples": self.samples,
            }
        )
        self.gpu_reader.close()
        return code if code >= 0 else 128 - code

    def _wait_and_sample(self, start: float) -> int:
        assert self.child is not None
        pid = self.child.pid
        waiter = _ChildWaiter(pid)
        due = start + self.interval_s
        while True:
            status = waiter.wait(max(0.0, due - time.monotonic()))
            if status is not None:
                self.child.returncode = _exit_code(status)
                return status
            if time.monotonic() >= due:
                try:
                    self.write(self.sample())
                    self.samples += 1
                except Exception as error:  # noqa: BLE001 (keep waiting for the child whatever happens)
                    print(f"atlas-sampler: sample failed: {error}", file=sys.stderr)
                due += self.interval_s
                if due < time.monotonic():  # suspended or overloaded: skip, don't burst
                    due = time.monotonic() + self.interval_s


def _exit_code(status: int) -> int:
    """`os.waitstatus_to_exitcode` (Python 3.9+), written out: the sampler runs under an image's own
    python3, 3.8 or later (infra/telemetry/entrypoint.sh checks)."""
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


class _ChildWaiter:
    """Sleeps until the child exits or a timeout passes, reaping orphans re-parented to us.

    A pidfd makes the sleep a single poll(); without one (old kernels, some sandboxes) it
    checks a few times a second."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.pidfd: int | None = None
        with contextlib.suppress(AttributeError, OSError):
            self.pidfd = os.pidfd_open(pid)

    def _reap(self) -> int | None:
        status: int | None = None
        while True:
            try:
                pid, raw = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return status
            if pid == 0:
                return status
            if pid == self.pid:
                status = raw

    def wait(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while True:
            status = self._reap()
            if status is not None:
                return status
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            if self.pidfd is not None:
                poller = select.poll()
                poller.register(self.pidfd, select.POLLIN)
                poller.poll(remaining * 1000)
            else:
                time.sleep(min(remaining, 0.2))


def _safe_pair(read: Callable[[], tuple[dict[str, Any], dict[str, Any]]]) -> tuple[dict[str, Any], dict[str, Any]]:
    try:
        return read()
    except Exception as error:  # noqa: BLE001
        reason = f"{type(error).__name__}: {error}"
        return gpu.not_measured(reason), gpu.not_measured(reason)


def _host_memory() -> dict[str, Any]:
    used, total = procfs.read_host_memory()
    block: dict[str, Any] = {"host_used_bytes": used, "host_total_bytes": total}
    cgroup = procfs.read_cgroup_memory()
    if cgroup is not None:
        block["cgroup_used_bytes"], block["cgroup_limit_bytes"] = cgroup
    return block


def _cgroup_peak(cgroup: procfs.MemoryCgroup | procfs.NoMemoryCgroup) -> dict[str, Any]:
    """The cgroup's peak beside the tree's RSS sum: RSS counts a page shared by forked workers
    (a DataLoader's) once per process, the cgroup counts it once, and sees page cache too."""
    if isinstance(cgroup, procfs.NoMemoryCgroup):
        return {"cgroup_peak_bytes": None, "cgroup_peak_reason": cgroup.reason}
    try:
        return {"cgroup_peak_bytes": procfs.read_memory_cgroup_peak(cgroup)}
    except (OSError, ValueError, IndexError) as error:
        return {"cgroup_peak_bytes": None, "cgroup_peak_reason": f"{type(error).__name__}: {error}"}


def _cgroup_description(
    cgroup: procfs.MemoryCgroup | procfs.NoMemoryCgroup, verdict: procfs.CgroupVerdict | None
) -> dict[str, Any]:
    """For the start record: which cgroup the peaks are of, whether it is the step's own and why, and
    its peak before the step began (the kernel's mark counts from the cgroup's creation: a later peak
    equal to it may predate the step). A cgroup that is not the step's own is named, its peak not read."""
    if isinstance(cgroup, procfs.NoMemoryCgroup):
        return gpu.not_measured(cgroup.reason)
    block: dict[str, Any] = {"version": cgroup.version, "cgroup": cgroup.name, "peak_file": cgroup.peak_file}
    if verdict is not None and not verdict.own:
        return {"measured": False, **block, "own": False, "reason": verdict.reason}
    before = _cgroup_peak(cgroup)
    block = {"measured": before["cgroup_peak_bytes"] is not None, **block}
    if verdict is not None:
        block.update({"own": True, "owner": verdict.owner, "why": verdict.reason})
    block["peak_at_start_bytes"] = before["cgroup_peak_bytes"]
    if "cgroup_peak_reason" in before:
        block["reason"] = before["cgroup_peak_reason"]
    return block


def _memory_figure(cgroup: dict[str, Any]) -> dict[str, str]:
    """Which reading is the step's memory figure, and why: the cgroup's peak where the cgroup is the
    step's own and its peak could be read, else the RSS sum of the step's processes."""
    if cgroup.get("measured") and cgroup.get("own"):
        return {"source": "cgroup_peak", "why": str(cgroup["why"])}
    return {"source": "tree_rss", "why": str(cgroup.get("reason", "no memory cgroup"))}


def _network() -> dict[str, Any]:
    rx, tx = procfs.read_network_bytes()
    return {"rx_bytes": rx, "tx_bytes": tx}


def _gpu_block(reader: gpu.GpuReader) -> dict[str, Any]:
    try:
        return reader.read()
    except Exception as error:  # noqa: BLE001
        return gpu.not_measured(f"{type(error).__name__}: {error}")


def _own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _try(read: Callable[[], procfs.HostCpu]) -> procfs.HostCpu | None:
    try:
        return read()
    except (OSError, ValueError):
        return None


def _become_subreaper() -> None:
    """Orphaned grandchildren (a daemonised data loader, say) re-parent to the sampler, so
    they stay in the measured tree and are reaped, instead of escaping to init."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def _terminal_delivered_to_group() -> bool:
    try:
        return os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp()
    except OSError:
        return False


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python3 -m infra.telemetry.sampler",
        description="Run COMMAND and record its CPU, memory, GPU, disk and network use as JSONL.",
    )
    parser.add_argument("--out", required=True, type=Path, help="JSONL file to append to")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between samples (default 5)")
    parser.add_argument("--step", default="", help="the workload step's name, for the records")
    parser.add_argument("--gpu", choices=("auto", "nvml", "nvidia-smi", "off"), default="auto")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        parser.error("no command: put it after --")
    if not 0.05 <= args.interval <= 3600:
        parser.error("--interval: use 0.05 to 3600 seconds")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a", buffering=1, encoding="utf-8") as out:
        offset = args.out.stat().st_size
        try:
            columns: ColumnWriter | None = ColumnWriter.open(columns_path(str(args.out)), offset)
        except OSError as error:
            # The JSONL alone is the whole record; the rows only make reading it fast.
            print(f"atlas-sampler: no column file ({error}); the JSONL has every sample", file=sys.stderr)
            columns = None
        sampler = Sampler(out, args.interval, gpu.open_gpu_reader(args.gpu), columns, offset)
        try:
            return sampler.run(command, args.step)
        finally:
            if columns is not None:
                columns.close()


if __name__ == "__main__":
    sys.exit(main())
