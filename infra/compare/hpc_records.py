"""An HPC side's step records from its scheduler's own output. Pure: tests feed recorded output.

The queries print times under `TZ=UTC` so they read back exactly, whatever the login node's
zone: LSF `bjobs -a -hms -o ... -json` (bhist -l when bjobs has forgotten a job), Slurm
`squeue -h -t all -O <fields> -j <ids>` (finished jobs stay MinJobAge) then `sacct` (with
slurmdbd) or `sacct -c` (jobcomp). Not `squeue --json`: through 22.05 it ignores -j and -t and
prints every user's job, each poll of the monitor. States, exit codes and the bhist events are
read by infra.hpc's parsers (`LsfScheduler`, `SlurmScheduler`, `parse_bhist_event_times`); what
is read here is only what the comparison needs beyond them: times as Unix seconds, pending
reasons, hosts, GPU counts.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from infra.compare.records import StepRecord, step_record
from infra.timeparse import iso_utc, lsf_short
from infra.hpc.lsf import LsfScheduler, parse_bhist_event_times
from infra.hpc.remote import RemoteResult
from infra.hpc.scheduler import JobState, UnsupportedOutput
from infra.hpc.slurm import STATUS_FIELDS, SlurmScheduler, squeue_field_rows

LSF_FIELDS = "jobid stat queue exit_code job_name submit_time start_time finish_time exit_reason pend_reason exec_host"
SACCT_FIELDS = "JobID,JobName,Partition,State,ExitCode,Submit,Start,End"
# What Slurm allocated, where the site accounts GPUs (AccountingStorageTRES=gres/gpu, which
# needs slurmdbd): `cpu=2,mem=2G,node=1,billing=2,gres/gpu=1`.
GPU_TRES = re.compile(r"gres/gpu(?::[^=,]+)?=(\d+)")
# What the job asked for, whatever the accounting: `gres:gpu:2`, `gres:gpu:v100:2` (22.05),
# `gres/gpu:2` (23.02+), one entry of a comma-separated list.
GPU_REQUEST = re.compile(r"gres[:/]gpu(?::[^:,]*[^:,\d][^:,]*)?:(\d+)")
# The status query's fields, then what the comparison needs beyond them.
SQUEUE_FIELDS = (
    *STATUS_FIELDS,
    "tres-alloc",
    "tres-per-job",
    "tres-per-node",
    "tres-per-task",
    "tres-per-socket",
    "NumNodes",
    "NodeList",
)

# The commands, less their job ids; the records name them as their source.
BJOBS_QUERY = f"TZ=UTC bjobs -a -hms -o '{LSF_FIELDS}' -json"
BHIST_QUERY = "TZ=UTC bhist -l"
SQUEUE_QUERY = "TZ=UTC squeue -h -t all -O " + shlex.quote(",".join(f"{f}:|" for f in SQUEUE_FIELDS)) + " -j"
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


def _squeue_rows(squeue: RemoteResult) -> dict[str, dict[str, str]]:
    """squeue's lines by job id; none where squeue could not answer (sacct is asked instead)."""
    try:
        return {row["JobID"]: row for row in squeue_field_rows(squeue, SQUEUE_FIELDS)}
    except UnsupportedOutput:
        return {}


def squeue_forgot(squeue: RemoteResult, ids: Sequence[str]) -> list[str]:
    """The jobs `squeue` printed no line for (past MinJobAge, or squeue failed): sacct's."""
    known = _squeue_rows(squeue)
    return [i for i in ids if i not in known]


def slurm_steps(
    outputs: Mapping[str, Any], squeue: RemoteResult, sacct: RemoteResult | None, argv: Argv
) -> tuple[StepRecord, ...]:
    """Steps from `SQUEUE_QUERY ids` (times, reasons, GPUs, nodes) and `sacct` for what squeue forgot."""
    slurm = SlurmScheduler()
    rows = _squeue_rows(squeue)
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
        if job_id in rows:
            row = rows[job_id]
            state = slurm.state_from_fields(row)
            steps.append(
                _job_step(
                    step,
                    argv,
                    state,
                    f"Slurm: `{SQUEUE_QUERY} {job_id}` on {host} (SubmitTime, StartTime, EndTime)",
                    **_slurm_times(state),
                    pending_reason=state.reason,
                    gpus_requested=_requested_gpus(row),
                    gpus_allocated=_tres_gpus(row["tres-alloc"]) if state.start_time else None,
                    node=_text(row["NodeList"]),
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
    """`cpu=2,mem=2G,node=1,billing=2,gres/gpu=1`: None where no GPU is accounted."""
    match = GPU_TRES.search(text)
    return int(match.group(1)) if match else None


def _requested_gpus(row: Mapping[str, str]) -> int | None:
    """`--gpus` (tres-per-job), or `--gres=gpu:N` on each of NumNodes nodes (tres-per-node); 0
    where no form of the request names a GPU; None for a per-task or per-socket request, whose
    count depends on the layout Atlas does not read."""
    per_job = GPU_REQUEST.search(row["tres-per-job"])
    if per_job:
        return int(per_job.group(1))
    per_node = GPU_REQUEST.search(row["tres-per-node"])
    if per_node:
        return int(per_node.group(1)) * int(row["NumNodes"]) if row["NumNodes"].isdigit() else None
    if "gpu" in row["tres-per-task"] or "gpu" in row["tres-per-socket"]:
        return None
    return 0


def _text(value: str) -> str:
    """squeue's field as written, its unset values (`N/A`, `(null)`) empty."""
    return "" if value in ("N/A", "(null)", "None") else value
