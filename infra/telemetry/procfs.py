"""Cheap readers of /proc: the process tree under one pid, the host's CPU, memory, disk and network.

Each reader returns plain numbers or raises `OSError`/`ValueError`; the sampler turns a
failure into a "not measured" record with the reason. Nothing here keeps file handles open.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
PROC = Path("/proc")


@dataclass(frozen=True)
class ProcessStat:
    pid: int
    ppid: int
    start_ticks: int  # since boot: tells a reused pid from the process it replaced
    cpu_ticks: int  # utime + stime
    rss_bytes: int


def read_process(pid: int, proc: Path = PROC) -> ProcessStat:
    raw = (proc / str(pid) / "stat").read_text()
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    fields = raw[raw.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state): utime is field 14, stime 15, starttime 22, rss 24.
    return ProcessStat(
        pid=pid,
        ppid=int(fields[1]),
        start_ticks=int(fields[19]),
        cpu_ticks=int(fields[11]) + int(fields[12]),
        rss_bytes=int(fields[21]) * PAGE_SIZE,
    )


def _children_from_task_files(pid: int, proc: Path) -> list[int] | None:
    """Children through /proc/<pid>/task/<tid>/children (CONFIG_PROC_CHILDREN), or None."""
    try:
        tids = os.listdir(proc / str(pid) / "task")
    except OSError:
        return []
    children: list[int] = []
    for tid in tids:
        try:
            children.extend(int(c) for c in (proc / str(pid) / "task" / tid / "children").read_text().split())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            continue
    return children


def process_tree(root: int, proc: Path = PROC) -> list[ProcessStat]:
    """`root` and all its live descendants. Walks the `children` files (a few reads per
    process); without them, scans every process's stat once."""
    tree: list[ProcessStat] = []
    pending = [root]
    seen: set[int] = set()
    while pending:
        pid = pending.pop()
        if pid in seen:
            continue
        seen.add(pid)
        try:
            tree.append(read_process(pid, proc))
        except (OSError, ValueError, IndexError):
            continue  # exited meanwhile
        children = _children_from_task_files(pid, proc)
        if children is None:
            return _process_tree_by_scan(root, proc)
        pending.extend(children)
    return tree


def _process_tree_by_scan(root: int, proc: Path) -> list[ProcessStat]:
    stats: dict[int, ProcessStat] = {}
    for name in os.listdir(proc):
        if name.isdigit():
            try:
                stats[int(name)] = read_process(int(name), proc)
            except (OSError, ValueError, IndexError):
                continue
    by_parent: dict[int, list[int]] = {}
    for stat in stats.values():
        by_parent.setdefault(stat.ppid, []).append(stat.pid)
    tree, pending = [], [root]
    while pending:
        pid = pending.pop()
        if pid in stats:
            tree.append(stats[pid])
            pending.extend(by_parent.get(pid, []))
    return tree


def read_process_io(pid: int, proc: Path = PROC) -> tuple[int, int]:
    """(read_bytes, write_bytes) that reached the storage layer, from /proc/<pid>/io."""
    values = {}
    for line in (proc / str(pid) / "io").read_text().splitlines():
        key, _, value = line.partition(":")
        values[key] = int(value)
    return values["read_bytes"], values["write_bytes"]


@dataclass(frozen=True)
class HostCpu:
    busy_ticks: int
    total_ticks: int
    cpus: int


def read_host_cpu(proc: Path = PROC) -> HostCpu:
    cpus = 0
    busy = total = 0
    for line in (proc / "stat").read_text().splitlines():
        if line.startswith("cpu "):
            # user nice system idle iowait irq softirq steal guest guest_nice; guest time is
            # already inside user and nice, so it is not added again.
            values = [int(v) for v in line.split()[1:]]
            values += [0] * (10 - len(values))
            idle = values[3] + values[4]
            total = sum(values[:8])
            busy = total - idle
        elif line.startswith("cpu"):
            cpus += 1
    return HostCpu(busy_ticks=busy, total_ticks=total, cpus=cpus)


def read_host_memory(proc: Path = PROC) -> tuple[int, int]:
    """(used, total) bytes; used = MemTotal - MemAvailable, what `free` calls used plus
    unreclaimable caches, not counting page cache that could be dropped."""
    values = {}
    for line in (proc / "meminfo").read_text().splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts:
            values[key] = int(parts[0]) * (1024 if len(parts) > 1 and parts[1] == "kB" else 1)
    total = values["MemTotal"]
    return total - values["MemAvailable"], total


def read_cgroup_memory(cgroup_root: Path = Path("/sys/fs/cgroup")) -> tuple[int, int | None] | None:
    """(used, limit or None for unlimited) of this process's cgroup v2, or None without one.
    In a container this is the pod's own memory, where /proc/meminfo shows the node's."""
    try:
        relative = ""
        for line in (PROC / "self" / "cgroup").read_text().splitlines():
            if line.startswith("0::"):
                relative = line[3:].strip().lstrip("/")
        base = cgroup_root / relative
        current = base / "memory.current"
        if not current.exists():
            base = cgroup_root
            current = base / "memory.current"
        used = int(current.read_text())
        limit_text = (base / "memory.max").read_text().strip()
    except (OSError, ValueError):
        return None
    return used, (None if limit_text == "max" else int(limit_text))


V1_PEAK_FILE = "memory.max_usage_in_bytes"
V2_PEAK_FILE = "memory.peak"


@dataclass(frozen=True)
class MemoryCgroup:
    """Where this process's memory cgroup is, and the file with its peak (the kernel's high-water
    mark of every page charged to the cgroup: its processes' memory, page cache included)."""

    version: int  # 1 or 2
    name: str  # the cgroup as /proc/self/cgroup names it
    folder: Path  # the cgroup's folder under its mount point
    peak_file: str


@dataclass(frozen=True)
class NoMemoryCgroup:
    reason: str


def _cgroup_paths(cgroup_text: str) -> tuple[str | None, str | None]:
    """(cgroup v1 memory path, cgroup v2 path) from /proc/self/cgroup text."""
    v1 = v2 = None
    for line in cgroup_text.splitlines():
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "":
            v2 = path.strip()
        elif "memory" in controllers.split(","):
            v1 = path.strip()
    return v1, v2


def _cgroup_mounts(mountinfo_text: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(v1 memory mounts, cgroup2 mounts), each as (root inside the hierarchy, mount point)."""
    v1: list[tuple[str, str]] = []
    v2: list[tuple[str, str]] = []
    for line in mountinfo_text.splitlines():
        # id parent major:minor root mount-point options [optional...] - fstype source super-options
        before, sep, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if not sep or len(fields) < 5 or len(tail) < 2:
            continue
        root, point = fields[3].replace("\\040", " "), fields[4].replace("\\040", " ")
        if tail[0] == "cgroup2":
            v2.append((root, point))
        elif tail[0] == "cgroup" and len(tail) > 2 and "memory" in tail[2].split(","):
            v1.append((root, point))
    return v1, v2


def _folder_of(path: str, mounts: list[tuple[str, str]]) -> Path | None:
    """The folder of cgroup `path` under the first mount whose root holds it. A container without
    its own cgroup namespace mounts its own cgroup (root = the container's cgroup) as the top."""
    for root, point in mounts:
        root = root.rstrip("/") or "/"
        if path == root or root == "/" or path.startswith(root + "/"):
            relative = path[len(root) :] if root != "/" else path
            return Path(point) / relative.lstrip("/")
    return None


def locate_memory_cgroup(cgroup_text: str, mountinfo_text: str) -> MemoryCgroup | NoMemoryCgroup:
    """This process's memory cgroup from /proc/self/cgroup and /proc/self/mountinfo (pure).

    v1 first: where the v1 memory controller is mounted, the v2 hierarchy has no memory files.
    The v1 root cgroup is the whole host, so it is refused; a v2 root has no memory.peak at all
    (the caller finds that out)."""
    v1_path, v2_path = _cgroup_paths(cgroup_text)
    v1_mounts, v2_mounts = _cgroup_mounts(mountinfo_text)
    if v1_path is not None and v1_mounts:
        if v1_path == "/":
            return NoMemoryCgroup("in the root memory cgroup (v1): its peak would be the whole host's")
        folder = _folder_of(v1_path, v1_mounts)
        if folder is None:
            return NoMemoryCgroup(f"memory cgroup {v1_path} (v1) is under no mounted memory hierarchy")
        return MemoryCgroup(1, v1_path, folder, V1_PEAK_FILE)
    if v2_path is not None and v2_mounts:
        folder = _folder_of(v2_path, v2_mounts)
        if folder is None:
            return NoMemoryCgroup(f"cgroup {v2_path} (v2) is under no mounted cgroup2 hierarchy")
        return MemoryCgroup(2, v2_path, folder, V2_PEAK_FILE)
    return NoMemoryCgroup("no memory cgroup: neither a v1 memory hierarchy nor cgroup2 is mounted for this process")


def find_memory_cgroup(proc: Path = PROC) -> MemoryCgroup | NoMemoryCgroup:
    """This process's memory cgroup, with its peak file checked to be readable."""
    try:
        found = locate_memory_cgroup((proc / "self" / "cgroup").read_text(), (proc / "self" / "mountinfo").read_text())
    except OSError as error:
        return NoMemoryCgroup(f"cannot read /proc/self/cgroup or mountinfo: {error}")
    if isinstance(found, NoMemoryCgroup):
        return found
    if not (found.folder / found.peak_file).is_file():
        if found.version == 2 and (found.folder / "memory.current").is_file():
            return NoMemoryCgroup(f"{found.folder}/memory.peak absent (a kernel before 5.19)")
        if found.version == 2 and found.name == "/":
            return NoMemoryCgroup("in the root cgroup (v2), which has no memory.peak: its peak would be the host's")
        return NoMemoryCgroup(f"{found.folder / found.peak_file} absent (no memory controller for this cgroup)")
    return found


# -- whose cgroup is it? ------------------------------------------------------------------------
# A cgroup's peak is the step's memory only where the cgroup holds the step's processes alone. The
# sampler knows its own cgroup's path (/proc/self/cgroup) and the scheduler's environment; these
# are the layouts that say "one job" or "one pod" (docs/telemetry.md, "Whose cgroup"):
# - Slurm, v1: /slurm[_<node>]/uid_<U>/job_<N>/step_<S>/task_<T> (task/cgroup or jobacct_gather/cgroup
#   make the memory cgroup); v2: .../[<node>_]slurmstepd.scope/job_<N>/step_<S>/user/task_<T>.
# - LSF (LSF_PROCESS_TRACKING=Y, LSF_LINUX_CGROUP_ACCT=Y): .../lsf/<cluster>/job.<N>.<index>.<submit time>.
# - Kubernetes: cgroupfs .../kubepods[/<qos>]/pod<uid>[/<container>]; systemd
#   /kubepods.slice/.../kubepods-<qos>-pod<uid>.slice[/cri-containerd-<id>.scope | crio-<id>.scope];
#   with a cgroup namespace (containerd and CRI-O on v2) the container sees its own cgroup as "/".
_SLURM_TOP = re.compile(r"^(slurm|slurm_.+|(.+_)?slurmstepd\.scope)$")
_SLURM_JOB = re.compile(r"^job_(\d+)$")
_LSF_JOB = re.compile(r"^job\.(\d+)(\.\d+)*$")
_POD = re.compile(r"^(pod([0-9a-f][0-9a-f_-]*)|kubepods(-[a-z]+)*-pod([0-9a-f_]+)\.slice)$")
_SESSION = re.compile(r"^(user\.slice|user-\d+\.slice|user@\d+\.service|session-.+\.scope)$")
# Where a scheduler said the step is one of its jobs, how its administrator gives jobs cgroups of their own.
_SLURM_FIX = (
    "Slurm gives a job a memory cgroup of its own only with TaskPlugin=task/cgroup "
    "(or JobAcctGatherType=jobacct_gather/cgroup)"
)
_LSF_FIX = "LSF gives a job cgroups of its own only with LSF_PROCESS_TRACKING=Y and LSF_LINUX_CGROUP_ACCT=Y"
_NOT_A_POD = (
    "a container's own cgroup namespace, but not a pod's (KUBERNETES_SERVICE_HOST is not set): "
    "nothing says the container runs the step alone"
)


@dataclass(frozen=True)
class CgroupVerdict:
    """Whether a memory cgroup is the step's own, and why (or why not), in words for the report."""

    own: bool
    owner: str  # "Slurm job 77", "Kubernetes pod 1b2c...", "" where not own
    reason: str


def _cgroup_kind(version: int, name: str) -> tuple[str, str]:
    """(kind, identity) of a cgroup path: slurm/lsf (job id), pod (uid), namespace (a v2 "/"), root,
    session, service (its unit), or other. Pure: the path as /proc/self/cgroup writes it."""
    parts = [part for part in name.split("/") if part]
    if not parts:
        # v2: the host's root has no memory.peak (find_memory_cgroup refuses it), so a "/" with a
        # peak is a cgroup namespace's root, a container's own cgroup. v1's root is the host's.
        return ("namespace", "") if version == 2 else ("root", "")
    # Deepest first: a job's cgroup inside a pod's (a slurmd in a pod, with cgroups) is the job's.
    for index in range(len(parts) - 1, -1, -1):
        part, above = parts[index], parts[:index]
        slurm = _SLURM_JOB.match(part)
        if slurm and any(_SLURM_TOP.match(p) for p in above):
            return "slurm", slurm.group(1)
        lsf = _LSF_JOB.match(part)
        if lsf and any(p == "lsf" or p.startswith("lsf.") for p in above):
            return "lsf", lsf.group(1)
        pod = _POD.match(part)
        if pod and any(p.startswith("kubepods") for p in [*above, part]):
            return "pod", (pod.group(2) or pod.group(4) or "").replace("_", "-")
    if any(_SESSION.match(part) for part in parts):
        return "session", next(part for part in reversed(parts) if _SESSION.match(part))
    if "system.slice" in parts and parts[-1].endswith(".service"):
        return "service", parts[-1]
    return "other", ""


def _describe(kind: str, ident: str) -> str:
    return {
        "root": "the root cgroup, the whole host's",
        "namespace": "a container's own cgroup namespace",
        "session": f"a login session's or user's cgroup ({ident}), shared by every process of that session",
        "service": f"a system service's cgroup ({ident}), shared by the service and everything it started",
        "pod": f"Kubernetes pod {ident}'s cgroup",
        "slurm": f"Slurm job {ident}'s cgroup",
        "lsf": f"LSF job {ident}'s cgroup",
    }.get(kind, "a path that names no job or pod")


def judge_memory_cgroup(version: int, name: str, environ: Mapping[str, str] | None) -> CgroupVerdict:
    """Whether cgroup `name` (v1 or v2, as /proc/self/cgroup names it) is the step's own, given the
    sampler's environment (pure). A scheduler's job comes first: under Slurm (SLURM_JOB_ID) or LSF
    (LSB_JOBID) only that job's cgroup is the step's, even where the path is a pod's (a slurmd in a
    pod runs every job in the pod's cgroup). Without one, a Kubernetes pod's cgroup is, and a v2
    namespace root is where KUBERNETES_SERVICE_HOST says the container is a pod's. Anything else
    (the root, a session or service, a path of no known layout) is not: its peak may be others'.
    `environ` None: not known (a record that did not keep it), so the path alone decides."""
    kind, ident = _cgroup_kind(version, name)
    where = f"v{version} cgroup {name}"
    known = environ is not None
    environ = environ or {}
    slurm_job, lsf_job = environ.get("SLURM_JOB_ID"), environ.get("LSB_JOBID")
    if kind in ("slurm", "lsf"):
        label, expected = ("Slurm", slurm_job) if kind == "slurm" else ("LSF", lsf_job)
        if expected is not None and expected != ident:
            return CgroupVerdict(False, "", f"{where} is {label} job {ident}'s, not this step's job {expected}'s")
        return CgroupVerdict(True, f"{label} job {ident}", f"{where} is {label} job {ident}'s own")
    if slurm_job is not None or lsf_job is not None:
        job, fix = (f"Slurm job {slurm_job}", _SLURM_FIX) if slurm_job is not None else (f"LSF job {lsf_job}", _LSF_FIX)
        # Without cgroups of its own, a job stays in the cgroup of the daemon that forked it.
        daemon = "slurmd" if slurm_job is not None else "LSF's sbatchd"
        where_runs = f"{job} runs in {daemon}'s {where} ({_describe(kind, ident)})"
        return CgroupVerdict(False, "", f"the step has no cgroup of its own on this site: {where_runs}; {fix}")
    if kind == "pod":
        return CgroupVerdict(True, f"Kubernetes pod {ident}", f"{where} is Kubernetes pod {ident}'s own")
    if kind == "namespace" and environ.get("KUBERNETES_SERVICE_HOST"):
        return CgroupVerdict(True, "the pod's container", f"{where} is the pod's container's own (a cgroup namespace)")
    if kind == "namespace":
        what = _NOT_A_POD if known else f"{_describe(kind, ident)}, and whether the container was a pod's is not known"
    else:
        what = _describe(kind, ident)
        what += ", and the step is no Slurm or LSF job and in no Kubernetes pod" if known else ""
    return CgroupVerdict(False, "", f"the step has no cgroup of its own: {where} is {what}")


def read_memory_cgroup_peak(cgroup: MemoryCgroup) -> int:
    """The cgroup's peak in bytes since it was created (or since someone reset it)."""
    return int((cgroup.folder / cgroup.peak_file).read_text().split()[0])


def read_disk_bytes(proc: Path = PROC) -> tuple[int, int]:
    """(read, written) bytes since boot over whole block devices (partitions, loop, ram and
    device-mapper devices are left out so nothing is counted twice)."""
    read = written = 0
    sys_block = Path("/sys/block")
    whole_disks = set(os.listdir(sys_block)) if sys_block.exists() else None
    for line in (proc / "diskstats").read_text().splitlines():
        fields = line.split()
        if len(fields) < 10:
            continue
        name = fields[2]
        if name.startswith(("loop", "ram", "dm-", "zram")):
            continue
        if whole_disks is not None and name not in whole_disks:
            continue  # a partition
        # Sectors are always 512 bytes in diskstats, whatever the device's sector size.
        read += int(fields[5]) * 512
        written += int(fields[9]) * 512
    return read, written


def read_network_bytes(proc: Path = PROC) -> tuple[int, int]:
    """(received, transmitted) bytes since boot over this network namespace's interfaces, loopback excluded."""
    received = transmitted = 0
    for line in (proc / "net" / "dev").read_text().splitlines()[2:]:
        name, _, rest = line.partition(":")
        if name.strip() == "lo":
            continue
        fields = rest.split()
        received += int(fields[0])
        transmitted += int(fields[8])
    return received, transmitted
