"""The sampler on live process trees: what it sees, what it forwards, what survives a kill."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from infra.telemetry.gpu import open_gpu_reader
from infra.telemetry.parsers.sampler_jsonl import parse_sampler_jsonl
from tests.support import wait_until

REPO = Path(__file__).resolve().parents[2]
SAMPLER = [sys.executable, "-m", "infra.telemetry.sampler"]
ALLOCATE_BYTES = 150 * 1024 * 1024

# A grandchild that holds 150 MiB (touched, so resident) and burns CPU for 1.5 s.
GRANDCHILD = (
    "import time\n"
    f"block = bytearray({ALLOCATE_BYTES})\n"
    "for i in range(0, len(block), 4096): block[i] = 1\n"
    "end = time.time() + 1.5\n"
    "while time.time() < end: pass\n"
)


def start_sampler(out: Path, command: list[str], interval: float = 0.2, *extra: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen(
        [*SAMPLER, "--out", str(out), "--interval", str(interval), "--step", "test", *extra, "--", *command],
        cwd=REPO,
        env=env,
    )


def records(path: Path) -> list[dict]:  # type: ignore[type-arg]
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_tree_cpu_and_rss_are_seen_and_the_exit_code_propagates(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    # bash (child) -> python (grandchild); bash exits 3 after it.
    script = f"{shlex.quote(sys.executable)} -c {shlex.quote(GRANDCHILD)}; exit 3"
    sampler = start_sampler(out, ["bash", "-c", script])
    assert sampler.wait(timeout=20) == 3
    run = parse_sampler_jsonl(out.read_text())
    assert run.exit_code == 3
    assert run.argv[0] == "bash"
    assert len(run.samples) >= 3
    assert max(s.tree_rss_bytes or 0 for s in run.samples) >= ALLOCATE_BYTES
    # A busy loop is about one core; allow for a loaded machine.
    assert max(s.tree_cpu_percent or 0 for s in run.samples) >= 40
    assert all(s.host_memory_total_bytes and s.host_memory_total_bytes > 0 for s in run.samples)
    raw = records(out)
    assert max(r["cpu"]["tree_processes"] for r in raw if r["type"] == "sample") >= 2
    assert raw[-1]["type"] == "end" and raw[-1]["duration_s"] > 1


def _fresh_v1_memory_cgroup(relative: str) -> list[Path]:
    """New memory cgroups (v1) below this test's own, deepest last, or a skip saying why none can be
    made here. Not being root is no such reason: the test asks for the `root` fixture, which fails
    (CI runs as root)."""
    from infra.telemetry.procfs import MemoryCgroup, find_memory_cgroup

    own = find_memory_cgroup()
    if not isinstance(own, MemoryCgroup) or own.version != 1:
        pytest.skip(f"needs a cgroup v1 memory hierarchy: {getattr(own, 'reason', 'this one is cgroup v2')}")
    made: list[Path] = []
    folder = own.folder
    try:
        for part in relative.split("/"):
            folder = folder / part
            folder.mkdir()
            made.append(folder)
    except OSError as error:
        _remove(made)
        pytest.skip(f"cannot create a memory cgroup here, even as root ({error}): a read-only or foreign hierarchy")
    return made


def _remove(cgroups: list[Path]) -> None:
    for folder in reversed(cgroups):  # deepest first; each is empty once its processes have exited
        folder.rmdir()


def _sample_in_cgroup(tmp_path: Path, folder: Path, env: dict[str, str]) -> Path:
    out = tmp_path / "t.jsonl"
    script = f"{shlex.quote(sys.executable)} -c {shlex.quote(GRANDCHILD)}"
    sampler = subprocess.Popen(
        [*SAMPLER, "--out", str(out), "--interval", "0.2", "--", "bash", "-c", script],
        cwd=REPO,
        env={**env, "PYTHONPATH": str(REPO)},
        # Join the cgroup between fork and exec, so the sampler's whole life is counted there.
        preexec_fn=lambda: (folder / "cgroup.procs").write_text(str(os.getpid())),
    )
    assert sampler.wait(timeout=20) == 0
    return out


# The scheduler's and Kubernetes' variables the sampler judges its cgroup by: each test sets its own.
_CONTEXT = ("SLURM_JOB_ID", "LSB_JOBID", "KUBERNETES_SERVICE_HOST")


@pytest.mark.usefixtures("root")
def test_a_job_s_own_cgroup_gives_the_peak_beside_the_rss_sum(tmp_path: Path) -> None:
    """The sampler in a cgroup laid out as Slurm's task/cgroup lays out a job's (job_<N> under a
    slurm_<node> top), with SLURM_JOB_ID=N as slurmstepd sets it: the cgroup is the step's own, so
    its peak is read; it covers the grandchild's 150 MiB and started below it (the kernel's mark
    since creation). A real Slurm job's recording is tests/unit/data/sampler_slurm_job_cgroup_v1.jsonl."""
    job = str(os.getpid())
    made = _fresh_v1_memory_cgroup(f"slurm_atlastest/uid_0/job_{job}/step_0")
    env = {k: v for k, v in os.environ.items() if k not in _CONTEXT}
    try:
        out = _sample_in_cgroup(tmp_path, made[-1], {**env, "SLURM_JOB_ID": job})
    finally:
        _remove(made)
    run = parse_sampler_jsonl(out.read_text())
    assert run.memory_cgroup is not None and run.memory_cgroup.startswith("v1 /")
    assert run.memory_cgroup.endswith(f"/slurm_atlastest/uid_0/job_{job}/step_0")
    assert run.memory_cgroup_own is True
    assert run.memory_source == "cgroup_peak"
    assert run.memory_source_why == f"v1 cgroup {run.memory_cgroup[3:]} is Slurm job {job}'s own"
    assert run.cgroup_peak_at_start_bytes is not None and run.cgroup_peak_at_start_bytes < ALLOCATE_BYTES
    peaks = [s.cgroup_peak_bytes for s in run.samples if s.cgroup_peak_bytes is not None]
    assert len(peaks) == len(run.samples), [s.cgroup_peak_reason for s in run.samples]
    assert max(peaks) >= ALLOCATE_BYTES
    assert peaks == sorted(peaks)  # a high-water mark never falls


@pytest.mark.usefixtures("root")
def test_a_cgroup_that_is_not_the_step_s_own_is_named_and_its_peak_not_read(tmp_path: Path) -> None:
    """The same, in a cgroup of no job's or pod's layout and with SLURM_JOB_ID set (a Slurm without
    task/cgroup leaves its jobs in slurmd's cgroup): no peak in any sample, the reason in each and in
    the start record's memory_figure, and the RSS sum still there."""
    made = _fresh_v1_memory_cgroup(f"atlas-test-sampler-{os.getpid()}")
    env = {k: v for k, v in os.environ.items() if k not in _CONTEXT}
    try:
        out = _sample_in_cgroup(tmp_path, made[-1], {**env, "SLURM_JOB_ID": "77"})
    finally:
        _remove(made)
    run = parse_sampler_jsonl(out.read_text())
    assert run.memory_cgroup is not None and run.memory_cgroup.endswith(f"/atlas-test-sampler-{os.getpid()}")
    assert run.memory_cgroup_own is False and run.memory_source == "tree_rss"
    why = "the step has no cgroup of its own on this site: Slurm job 77 runs in slurmd's v1 cgroup"
    assert run.memory_source_why is not None and run.memory_source_why.startswith(why)
    assert run.memory_cgroup_reason == run.memory_source_why and run.cgroup_peak_at_start_bytes is None
    assert run.samples and all(s.cgroup_peak_bytes is None for s in run.samples)
    assert all(s.cgroup_peak_reason == run.memory_source_why for s in run.samples)
    assert max(s.tree_rss_bytes or 0 for s in run.samples) >= ALLOCATE_BYTES


def test_sigterm_is_forwarded_and_the_childs_exit_code_returned(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    marker = tmp_path / "ready"
    child = (
        "import pathlib, signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(7))\n"
        f"pathlib.Path({str(marker)!r}).touch()\n"
        "time.sleep(30)\n"
    )
    sampler = start_sampler(out, [sys.executable, "-c", child])
    wait_until(marker.exists, "the child to install its SIGTERM handler", 10, pause=0.05)
    sampler.send_signal(signal.SIGTERM)
    assert sampler.wait(timeout=10) == 7
    kinds = [r["type"] for r in records(out)]
    assert kinds[0] == "start" and kinds[-1] == "end"
    signal_record = next(r for r in records(out) if r["type"] == "signal")
    assert signal_record["signal"] == "SIGTERM"
    assert signal_record["forwarded_to"] == records(out)[0]["pid"]
    assert records(out)[-1]["exit_code"] == 7


def test_a_child_killed_by_a_signal_exits_128_plus_n(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    sampler = start_sampler(out, ["bash", "-c", "kill -KILL $$"])
    assert sampler.wait(timeout=10) == 128 + 9
    end = records(out)[-1]
    assert (end["exit_code"], end["signal"]) == (137, "SIGKILL")


def test_records_survive_a_kill_9_of_the_sampler_and_the_job_is_not_killed(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    sampler = start_sampler(out, ["sleep", "30"], 0.1)
    wait_until(lambda: out.exists() and out.read_text().count('"type":"sample"') >= 3, "three samples written", 10,
               pause=0.05)
    child_pid = records(out)[0]["pid"]
    sampler.kill()
    sampler.wait(timeout=5)
    try:
        run = parse_sampler_jsonl(out.read_text())
        assert run.skipped_lines == 0  # every line written is whole
        assert len(run.samples) >= 3
        assert run.exit_code is None
        os.kill(child_pid, 0)  # the job still runs: the sampler never kills it
    finally:
        os.kill(child_pid, signal.SIGKILL)


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this machine has an NVIDIA driver")
def test_unreadable_gpu_is_written_as_not_measured_with_the_reason(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    sampler = start_sampler(out, ["sleep", "0.5"], 0.1, "--gpu", "nvml")
    assert sampler.wait(timeout=10) == 0
    samples = [r for r in records(out) if r["type"] == "sample"]
    assert samples
    for sample in samples:
        assert sample["gpu"]["measured"] is False
        assert "libnvidia-ml.so.1 not found" in sample["gpu"]["reason"] or "nvidia-ml-py" in sample["gpu"]["reason"]
        assert "devices" not in sample["gpu"]  # no zeros standing in for a missing reading
    assert "nvidia-smi is not on PATH" in open_gpu_reader("auto").read()["reason"]
    assert open_gpu_reader("off").read() == {"measured": False, "reason": "GPU sampling turned off (--gpu off)"}


def test_the_nvidia_smi_fallback_reads_memory_used_and_total(tmp_path: Path) -> None:
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho '0, 97, 8361, 143771'\n")
    fake.chmod(0o755)
    out = tmp_path / "t.jsonl"
    env_path = f"{fake.parent}:{os.environ['PATH']}"
    env = {**os.environ, "PYTHONPATH": str(REPO), "PATH": env_path}
    result = subprocess.run(
        [*SAMPLER, "--out", str(out), "--interval", "0.1", "--gpu", "nvidia-smi", "--", "sleep", "0.35"],
        cwd=REPO,
        env=env,
        timeout=10,
    )
    assert result.returncode == 0
    sample = next(r for r in records(out) if r["type"] == "sample")
    assert sample["gpu"]["source"] == "nvidia-smi"
    device = sample["gpu"]["devices"][0]
    assert device["utilization_percent"] == 97
    assert device["memory_used_bytes"] == 8361 << 20
    assert device["memory_total_bytes"] == 143771 << 20


def test_a_command_that_cannot_start_is_recorded(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    sampler = start_sampler(out, ["/nonexistent/command"])
    assert sampler.wait(timeout=10) == 127
    assert records(out)[-1] == {**records(out)[-1], "type": "end", "exit_code": 127}
