"""Records the tests check Atlas's report against, parsed: ones the collectors never read.

- Slurm's job-completion log (JobCompType=jobcomp/filetxt): one line per job, written by
  slurmctld's jobcomp plugin when the job ends. The collector reads `squeue -O` instead.
- containerd's CRI status checkpoint of a container (`<root>/io.containerd.grpc.v1.cri/
  containers/<id>/status`): the start and exit times containerd itself recorded, in
  nanoseconds. The collector reads the API server's pod status, which the kubelet copies from
  containerd at one-second resolution.

Pure functions over text, so the parsing is tested on recorded lines (tests/unit/data).
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from zoneinfo import ZoneInfo

# The plugin's format (src/plugins/jobcomp/filetxt/jobcomp_filetxt.c, JOB_FORMAT; the same in
# Slurm 22.05 as installed here and upstream): fixed keys in a fixed order, values unquoted.
# Name and WorkDir may hold spaces, so a line is not split on spaces but matched key by key.
JOBCOMP_KEYS = (
    "JobId", "UserId", "GroupId", "Name", "JobState", "Partition", "TimeLimit", "StartTime", "EndTime",
    "NodeList", "NodeCnt", "ProcCnt", "WorkDir", "ReservationName", "Tres", "Account", "QOS", "WcKey",
    "Cluster", "SubmitTime", "EligibleTime",
)  # fmt: skip
_JOBCOMP_LINE = re.compile(
    "^"
    + " ".join(f"{key}=(?P<{key}>.*?)" for key in JOBCOMP_KEYS)
    # Only for array tasks and heterogeneous job components.
    + r"(?: ArrayJobId=(?P<ArrayJobId>\d+) ArrayTaskId=(?P<ArrayTaskId>\d+))?"
    + r"(?: HetJobId=(?P<HetJobId>\d+) HetJobOffset=(?P<HetJobOffset>\d+))?"
    + r" DerivedExitCode=(?P<DerivedExitCode>\d+:\d+) ExitCode=(?P<ExitCode>\d+:\d+) ?$"
)
# The plugin writes times with strftime("%FT%T") in slurmctld's local time zone, no offset;
# "Unknown" for a time never set (or a start after the end), "unknown" for a missing submit time.
_JOBCOMP_TIME = "%Y-%m-%dT%H:%M:%S"
_NO_TIME = ("Unknown", "unknown")
_ID_NAME = re.compile(r"^(?P<name>.*)\((?P<id>\d+)\)$")


@dataclass(frozen=True)
class JobCompletion:
    """One jobcomp/filetxt record. Times are epoch seconds (whole seconds, as logged)."""

    job_id: int
    name: str
    user: str
    uid: int
    state: str
    partition: str
    node_list: str | None
    node_count: int
    submitted_at: float | None
    eligible_at: float | None
    # None for a job that never ran: cancelled while pending, Slurm logs StartTime=EndTime.
    started_at: float | None
    ended_at: float | None
    exit_status: int
    exit_signal: int
    array_job_id: int | None
    array_task_id: int | None
    fields: Mapping[str, str]


def _time(text: str, zone: dt.tzinfo) -> float | None:
    if text in _NO_TIME:
        return None
    return dt.datetime.strptime(text, _JOBCOMP_TIME).replace(tzinfo=zone).timestamp()


def _optional_int(text: str | None) -> int | None:
    return int(text) if text is not None else None


def parse_jobcomp_line(line: str, zone: dt.tzinfo) -> JobCompletion:
    """One line of the log; `zone` is slurmctld's local time zone (the log's times carry none).
    ValueError for a line not in the plugin's format."""
    match = _JOBCOMP_LINE.match(line.rstrip("\n"))
    if match is None:
        raise ValueError(f"not a jobcomp/filetxt line: {line!r}")
    fields = {k: v for k, v in match.groupdict().items() if v is not None}
    user = _ID_NAME.match(fields["UserId"])
    if user is None:
        raise ValueError(f"UserId is not name(uid): {fields['UserId']!r}")
    node_count = int(fields["NodeCnt"])
    status, signal = (int(part) for part in fields["ExitCode"].split(":"))
    return JobCompletion(
        job_id=int(fields["JobId"]),
        name=fields["Name"],
        user=user["name"],
        uid=int(user["id"]),
        state=fields["JobState"],
        partition=fields["Partition"],
        node_list=None if fields["NodeList"] == "(null)" else fields["NodeList"],
        node_count=node_count,
        submitted_at=_time(fields["SubmitTime"], zone),
        eligible_at=_time(fields["EligibleTime"], zone),
        started_at=_time(fields["StartTime"], zone) if node_count > 0 else None,
        ended_at=_time(fields["EndTime"], zone),
        exit_status=status,
        exit_signal=signal,
        array_job_id=_optional_int(fields.get("ArrayJobId")),
        array_task_id=_optional_int(fields.get("ArrayTaskId")),
        fields=fields,
    )


def parse_jobcomp_log(text: str, zone: dt.tzinfo) -> dict[int, JobCompletion]:
    """The log's records by job id. A requeued job ends more than once; its last record is
    the one that describes the run that counted (the log is append-only, in time order)."""
    records: dict[int, JobCompletion] = {}
    for line in text.splitlines():
        if line.strip():
            record = parse_jobcomp_line(line, zone)
            records[record.job_id] = record
    return records


def process_zone(environ: Mapping[str, str], localtime: Path = Path("/etc/localtime")) -> dt.tzinfo:
    """The time zone glibc's localtime_r() uses in a process with this environment: TZ if set
    (":Area/City", "Area/City" or a zone file path), else the system's /etc/localtime.
    ValueError for a POSIX rule string (e.g. "EST5EDT,M3.2.0,M11.1.0"), which this does not parse."""
    tz = environ.get("TZ")
    if tz is None or tz in ("", ":"):
        with localtime.open("rb") as handle:
            return ZoneInfo.from_file(handle, key="localtime")
    key = tz.removeprefix(":")
    if key.startswith("/"):
        with Path(key).open("rb") as handle:
            return ZoneInfo.from_file(handle, key=key)
    try:
        return ZoneInfo(key)
    except (KeyError, ValueError, OSError) as error:  # ZoneInfoNotFoundError is a KeyError
        raise ValueError(f"TZ={tz!r} is not a zone name or file") from error


def parse_environ(data: bytes) -> dict[str, str]:
    """/proc/<pid>/environ: NUL-separated KEY=VALUE."""
    pairs = (item.split(b"=", 1) for item in data.split(b"\0") if b"=" in item)
    return {k.decode(errors="replace"): v.decode(errors="replace") for k, v in pairs}


@dataclass(frozen=True)
class ContainerStatus:
    """containerd's own record of one CRI container. Times are epoch seconds with containerd's
    nanoseconds kept; None where containerd has none yet (0 in the file: not started, not exited)."""

    created_at: float | None
    started_at: float | None
    finished_at: float | None
    exit_code: int
    reason: str
    pid: int


# The CRI plugin's state folder under containerd's `root` (containerd 2.x and 1.x alike).
CRI_STATE = "io.containerd.grpc.v1.cri"


def cri_status_path(containerd_root: Path, container_id: str) -> Path:
    return containerd_root / CRI_STATE / "containers" / container_id / "status"


def container_id(kube_container_id: str) -> str:
    """The runtime's id from a pod status's containerID ("containerd://<id>")."""
    runtime, sep, ident = kube_container_id.partition("://")
    if not sep or runtime != "containerd" or not re.fullmatch(r"[0-9a-f]{64}", ident):
        raise ValueError(f"not a containerd container id: {kube_container_id!r}")
    return ident


def _nanoseconds(value: int) -> float | None:
    return value / 1e9 if value else None


def parse_cri_status(text: str) -> ContainerStatus:
    """The CRI status checkpoint (JSON, {"Version": "v1", "CreatedAt": <ns>, ...}).
    ValueError for another version: its fields may mean something else."""
    data = json.loads(text)
    if data.get("Version") != "v1":
        raise ValueError(f"CRI container status version {data.get('Version')!r}, expected 'v1'")
    return ContainerStatus(
        created_at=_nanoseconds(int(data["CreatedAt"])),
        started_at=_nanoseconds(int(data["StartedAt"])),
        finished_at=_nanoseconds(int(data["FinishedAt"])),
        exit_code=int(data["ExitCode"]),
        reason=str(data.get("Reason", "")),
        pid=int(data.get("Pid", 0)),
    )
