"""Slurm's step records for the report: `squeue -h -t all -O <fields> -j <ids>` under TZ=UTC (finished
jobs stay MinJobAge), then `sacct` (with slurmdbd) or `sacct -c` (the job-completion log) for the
jobs squeue forgot. Pure: tests feed recorded output.

Not `squeue --json`: through 22.05 it ignores -j and -t and prints every user's job, each poll of
the monitor. States and exit codes are read by jobs.py's parsers, as the providers read them;
what is read here is what the report needs beyond them: times as Unix seconds, pending reasons,
nodes, the GPUs asked for and given.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

from infra.hpc.remote import RemoteResult
from infra.hpc.scheduler import (
    Argv,
    JobState,
    SubmittedStep,
    UnsupportedOutput,
    has_text,
    job_step_record,
    unknown_step_record,
    unreadable_answer,
)
from infra.hpc.slurm.jobs import (
    ELEMENT_ID,
    SACCT_FIELDS,
    STATUS_FIELDS,
    exit_code_from_text,
    expand_indices,
    parse_sacct,
    sacct_command,
    slurm_phase,
    squeue_field_rows,
    state_from_fields,
    time_text,
)
from infra.job_records import ElementRecord, StepRecord
from infra.timeparse import iso_utc

# What Slurm allocated, where the site accounts GPUs (AccountingStorageTRES=gres/gpu, which
# needs slurmdbd): `cpu=2,mem=2G,node=1,billing=2,gres/gpu=1`.
GPU_TRES = re.compile(r"gres/gpu(?::[^=,]+)?=(\d+)")
# What the job asked for, whatever the accounting: `gres:gpu:2`, `gres:gpu:v100:2` (22.05),
# `gres/gpu:2` (23.02+), one entry of a comma-separated list.
GPU_REQUEST = re.compile(r"gres[:/]gpu(?::[^:,]*[^:,\d][^:,]*)?:(\d+)")
# The status query's fields, then what the report needs beyond them.
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

# The command, less its job ids; the records name it as their source.
SQUEUE_QUERY = "TZ=UTC squeue -h -t all -O " + shlex.quote(",".join(f"{f}:|" for f in SQUEUE_FIELDS)) + " -j"


def squeue_query(job_ids: Sequence[str]) -> str:
    # The ids come from the stack outputs: quoted, though Atlas's are plain numbers.
    return f"{SQUEUE_QUERY} {shlex.quote(','.join(job_ids))}"


def sacct_queries(job_ids: Sequence[str]) -> list[str]:
    """slurmdbd's accounting, then (without slurmdbd) the job-completion file, which still has
    finished jobs."""
    return [f"TZ=UTC {sacct_command(job_ids)}", f"TZ=UTC {sacct_command(job_ids, jobcomp=True)}"]


def squeue_rows(squeue: RemoteResult) -> dict[str, dict[str, str]]:
    """squeue's lines by job id; none where squeue could not answer (sacct is asked instead)."""
    try:
        return {row["JobID"]: row for row in squeue_field_rows(squeue, SQUEUE_FIELDS)}
    except UnsupportedOutput:
        return {}


def squeue_forgot(squeue: RemoteResult, ids: Sequence[str]) -> list[str]:
    """The jobs `squeue` printed no line for (past MinJobAge, or squeue failed): sacct's."""
    known = squeue_rows(squeue)
    return [i for i in ids if i not in known]


def slurm_step_records(
    steps: Sequence[SubmittedStep], squeue: RemoteResult, sacct: RemoteResult | None, host: str, argv: Argv
) -> tuple[StepRecord, ...]:
    """Steps from `SQUEUE_QUERY ids` (times, reasons, GPUs, nodes) and `sacct` for what squeue forgot."""
    rows = squeue_rows(squeue)
    accounted = {}
    if sacct is not None:
        try:
            accounted = parse_sacct(sacct)
        except UnsupportedOutput:
            accounted = {}
    result = []
    for step in steps:
        job_id = step.job_id
        if job_id in rows:
            row = rows[job_id]
            state = state_from_fields(row)
            result.append(
                job_step_record(
                    step,
                    state,
                    f"Slurm: `{SQUEUE_QUERY} {job_id}` on {host} (SubmitTime, StartTime, EndTime)",
                    argv,
                    **_slurm_times(state),
                    pending_reason=state.reason,
                    gpus_requested=_requested_gpus(row),
                    gpus_allocated=_tres_gpus(row["tres-alloc"]) if state.start_time else None,
                    node=_text(row["NodeList"]),
                )
            )
        elif job_id in accounted:
            state = accounted[job_id]
            result.append(
                job_step_record(
                    step,
                    state,
                    f"Slurm: `TZ=UTC sacct -P -o {SACCT_FIELDS} -j {job_id}` on {host}",
                    argv,
                    **_slurm_times(state),
                )
            )
        else:
            result.append(unknown_step_record(step, "neither squeue nor sacct knows the job", argv))
    return tuple(result)


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


# --- a sweep's elements: one query per array -------------------------------------------------------

# squeue's fields for an array's elements (`-r`: one line each): the array's id and the element's
# index first, then what a step's record reads.
ARRAY_SQUEUE_FIELDS = ("ArrayJobID", "ArrayTaskID", *STATUS_FIELDS, "NodeList")
ARRAY_SQUEUE_QUERY = (
    "TZ=UTC squeue -h -r -t all -O " + shlex.quote(",".join(f"{f}:|" for f in ARRAY_SQUEUE_FIELDS)) + " -j"
)


def array_record_queries(array_id: str) -> list[str]:
    """An array's elements, each command for the whole array, asked in order until every element
    is known: slurmdbd's accounting (`sacct -X -P`: every element, pending ones as one line), the
    controller (`squeue -r`: what it holds, MinJobAge after the end) and, without slurmdbd, the
    job-completion log (`sacct -c`). Slurm 22.05's `sacct -c` does not read the log's ArrayJobId
    and ArrayTaskId ("Unknown type ArrayJobId"): it prints one line per array under the array's
    id, naming no element: not an answer about elements (UnsupportedOutput, named in the report's note)."""
    ids = shlex.quote(array_id)
    return [
        f"TZ=UTC sacct -n -P -X -o {SACCT_FIELDS} -j {ids}",
        f"{ARRAY_SQUEUE_QUERY} {ids}",
        f"TZ=UTC sacct -c -n -P -o {SACCT_FIELDS} -j {ids}",
    ]


def slurm_array_records(array_id: str, answer: RemoteResult, command: str, host: str) -> dict[int, ElementRecord]:
    """One of `array_record_queries`' answers as records by the element's index (from 0); the
    point is the caller's. UnsupportedOutput where the command did not answer (no accounting)."""
    source = f"Slurm: `{command}` on {host}"
    if command.startswith(ARRAY_SQUEUE_QUERY):
        return _squeue_array_records(array_id, answer, source)
    if answer.exit_code != 0:
        raise UnsupportedOutput(answer.stderr.strip() or f"exit {answer.exit_code}")
    found: dict[int, ElementRecord] = {}
    read = False
    for line in answer.stdout.splitlines():
        parts = line.strip().split("|")
        match = ELEMENT_ID.match(parts[0]) if len(parts) == 8 else None
        read = read or match is not None
        if not match or match.group(1) != array_id:
            continue
        _, name, queue, native_text, exit_text, submit, start, end = parts
        native = native_text.split(" ")[0]  # "CANCELLED by 1001"
        phase = slurm_phase(native)
        state = JobState(
            parts[0],
            phase,
            native,
            exit_code=exit_code_from_text(exit_text) if phase.finished else None,
            queue=queue,
            name=name,
            submit_time=time_text(submit),
            start_time=time_text(start) if native != "PENDING" else "",
            finish_time=time_text(end) if phase.finished else "",
        )
        for index in expand_indices(match.group(2)):
            found[index] = _element(f"{array_id}_{index}", state, "", source)
    if not read and has_text(answer.stdout):
        raise unreadable_answer("sacct", answer.stdout)
    return found


def _squeue_array_records(array_id: str, answer: RemoteResult, source: str) -> dict[int, ElementRecord]:
    found: dict[int, ElementRecord] = {}
    for row in squeue_field_rows(answer, ARRAY_SQUEUE_FIELDS):
        if row["ArrayJobID"] != array_id:
            continue
        state = state_from_fields(row)
        for index in expand_indices(row["ArrayTaskID"]) if row["ArrayTaskID"] not in ("N/A", "") else ():
            found[index] = _element(f"{array_id}_{index}", state, _text(row["NodeList"]), source)
    return found


def _element(job: str, state: JobState, node: str, source: str) -> ElementRecord:
    times = _slurm_times(state)
    return ElementRecord(
        point=-1,  # the caller maps the index to the sweep's point
        job=job,
        state=state.native_state,
        phase=state.phase.value,
        requested_at=times["requested_at"],
        started_at=times["started_at"],
        finished_at=times["finished_at"],
        exit_code=state.exit_code,
        node=node,
        source=source,
    )
