"""Finding the step's memory cgroup and its peak: /proc/self/cgroup and mountinfo as each kind of
host and container writes them (this machine's recorded under tests/unit/data)."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.telemetry.procfs import (
    MemoryCgroup,
    NoMemoryCgroup,
    find_memory_cgroup,
    locate_memory_cgroup,
    read_memory_cgroup_peak,
)

DATA = Path(__file__).parent / "data"
THIS_HOST_CGROUP = (DATA / "proc_self_cgroup_v1.txt").read_text()
THIS_HOST_MOUNTS = (DATA / "proc_self_mountinfo_v1.txt").read_text()
CID = "3f2a9c"
# A runc container on cgroup v1 without a cgroup namespace: the full path in /proc/self/cgroup,
# its own cgroup bind-mounted as the top of each hierarchy (mountinfo's root field).
V1_CONTAINER_CGROUP = f"12:memory:/kubepods/burstable/pod42/{CID}\n3:cpu,cpuacct:/kubepods/burstable/pod42/{CID}\n"
V1_CONTAINER_MOUNTS = (
    f"1501 1500 0:32 /kubepods/burstable/pod42/{CID} /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory\n"
)
V2_MOUNT = "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate\n"
# cgroup v2 with a cgroup namespace (containerd, Docker on v2): the container sees itself as "/".
V2_CONTAINER_MOUNTS = "700 690 0:26 / /sys/fs/cgroup ro,nosuid - cgroup2 cgroup rw\n"
SLURM_V1 = "10:memory:/slurm/uid_1000/job_77/step_0/task_0\n"
V1_MEMORY_MOUNT = "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"

FOUND = [
    (
        "this host: cgroup v1, memory beside a cgroup2 without it",
        THIS_HOST_CGROUP,
        THIS_HOST_MOUNTS,
        MemoryCgroup(
            1,
            "/process_api/ecd3888afa263da5d312bc8c6e67e102",
            Path("/sys/fs/cgroup/memory/process_api/ecd3888afa263da5d312bc8c6e67e102"),
            "memory.max_usage_in_bytes",
        ),
    ),
    (
        "v1 container, no cgroup namespace",
        V1_CONTAINER_CGROUP,
        V1_CONTAINER_MOUNTS,
        MemoryCgroup(1, f"/kubepods/burstable/pod42/{CID}", Path("/sys/fs/cgroup/memory"), "memory.max_usage_in_bytes"),
    ),
    (
        "Slurm task cgroup, v1",
        SLURM_V1,
        V1_MEMORY_MOUNT,
        MemoryCgroup(
            1,
            "/slurm/uid_1000/job_77/step_0/task_0",
            Path("/sys/fs/cgroup/memory/slurm/uid_1000/job_77/step_0/task_0"),
            "memory.max_usage_in_bytes",
        ),
    ),
    (
        "v2 host, a systemd scope",
        "0::/user.slice/user-1000.slice/session-3.scope\n",
        V2_MOUNT,
        MemoryCgroup(
            2,
            "/user.slice/user-1000.slice/session-3.scope",
            Path("/sys/fs/cgroup/user.slice/user-1000.slice/session-3.scope"),
            "memory.peak",
        ),
    ),
    (
        "v2 container with its own cgroup namespace",
        "0::/\n",
        V2_CONTAINER_MOUNTS,
        MemoryCgroup(2, "/", Path("/sys/fs/cgroup"), "memory.peak"),
    ),
]

REFUSED = [
    ("v1 root cgroup: the whole host", "4:memory:/\n", V1_MEMORY_MOUNT, "root memory cgroup"),
    ("no cgroup file systems", "0::/\n", "27 1 254:0 / / rw - ext4 /dev/vda rw\n", "no memory cgroup"),
    (
        "v1 path outside the mounted hierarchy",
        "4:memory:/other/place\n",
        V1_CONTAINER_MOUNTS,
        "under no mounted memory hierarchy",
    ),
]


@pytest.mark.parametrize(("case", "cgroup", "mounts", "expected"), FOUND, ids=[c[0] for c in FOUND])
def test_locate_memory_cgroup(case: str, cgroup: str, mounts: str, expected: MemoryCgroup) -> None:
    assert locate_memory_cgroup(cgroup, mounts) == expected


@pytest.mark.parametrize(("case", "cgroup", "mounts", "reason"), REFUSED, ids=[c[0] for c in REFUSED])
def test_locate_memory_cgroup_says_why_not(case: str, cgroup: str, mounts: str, reason: str) -> None:
    found = locate_memory_cgroup(cgroup, mounts)
    assert isinstance(found, NoMemoryCgroup)
    assert reason in found.reason


def _fake_proc(tmp_path: Path, cgroup: str, mounts: str) -> Path:
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text(cgroup)
    (proc / "self" / "mountinfo").write_text(mounts)
    return proc


def test_find_and_read_a_v2_peak(tmp_path: Path) -> None:
    folder = tmp_path / "cg" / "job"
    folder.mkdir(parents=True)
    (folder / "memory.peak").write_text("734003200\n")
    proc = _fake_proc(tmp_path, "0::/job\n", f"30 23 0:26 / {tmp_path / 'cg'} rw - cgroup2 cgroup2 rw\n")
    found = find_memory_cgroup(proc)
    assert isinstance(found, MemoryCgroup)
    assert read_memory_cgroup_peak(found) == 734003200


@pytest.mark.parametrize(
    ("files", "path", "reason"),
    [
        (("memory.current",), "/job", "memory.peak absent (a kernel before 5.19)"),
        ((), "/job", "no memory controller for this cgroup"),
        ((), "/", "root cgroup (v2)"),
    ],
)
def test_find_says_why_a_v2_peak_is_missing(tmp_path: Path, files: tuple[str, ...], path: str, reason: str) -> None:
    folder = tmp_path / "cg" / path.lstrip("/")
    folder.mkdir(parents=True, exist_ok=True)
    for name in files:
        (folder / name).write_text("1\n")
    proc = _fake_proc(tmp_path, f"0::{path}\n", f"30 23 0:26 / {tmp_path / 'cg'} rw - cgroup2 cgroup2 rw\n")
    found = find_memory_cgroup(proc)
    assert isinstance(found, NoMemoryCgroup)
    assert reason in found.reason


def test_find_without_proc_files_says_so(tmp_path: Path) -> None:
    found = find_memory_cgroup(tmp_path)
    assert isinstance(found, NoMemoryCgroup) and "cannot read /proc/self/cgroup" in found.reason
