"""An HPC side's own records over SSH: the scheduler's job times and the files the jobs wrote.

Scheduler queries print times under `TZ=UTC` so they read back exactly, whatever the login
node's zone: LSF `bjobs -a -hms -o ... -json` (bhist -l when bjobs has forgotten a job),
Slurm `squeue --json -t all` (epochs; finished jobs stay MinJobAge) then `sacct` (with
slurmdbd) or `sacct -c` (jobcomp). Telemetry and training logs come over SFTP into the
report's raw/ folder, so the report keeps what it was computed from.

Parsing is pure (`lsf_steps`, `slurm_steps`): tests feed recorded output.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import posixpath
import re
import shlex
import shutil
import stat
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.compare.records import EnvironmentRecords, Missing, StagingRecord, StepRecord, TelemetryColumns
from infra.compare.telemetry import load_sampler_telemetry
from infra.compare.timeparse import iso_utc, lsf_short
from infra.compare.training import load_training_log
from infra.hpc.lsf import LsfScheduler
from infra.hpc.scheduler import UnsupportedOutput
from infra.hpc.slurm import SlurmScheduler
from infra.hpc.ssh import RemoteResult
from infra.hpc.target import PROVENANCE_NOT_STATED
from infra.telemetry.columns import SUFFIX as COLUMN_SUFFIX
from infra.telemetry.columns import columns_path

LSF_FIELDS = "jobid stat queue exit_code job_name submit_time start_time finish_time exit_reason pend_reason exec_host"
SACCT_FIELDS = "JobID,JobName,Partition,State,ExitCode,Submit,Start,End"
GPU_TRES = re.compile(r"gres/gpu(?::[^=,]+)?=(\d+)")

Runner = Callable[[str], RemoteResult]


@dataclass(frozen=True)
class RemoteFile:
    path: str
    size: int
    mtime: float


class RemoteFiles:
    """What the collector needs from SFTP; tests give a fake over a local folder."""

    def listdir(self, path: str) -> list[RemoteFile]:  # pragma: no cover - interface
        raise NotImplementedError

    def fetch(self, path: str, local: Path) -> bool:  # pragma: no cover - interface
        raise NotImplementedError


def _year_of(step: Mapping[str, Any]) -> int:
    submitted = step.get("submitted_at") or ""
    return int(submitted[:4]) if submitted[:4].isdigit() else dt.datetime.now(dt.UTC).year


def lsf_steps(
    outputs: Mapping[str, Any], bjobs: RemoteResult, bhist: RemoteResult | None, argv: Mapping[str, tuple[str, ...]]
) -> tuple[StepRecord, ...]:
    """Steps from `bjobs -a -hms -o LSF_FIELDS -json` (and `bhist -l` for jobs bjobs no longer knows)."""
    lsf = LsfScheduler()
    records: dict[str, dict[str, str]] = {}
    text = bjobs.stdout.strip()
    if text.startswith("{"):
        for record in json.loads(text).get("RECORDS", []):
            if record.get("JOBID") and "ERROR" not in record:
                records[str(record["JOBID"])] = {k: str(v) for k, v in record.items()}
    states = lsf.parse_bjobs_json(bjobs) if text.startswith("{") else {}
    history = _bhist_times(bhist.stdout) if bhist is not None else {}
    command = f"TZ=UTC bjobs -a -hms -o '{LSF_FIELDS}' -json"
    steps = []
    for step in outputs.get("steps", []):
        job_id, year = str(step["job_id"]), _year_of(step)
        record, state = records.get(job_id), states.get(job_id)
        if record is not None and state is not None:
            submitted = lsf_short(record.get("SUBMIT_TIME"), year)
            started = lsf_short(record.get("START_TIME"), year)
            finished = lsf_short(record.get("FINISH_TIME"), year)
            if finished is not None and submitted is not None and finished < submitted:
                finished = lsf_short(record.get("FINISH_TIME"), year + 1)
            steps.append(
                StepRecord(
                    step=step["name"],
                    job=job_id,
                    state=state.native_state,
                    requested_at=submitted,
                    scheduled_at=started,
                    started_at=started,
                    finished_at=finished,
                    exit_code=state.exit_code,
                    pending_reason=record.get("PEND_REASON", "").strip(),
                    gpus_requested=None,
                    gpus_allocated=None,
                    node=record.get("EXEC_HOST", ""),
                    simulated=False,
                    argv=argv.get(step["name"]),
                    source=f"LSF: `{command} {job_id}` on {outputs.get('host')}",
                )
            )
        elif job_id in history:
            times = history[job_id]
            steps.append(
                StepRecord(
                    step=step["name"],
                    job=job_id,
                    state=times["state"],
                    requested_at=times.get("submitted"),
                    scheduled_at=times.get("dispatched"),
                    started_at=times.get("started"),
                    finished_at=times.get("finished"),
                    exit_code=None if times.get("exit_code") is None else int(times["exit_code"] or 0),
                    pending_reason="",
                    gpus_requested=None,
                    gpus_allocated=None,
                    node="",
                    simulated=False,
                    argv=argv.get(step["name"]),
                    source=f"LSF: `TZ=UTC bhist -l {job_id}` on {outputs.get('host')}",
                )
            )
        else:
            steps.append(_unknown(step, job_id, "neither bjobs nor bhist knows the job", argv))
    return tuple(steps)


_BHIST_EVENT = re.compile(r"^\w{3} (\w{3}\s+\d+ \d{2}:\d{2}:\d{2})(?: (\d{4}))?: (.*)$", re.MULTILINE)


def _bhist_times(text: str) -> dict[str, dict[str, Any]]:
    """`bhist -l`: `Wed Dec  2 15:56:43: Submitted from host ...` lines per `Job <id>` block."""
    result: dict[str, dict[str, Any]] = {}
    text = re.sub(r"\n {2,}", "", text)
    year = dt.datetime.now(dt.UTC).year
    for block in re.split(r"\n(?=Job <\d+>)", text):
        head = re.match(r"\s*Job <(\d+)>", block)
        if not head:
            continue
        times: dict[str, Any] = {"state": "PEND", "exit_code": None}
        for when, explicit_year, what in _BHIST_EVENT.findall(block):
            epoch = lsf_short(when, int(explicit_year) if explicit_year else year)
            if what.startswith("Submitted"):
                times["submitted"] = epoch
            elif what.startswith("Dispatched"):
                times["dispatched"] = epoch
            elif what.startswith("Starting"):
                times["started"], times["state"] = epoch, "RUN"
            elif what.startswith("Done successfully"):
                times["finished"], times["state"], times["exit_code"] = epoch, "DONE", 0
            elif what.startswith("Exited"):
                code = re.search(r"exit code (\d+)", what)
                times["finished"], times["state"] = epoch, "EXIT"
                times["exit_code"] = int(code.group(1)) if code else None
        result[head.group(1)] = times
    return result


def _unknown(step: Mapping[str, Any], job_id: str, why: str, argv: Mapping[str, tuple[str, ...]]) -> StepRecord:
    return StepRecord(
        step["name"],
        job_id,
        "UNKNOWN",
        None,
        None,
        None,
        None,
        None,
        why,
        None,
        None,
        "",
        False,
        argv.get(step["name"]),
        "",
    )


def slurm_steps(
    outputs: Mapping[str, Any], squeue: RemoteResult, sacct: RemoteResult | None, argv: Mapping[str, tuple[str, ...]]
) -> tuple[StepRecord, ...]:
    """Steps from `squeue --json -t all -j ...` (epochs, reasons, TRES) and `sacct` for what squeue forgot."""
    slurm = SlurmScheduler()
    jobs: dict[str, Mapping[str, Any]] = {}
    try:
        states = slurm.parse_squeue_json(squeue)
        for job in json.loads(squeue.stdout).get("jobs", []):
            jobs[str(job.get("job_id") if not isinstance(job.get("job_id"), dict) else job["job_id"].get("number"))] = (
                job
            )
    except (UnsupportedOutput, json.JSONDecodeError):
        states = {}
    accounted = {}
    if sacct is not None:
        try:
            accounted = slurm.parse_sacct(sacct)
        except UnsupportedOutput:
            accounted = {}
    host = outputs.get("host")
    steps = []
    for step in outputs.get("steps", []):
        job_id = str(step["job_id"])
        if job_id in states:
            state, job = states[job_id], jobs[job_id]
            requested = _tres_gpus(str(job.get("tres_req_str", "")))
            allocated = _tres_gpus(str(job.get("tres_alloc_str", "")))
            steps.append(
                StepRecord(
                    step=step["name"],
                    job=job_id,
                    state=state.native_state,
                    requested_at=iso_utc(state.submit_time),
                    scheduled_at=iso_utc(state.start_time),
                    started_at=iso_utc(state.start_time),
                    finished_at=iso_utc(state.finish_time),
                    exit_code=state.exit_code,
                    pending_reason="" if state.reason in ("None", "") else state.reason,
                    gpus_requested=requested,
                    gpus_allocated=allocated if state.start_time else None,
                    node=str(job.get("nodes", "")),
                    simulated=False,
                    argv=argv.get(step["name"]),
                    source=f"Slurm: `squeue --json -t all -j {job_id}` on {host} (submit_time, start_time, end_time)",
                )
            )
        elif job_id in accounted:
            state = accounted[job_id]
            steps.append(
                StepRecord(
                    step=step["name"],
                    job=job_id,
                    state=state.native_state,
                    requested_at=iso_utc(state.submit_time),
                    scheduled_at=iso_utc(state.start_time),
                    started_at=iso_utc(state.start_time),
                    finished_at=iso_utc(state.finish_time),
                    exit_code=state.exit_code,
                    pending_reason="",
                    gpus_requested=None,
                    gpus_allocated=None,
                    node="",
                    simulated=False,
                    argv=argv.get(step["name"]),
                    source=f"Slurm: `TZ=UTC sacct -P -o {SACCT_FIELDS} -j {job_id}` on {host}",
                )
            )
        else:
            steps.append(_unknown(step, job_id, "neither squeue nor sacct knows the job", argv))
    return tuple(steps)


def _tres_gpus(text: str) -> int | None:
    """`cpu=2,mem=2G,node=1,billing=2,gres/gpu=1`: None where the job asked for no GPU through gres."""
    match = GPU_TRES.search(text)
    return int(match.group(1)) if match else None


def collect_telemetry(
    steps: Sequence[str], telemetry_dir: str, files: RemoteFiles, raw_dir: Path, where: str
) -> tuple[dict[str, TelemetryColumns | Missing], dict[str, tuple[str, ...]]]:
    """Each step's sampler file (and its column file, where written), fetched into `raw_dir`;
    and the command line each step really ran, from the sampler's start record."""
    telemetry: dict[str, TelemetryColumns | Missing] = {}
    argv: dict[str, tuple[str, ...]] = {}
    raw_dir.mkdir(parents=True, exist_ok=True)
    for step in steps:
        remote = posixpath.join(telemetry_dir, f"{step}.jsonl")
        local = raw_dir / f"telemetry-{step}.jsonl"
        if not files.fetch(remote, local):
            telemetry[step] = Missing(f"not measured: no {remote} {where} (the job did not start the sampler)")
            continue
        # The sampler's binary rows beside it, where it wrote them: the same columns, read in one go.
        rows_local = raw_dir / f"telemetry-{step}{COLUMN_SUFFIX}"
        rows_found = files.fetch(columns_path(remote), rows_local)
        columns = load_sampler_telemetry(local, f"the sampler's {remote} {where}", rows_local if rows_found else None)
        telemetry[step] = columns
        if columns.argv:
            argv[step] = columns.argv
    return telemetry, argv


def _run(runner: Runner, command: str) -> RemoteResult:
    return runner(command)


def collect_hpc(
    name: str,
    outputs: Mapping[str, Any],
    runner: Runner,
    files: RemoteFiles,
    raw_dir: Path,
) -> EnvironmentRecords:
    """The scheduler's records, the sampler's telemetry and the training logs of one HPC side."""
    scheduler = outputs.get("scheduler", "")
    ids = [str(s["job_id"]) for s in outputs.get("steps", [])]
    host = f"{outputs.get('user')}@{outputs.get('host')}:{outputs.get('port')}"
    raw_dir.mkdir(parents=True, exist_ok=True)

    telemetry, argv = collect_telemetry(
        [str(s["name"]) for s in outputs.get("steps", [])],
        outputs.get("telemetry", {}).get("path", ""),
        files,
        raw_dir,
        f"on {host} (SFTP)",
    )

    if not ids:
        steps: tuple[StepRecord, ...] | Missing = Missing("the stack outputs list no steps")
    elif scheduler == "lsf":
        quoted = " ".join(shlex.quote(i) for i in ids)
        bjobs = _run(runner, f"TZ=UTC bjobs -a -hms -o '{LSF_FIELDS}' -json {quoted}")
        known = set(re.findall(r'"JOBID":"(\d+)"', bjobs.stdout))
        bhist = _run(runner, f"TZ=UTC bhist -l {quoted}") if set(ids) - known else None
        steps = lsf_steps(outputs, bjobs, bhist, argv)
    elif scheduler == "slurm":
        joined = ",".join(ids)
        squeue = _run(runner, f"squeue --json -t all -j {joined}")
        sacct = None
        if not all(f'"job_id": {i},' in squeue.stdout or f'"job_id":{i},' in squeue.stdout for i in ids):
            sacct = _run(runner, f"TZ=UTC sacct -n -P -X -o {SACCT_FIELDS} -j {joined}")
            if sacct.exit_code != 0:  # no slurmdbd: the jobcomp file still has finished jobs
                sacct = _run(runner, f"TZ=UTC sacct -c -n -P -o {SACCT_FIELDS} -j {joined}")
        steps = slurm_steps(outputs, squeue, sacct, argv)
    else:
        steps = Missing(f"unknown scheduler {scheduler!r}")

    training = load_training_log(
        outputs.get("logs", {}).get("path", ""), files, raw_dir, f"on {host} (SFTP)", argv.get("train")
    )
    staged = _staged_files(outputs.get("run_dir", ""), files, host)
    return EnvironmentRecords(
        name=name,
        kind="hpc",
        platform=f"{'LSF' if scheduler == 'lsf' else 'Slurm' if scheduler == 'slurm' else scheduler} over SSH",
        gpus=outputs.get("gpus"),
        gpu_product=None,
        steps=steps,
        telemetry=telemetry,
        training=training,
        staging=staged,
        cost_profile="satori",
        # Stack outputs from before Atlas recorded it say nothing: never taken for real.
        provenance=str(outputs.get("provenance") or PROVENANCE_NOT_STATED),
    )


def _staged_files(run_dir: str, files: RemoteFiles, host: str) -> tuple[StagingRecord, ...] | Missing:
    """What Pulumi staged by SFTP into `<run_dir>/.atlas`: bytes, and the window of the files' mtimes."""
    staged: list[RemoteFile] = []
    pending = [posixpath.join(run_dir, ".atlas")]
    while pending:
        for entry in files.listdir(pending.pop()):
            if entry.size < 0:
                pending.append(entry.path)
            else:
                staged.append(entry)
    if not staged:
        return Missing(f"nothing staged under {run_dir}/.atlas on {host}")
    return (
        StagingRecord(
            name="job scripts and code (SFTP)",
            started_at=min(f.mtime for f in staged),
            finished_at=max(f.mtime for f in staged),
            bytes_moved=sum(f.size for f in staged),
            simulated=False,
            source=f"SFTP stat of {len(staged)} files under {run_dir}/.atlas on {host} "
            "(sizes; modification times, 1 s)",
        ),
    )


class SftpFiles(RemoteFiles):
    """RemoteFiles over a paramiko SFTP client (from infra.hpc.ssh's pooled connection)."""

    def __init__(self, sftp: Any) -> None:
        self.sftp = sftp

    def listdir(self, path: str) -> list[RemoteFile]:
        try:
            entries = self.sftp.listdir_attr(path)
        except OSError:
            return []
        return [
            RemoteFile(
                posixpath.join(path, e.filename),
                -1 if stat.S_ISDIR(e.st_mode or 0) else int(e.st_size or 0),
                float(e.st_mtime or 0),
            )
            for e in entries
        ]

    def fetch(self, path: str, local: Path) -> bool:
        try:
            self.sftp.get(path, str(local))
        except OSError:
            return False
        return True


class LocalFiles(RemoteFiles):
    """RemoteFiles over a local folder that mirrors the remote home (tests, and imported copies)."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def listdir(self, path: str) -> list[RemoteFile]:
        folder = self.root / path
        if not folder.is_dir():
            return []
        return [
            RemoteFile(posixpath.join(path, p.name), -1 if p.is_dir() else p.stat().st_size, p.stat().st_mtime)
            for p in sorted(folder.iterdir())
        ]

    def fetch(self, path: str, local: Path) -> bool:
        source = self.root / path
        if not source.is_file():
            return False
        local.unlink(missing_ok=True)
        try:
            os.link(source, local)  # same file system: the report keeps it without a copy
        except OSError:
            shutil.copyfile(source, local)  # streamed: a telemetry file may be larger than memory
        return True
