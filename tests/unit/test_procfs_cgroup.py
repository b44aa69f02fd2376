"""Finding the step's memory cgroup and its peak: /proc/self/cgroup and mountinfo as each kind of
host and container writes them (this machine's recorded under tests/unit/data)."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.telemetry.procfs import (
    CgroupVerdict,
    MemoryCgroup,
    NoMemoryCgroup,
    find_memory_cgroup,
    judge_memory_cgroup,
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


# -- whose cgroup: the step's own, or shared ------------------------------------------------------
# /proc/self/cgroup as each kind of site writes it for a step's process, with the mounts it sees and
# the scheduler's environment; the judge must trust only a job's or a pod's cgroup.
POD_UID = "0f1e2d3c-4b5a-6978-8a9b-0c1d2e3f4a5b"
SLURM_ENV = {"SLURM_JOB_ID": "77"}
LSF_ENV = {"LSB_JOBID": "1234"}
KUBE_ENV = {"KUBERNETES_SERVICE_HOST": "10.96.0.1"}
OWNED = [
    # (case, /proc/self/cgroup, mountinfo, environment, owner)
    (
        "Slurm v1, task/cgroup: the batch step's task",
        "11:freezer:/slurm/uid_1000/job_77/step_batch\n10:memory:/slurm/uid_1000/job_77/step_batch/task_0\n",
        V1_MEMORY_MOUNT,
        SLURM_ENV,
        "Slurm job 77",
    ),
    (
        "Slurm v1 as Debian builds it (/slurm_<node>), recorded on the local Satori",
        "4:memory:/slurm_vm/uid_1001/job_77/step_batch/task_0\n",
        V1_MEMORY_MOUNT,
        SLURM_ENV,
        "Slurm job 77",
    ),
    (
        "Slurm v2: slurmstepd's scope",
        "0::/system.slice/slurmstepd.scope/job_77/step_batch/user/task_0\n",
        V2_MOUNT,
        SLURM_ENV,
        "Slurm job 77",
    ),
    (
        "Slurm v2, several slurmd on one host: <node>_slurmstepd.scope",
        "0::/system.slice/node7_slurmstepd.scope/job_77/step_0/user/task_0\n",
        V2_MOUNT,
        SLURM_ENV,
        "Slurm job 77",
    ),
    (
        "LSF v1: the job's cgroup under lsf/<cluster>",
        "9:memory:/lsf/satori/job.1234.0.1733300000\n",
        V1_MEMORY_MOUNT,
        LSF_ENV,
        "LSF job 1234",
    ),
    (
        "LSF stand-in: a Slurm job with LSF's environment too",
        "4:memory:/slurm_vm/uid_1001/job_77/step_batch/task_0\n",
        V1_MEMORY_MOUNT,
        {**SLURM_ENV, "LSB_JOBID": "77"},
        "Slurm job 77",
    ),
    (
        "Kubernetes v1, cgroupfs driver: the container under its pod",
        f"12:memory:/kubepods/burstable/pod{POD_UID}/{CID}\n",
        V1_MEMORY_MOUNT,
        KUBE_ENV,
        f"Kubernetes pod {POD_UID}",
    ),
    (
        "Kubernetes v1, a kubelet with its own cgroupRoot (the local node's)",
        f"4:memory:/atlas-16000/kubepods/besteffort/pod{POD_UID}/{CID}\n",
        V1_MEMORY_MOUNT,
        KUBE_ENV,
        f"Kubernetes pod {POD_UID}",
    ),
    (
        "Kubernetes v2, systemd driver, no cgroup namespace (CRI-O)",
        "0::/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{POD_UID.replace('-', '_')}.slice/crio-{CID}.scope\n",
        V2_MOUNT,
        KUBE_ENV,
        f"Kubernetes pod {POD_UID}",
    ),
    (
        "Kubernetes v2 with a cgroup namespace: the container sees itself as /",
        "0::/\n",
        V2_CONTAINER_MOUNTS,
        KUBE_ENV,
        "the pod's container",
    ),
]
SHARED = [
    # (case, /proc/self/cgroup, mountinfo, environment, what the reason must say)
    (
        "Slurm without cgroups (proctrack/linuxproc): slurmd's cgroup, recorded on the local Satori",
        "4:memory:/process_api/01923d5499f1b9241da00a45fb1155bd\n",
        V1_MEMORY_MOUNT,
        SLURM_ENV,
        "the step has no cgroup of its own on this site: Slurm job 77 runs in slurmd's v1 cgroup "
        "/process_api/01923d5499f1b9241da00a45fb1155bd (a path that names no job or pod); "
        "Slurm gives a job a memory cgroup of its own only with TaskPlugin=task/cgroup",
    ),
    (
        "Slurm without cgroups on a systemd host: slurmd.service",
        "0::/system.slice/slurmd.service\n",
        V2_MOUNT,
        SLURM_ENV,
        "Slurm job 77 runs in slurmd's v2 cgroup /system.slice/slurmd.service (a system service's cgroup "
        "(slurmd.service), shared by the service and everything it started)",
    ),
    (
        "another job's cgroup",
        "10:memory:/slurm/uid_1000/job_76/step_0/task_0\n",
        V1_MEMORY_MOUNT,
        SLURM_ENV,
        "v1 cgroup /slurm/uid_1000/job_76/step_0/task_0 is Slurm job 76's, not this step's job 77's",
    ),
    (
        "a slurmd in a pod without job cgroups: the pod's cgroup holds every job",
        f"12:memory:/kubepods/burstable/pod{POD_UID}/{CID}\n",
        V1_MEMORY_MOUNT,
        {**SLURM_ENV, **KUBE_ENV},
        f"Slurm job 77 runs in slurmd's v1 cgroup /kubepods/burstable/pod{POD_UID}/{CID} (Kubernetes pod {POD_UID}'s",
    ),
    (
        "LSF without cgroup tracking: sbatchd's cgroup",
        "0::/system.slice/lsfd.service\n",
        V2_MOUNT,
        LSF_ENV,
        "LSF job 1234 runs in LSF's sbatchd's v2 cgroup /system.slice/lsfd.service (a system service's cgroup "
        "(lsfd.service), shared by the service and everything it started); LSF gives a job cgroups of its own "
        "only with LSF_PROCESS_TRACKING=Y and LSF_LINUX_CGROUP_ACCT=Y",
    ),
    (
        "a login session (the step run by hand over SSH)",
        "0::/user.slice/user-1000.slice/session-3.scope\n",
        V2_MOUNT,
        {},
        "v2 cgroup /user.slice/user-1000.slice/session-3.scope is a login session's or user's cgroup "
        "(session-3.scope), shared by every process of that session, and the step is no Slurm or LSF job",
    ),
    (
        "a container's namespace root outside Kubernetes (docker run)",
        "0::/\n",
        V2_CONTAINER_MOUNTS,
        {},
        "v2 cgroup / is a container's own cgroup namespace, but not a pod's (KUBERNETES_SERVICE_HOST is not set)",
    ),
    (
        "a QoS class's cgroup, above every pod of that class",
        "12:memory:/kubepods/burstable\n",
        V1_MEMORY_MOUNT,
        KUBE_ENV,
        "v1 cgroup /kubepods/burstable is a path that names no job or pod",
    ),
    (
        "a sandbox's per-command cgroup (the device machine's, this machine's)",
        THIS_HOST_CGROUP,
        THIS_HOST_MOUNTS,
        {},
        "v1 cgroup /process_api/ecd3888afa263da5d312bc8c6e67e102 is a path that names no job or pod",
    ),
]


def _judged(cgroup: str, mounts: str, environ: dict[str, str]) -> CgroupVerdict:
    found = locate_memory_cgroup(cgroup, mounts)
    assert isinstance(found, MemoryCgroup), found
    return judge_memory_cgroup(found.version, found.name, environ)


@pytest.mark.parametrize(("case", "cgroup", "mounts", "environ", "owner"), OWNED, ids=[c[0] for c in OWNED])
def test_a_job_s_or_a_pod_s_cgroup_is_the_step_s_own(
    case: str, cgroup: str, mounts: str, environ: dict[str, str], owner: str
) -> None:
    verdict = _judged(cgroup, mounts, environ)
    assert (verdict.own, verdict.owner) == (True, owner), verdict.reason
    assert verdict.reason.endswith("own") or verdict.reason.endswith("(a cgroup namespace)")


@pytest.mark.parametrize(("case", "cgroup", "mounts", "environ", "reason"), SHARED, ids=[c[0] for c in SHARED])
def test_any_other_cgroup_is_refused_with_the_reason(
    case: str, cgroup: str, mounts: str, environ: dict[str, str], reason: str
) -> None:
    verdict = _judged(cgroup, mounts, environ)
    assert (verdict.own, verdict.owner) == (False, "")
    assert reason in verdict.reason, verdict.reason


def test_without_the_environment_the_path_alone_decides() -> None:
    """The report judges records of samplers from before the check from the path alone (None: the
    environment was not recorded), and says no more than the path does."""
    assert judge_memory_cgroup(1, "/slurm/uid_1000/job_77/step_0/task_0", None).owner == "Slurm job 77"
    assert judge_memory_cgroup(2, f"/kubepods.slice/kubepods-pod{POD_UID.replace('-', '_')}.slice", None).own
    namespace = judge_memory_cgroup(2, "/", None)  # a pod's container, or any container's: not known
    assert namespace.own is False and namespace.reason == (
        "the step has no cgroup of its own: v2 cgroup / is a container's own cgroup namespace, "
        "and whether the container was a pod's is not known"
    )
    sandbox = judge_memory_cgroup(2, "/process_api/357a1b", None)
    assert sandbox.reason == (
        "the step has no cgroup of its own: v2 cgroup /process_api/357a1b is a path that names no job or pod"
    )
    # v1's root (locate_memory_cgroup refuses it before; an old record may still name it).
    assert judge_memory_cgroup(1, "/", {}).reason == (
        "the step has no cgroup of its own: v1 cgroup / is the root cgroup, the whole host's, "
        "and the step is no Slurm or LSF job and in no Kubernetes pod"
    )
