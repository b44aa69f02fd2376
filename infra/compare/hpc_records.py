"""An HPC side's step records from its scheduler's own output. Pure: tests feed recorded output.

The queries print times under `TZ=UTC` so they read back exactly, whatever the login node's
zone: LSF `bjobs -a -hms -o ... -json` (bhist -l when bjobs has forgotten a job), Slurm
`squeue --json -t all` (epochs; finished jobs stay MinJobAge) then `sacct` (with slurmdbd) or
`sacct -c` (jobcomp). States, exit codes and the bhist events are read by infra.hpc's parsers
(`LsfScheduler`, `SlurmScheduler`, `parse_bhist_event_times`); what is read here is only what
the comparison needs beyond them: times as Unix seconds, pending reasons, hosts, GPU counts.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from infra.compare.records import StepRecord, step_record
from infra.compare.timeparse import iso_utc, lsf_short
from infra.hpc.lsf import LsfScheduler, parse_bhist_event_times
from infra.hpc.remote import RemoteResult
from infra.hpc.scheduler import JobState, UnsupportedOutput
from infra.hpc.slurm import SlurmScheduler

LSF_FIELDS = "jobid stat queue exit_code job_name submit_time start_time finish_time exit_reason pend_reason exec_host"
SACCT_FIELDS = "JobID,JobName,Partition,State,ExitCode,Submit,Start,End"
GPU_TRES = re.compile(r"gres/gpu(?::[^=,]+)?=(\d+)")

# The commands, less their job ids; the records name them as their source.
BJOBS_QUERY = f"TZ=UTC bjobs -a -hms -o '{LSF_FIELDS}' -json"
BHIST_QUERY = "TZ=UTC bhist -l"
SQUEUE_QUERY = "squeue --json -t all -j"
SACCT_QUERY = f"TZ=UTC sacct -n -P -X -o {SACCT_FIELDS} -j"
# Without slurmdbd: the jobcomp file still has finished jobs.
SACCT_JOBCOMP_QUERY = f"TZ=UTC sacct -c -n -P -o {SACCT_FIELDS} -j"

Argv = Mapping[str, tuple[str, ...]]  # by step: the command line the sampler saw


def _year_of(step: Mapping[str, Any]) -> int:
    submitted = step.get("submitted_at") or ""
    return int(submitted[:4]) if submitted[:4].isdigit() else dt.datetime.now(dt.UTC).year


def _job_step(step: Mapping[str, Any], argv: Argv, state: JobState, source: str, **given: Any) -> StepRecord:
    """A step the scheduler knows: its job id, native state and exit code, and what else it gave."""
    return step_record(
        step["name"],
        str(step["job_id"]),
        state.native_state,
        source,
        exit_code=state.exit_code,
        argv=argv.get(step["name"]),
        **given,
    )


def _unknown(step: Mapping[str, Any], why: str, argv: Argv) -> StepRecord:
    name = step["name"]
    return step_record(name, str(step["job_id"]), "UNKNOWN", "", pending_reason=why, argv=argv.get(name))


def _bjobs_records(bjobs: RemoteResult) -> dict[str, dict[str, str]]:
    """The JSON records themselves, for the fields `parse_bjobs_json` leaves out (pending reason, host)."""
    text = bjobs.stdout.strip()
    if not text.startswith("{"):
        return {}
    return {
        str(record["JOBID"]): {k: str(v) for k, v in record.items()}
        for record in json.loads(text).get("RECORDS", [])
        if record.get("JOBID") and "ERROR" not in record
    }


def bjobs_forgot(bjobs: RemoteResult, ids: Sequence[str]) -> list[str]:
    """The jobs `bjobs` printed no record of (past CLEAN_PERIOD; an ERROR record is none): bhist's."""
    known = _bjobs_records(bjobs)
    return [i for i in ids if i not in known]


def lsf_steps(
    outputs: Mapping[str, Any], bjobs: RemoteResult, bhist: RemoteResult | None, argv: Argv
) -> tuple[StepRecord, ...]:
    """Steps from `bjobs -a -hms -o LSF_FIELDS -json` (and `bhist -l` for jobs bjobs no longer knows)."""
    lsf = LsfScheduler()
    records = _bjobs_records(bjobs)
    states = lsf.parse_bjobs_json(bjobs) if bjobs.stdout.strip().startswith("{") else {}
    history: dict[str, JobState] = {}
    history_times: dict[str, dict[str, tuple[str, int | None]]] = {}
    if bhist is not None:
        try:
            history = lsf.parse_bhist_long(bhist)
        except UnsupportedOutput:
            history = {}
        history_times = parse_bhist_event_times(bhist)
    # bhist prints no year for this year's events.
    this_year = dt.datetime.now(dt.UTC).year
    host = outputs.get("host")
    steps = []
    for step in outputs.get("steps", []):
        job_id, year = str(step["job_id"]), _year_of(step)
        record, state = records.get(job_id), states.get(job_id)
        if record is not None and state is not None:
            submitted = lsf_short(state.submit_time, year)
            started = lsf_short(state.start_time, year)
            finished = lsf_short(state.finish_time, year)
            if finished is not None and submitted is not None and finished < submitted:
                finished = lsf_short(state.finish_time, year + 1)
            steps.append(
                _job_step(
                    step,
                    argv,
                    state,
                    f"LSF: `{BJOBS_QUERY} {job_id}` on {host}",
                    requested_at=submitted,
                    scheduled_at=started,
                    started_at=started,
                    finished_at=finished,
                    pending_reason=record.get("PEND_REASON", "").strip(),
                    node=record.get("EXEC_HOST", ""),
                )
            )
        elif job_id in history:
            times = {
                kind: lsf_short(when, printed_year or this_year)
                for kind, (when, printed_year) in history_times.get(job_id, {}).items()
            }
            steps.append(
                _job_step(
                    step,
                    argv,
                    history[job_id],
                    f"LSF: `{BHIST_QUERY} {job_id}` on {host}",
                    requested_at=times.get("submitted"),
                    scheduled_at=times.get("dispatched"),
                    started_at=times.get("started"),
                    finished_at=times.get("finished"),
                )
            )
        else:
            steps.append(_unknown(step, "neither bjobs nor bhist knows the job", argv))
    return tuple(steps)


def _squeue_jobs(squeue: RemoteResult) -> dict[str, Mapping[str, Any]]:
    """squeue's JSON jobs by id, for the fields `parse_squeue_json` leaves out (TRES, nodes)."""
    jobs: dict[str, Mapping[str, Any]] = {}
    for job in json.loads(squeue.stdout).get("jobs", []):
        job_id = job.get("job_id")
        jobs[str(job_id.get("number") if isinstance(job_id, dict) else job_id)] = job
    return jobs


def squeue_forgot(squeue: RemoteResult, ids: Sequence[str]) -> list[str]:
    """The jobs `squeue --json` printed no record of (past MinJobAge, or squeue failed): sacct's."""
    try:
        known = _squeue_jobs(squeue)
    except json.JSONDecodeError:
        known = {}
    return [i for i in ids if i not in known]


def slurm_steps(
    outputs: Mapping[str, Any], squeue: RemoteResult, sacct: RemoteResult | None, argv: Argv
) -> tuple[StepRecord, ...]:
    """Steps from `squeue --json -t all -j ...` (epochs, reasons, TRES) and `sacct` for what squeue forgot."""
    slurm = SlurmScheduler()
    try:
        states = slurm.parse_squeue_json(squeue)
        jobs = _squeue_jobs(squeue)
    except (UnsupportedOutput, json.JSONDecodeError):
        states, jobs = {}, {}
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
            steps.append(
                _job_step(
                    step,
                    argv,
                    state,
                    f"Slurm: `{SQUEUE_QUERY} {job_id}` on {host} (submit_time, start_time, end_time)",
                    **_slurm_times(state),
                    pending_reason="" if state.reason in ("None", "") else state.reason,
                    gpus_requested=_tres_gpus(str(job.get("tres_req_str", ""))),
                    gpus_allocated=_tres_gpus(str(job.get("tres_alloc_str", ""))) if state.start_time else None,
                    node=str(job.get("nodes", "")),
                )
            )
        elif job_id in accounted:
            state = accounted[job_id]
            steps.append(
                _job_step(
                    step,
                    argv,
                    state,
                    f"Slurm: `TZ=UTC sacct -P -o {SACCT_FIELDS} -j {job_id}` on {host}",
                    **_slurm_times(state),
                )
            )
        else:
            steps.append(_unknown(step, "neither squeue nor sacct knows the job", argv))
    return tuple(steps)


def _slurm_times(state: JobState) -> dict[str, float | None]:
    """squeue's and sacct's submit, start and end (Slurm records no dispatch apart from the start)."""
    started = iso_utc(state.start_time)
    return {
        "requested_at": iso_utc(state.submit_time),
        "scheduled_at": started,
        "started_at": started,
        "finished_at": iso_utc(state.finish_time),
    }


def _tres_gpus(text: str) -> int | None:
    """`cpu=2,mem=2G,node=1,billing=2,gres/gpu=1`: None where the job asked for no GPU through gres."""
    match = GPU_TRES.search(text)
    return int(match.group(1)) if match else None
