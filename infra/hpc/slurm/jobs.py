"""Slurm's answers about jobs read into job states: `squeue -O` fields (and the short `-o` form),
`sacct -P`, and Slurm's exit codes and times. Pure: tests feed recorded output.

Formats were recorded on Debian bookworm's slurm-wlm 22.05.8 (tests/unit/data holds the recordings).
Status is read from `squeue -O` fields and `sacct -P`, never `squeue --json` (see STATUS_FIELDS).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence

from infra.hpc.remote import RemoteResult
from infra.hpc.scheduler import (
    EVERY_ELEMENT,
    JobState,
    Phase,
    SchedulerError,
    UnsupportedOutput,
    has_text,
    unreadable_answer,
)

TEXT_FORMAT = "%i|%T|%P|%j|%r"
# The live status query's fields (`squeue -O`, each ended by `|`): state, exit code and times in
# one line per asked-for job. Not `squeue --json`: through 22.05 it ignores -j and -t ("all other
# formatting and filtering arguments will be ignored") and prints every job the controller holds
# (0.32 s and every user's jobs for 3,000 jobs on the local Satori, against 0.02 s for these).
STATUS_FIELDS = ("JobID", "State", "Partition", "Name", "Reason", "exit_code", "SubmitTime", "StartTime", "EndTime")
STATUS_FORMAT = ",".join(f"{field}:|" for field in STATUS_FIELDS)
# sacct's fields, for the providers' accounting query and the report's history alike.
SACCT_FIELDS = "JobID,JobName,Partition,State,ExitCode,Submit,Start,End"

STATE_PHASES: dict[str, Phase] = {
    "PENDING": Phase.PENDING,
    "CONFIGURING": Phase.PENDING,
    "REQUEUED": Phase.PENDING,
    "REQUEUE_HOLD": Phase.PENDING,
    "REQUEUE_FED": Phase.PENDING,
    "RESV_DEL_HOLD": Phase.PENDING,
    "RUNNING": Phase.RUNNING,
    "COMPLETING": Phase.RUNNING,
    "STAGE_OUT": Phase.RUNNING,
    "SIGNALING": Phase.RUNNING,
    "RESIZING": Phase.RUNNING,
    "SUSPENDED": Phase.SUSPENDED,
    "STOPPED": Phase.SUSPENDED,
    "COMPLETED": Phase.SUCCEEDED,
    "FAILED": Phase.FAILED,
    "TIMEOUT": Phase.FAILED,
    "NODE_FAIL": Phase.FAILED,
    "OUT_OF_MEMORY": Phase.FAILED,
    "BOOT_FAIL": Phase.FAILED,
    "DEADLINE": Phase.FAILED,
    "CANCELLED": Phase.CANCELLED,
    "PREEMPTED": Phase.CANCELLED,
    "REVOKED": Phase.CANCELLED,
    "SPECIAL_EXIT": Phase.FAILED,
}


def slurm_phase(native_state: str) -> Phase:
    return STATE_PHASES.get(native_state.split(" ")[0].upper(), Phase.UNKNOWN)


def sacct_command(job_ids: Sequence[str], *, jobcomp: bool = False) -> str:
    """`sacct` for these jobs: slurmdbd's accounting, or with `jobcomp` the job-completion log,
    which still records finished jobs without slurmdbd."""
    ids = shlex.quote(",".join(job_ids))
    return f"sacct -c -n -P -o {SACCT_FIELDS} -j {ids}" if jobcomp else f"sacct -n -P -X -o {SACCT_FIELDS} -j {ids}"


def time_text(value: str) -> str:
    """squeue's and sacct's times as written (the cluster's local time); unset ones are empty."""
    return "" if value in ("", "N/A", "Unknown", "None") else value


def _exit_code_from_status(status: int | None) -> int | None:
    """squeue's `exit_code` field: the raw wait status (768 for `exit 3`); a signal shows in the
    low 7 bits and reads as the shell's 128 + signal."""
    if status is None:
        return None
    if status & 0x7F:
        return 128 + (status & 0x7F)
    return status >> 8


def exit_code_from_text(text: str) -> int | None:
    """sacct's `ExitCode` and scontrol's `ExitCode=`: `code:signal`."""
    match = re.fullmatch(r"(\d+):(\d+)", text.strip())
    if not match:
        return None
    code, signal = int(match.group(1)), int(match.group(2))
    return 128 + signal if signal else code


def squeue_field_rows(result: RemoteResult, fields: Sequence[str]) -> list[dict[str, str]]:
    """`squeue -h -O "<field>:|,..."` output as one dict per job, keyed by `fields`.

    Exit 1 with "Invalid job id specified" is no jobs (every id asked for is unknown). Another
    failure (an older -O without one of the fields, or the controller down) raises
    UnsupportedOutput, so the caller tries its next query; so does output with not one line
    of this shape, which is garbage rather than "no jobs" (empty output).
    """
    if result.exit_code != 0:
        if "Invalid job id specified" in result.stderr:
            return []
        raise UnsupportedOutput(result.stderr.strip())
    rows = []
    for line in result.stdout.splitlines():
        parts = [p.strip() for p in line.split("|")]
        if len(parts) != len(fields) + 1 or parts[-1] or not parts[0].isdigit():
            continue
        rows.append(dict(zip(fields, parts[:-1], strict=True)))
    if not rows and has_text(result.stdout):
        raise unreadable_answer("squeue", result.stdout)
    return rows


def state_from_fields(row: Mapping[str, str]) -> JobState:
    """One `squeue -O` line read by `squeue_field_rows`, with at least STATUS_FIELDS."""
    native = row["State"]
    phase = slurm_phase(native)
    exit_text = row["exit_code"]
    status = int(exit_text) if exit_text.isdigit() else None
    return JobState(
        job_id=row["JobID"],
        phase=phase,
        native_state=native,
        exit_code=_exit_code_from_status(status) if phase.finished else None,
        queue=row["Partition"],
        name=row["Name"],
        submit_time=time_text(row["SubmitTime"]),
        start_time=time_text(row["StartTime"]) if native != "PENDING" else "",
        finish_time=time_text(row["EndTime"]) if phase.finished else "",
        reason="" if row["Reason"] == "None" else row["Reason"],
    )


def parse_squeue_fields(result: RemoteResult) -> dict[str, JobState]:
    """`squeue -h -O STATUS_FORMAT`: `id|state|partition|name|reason|exit|submit|start|end|`."""
    return {row["JobID"]: state_from_fields(row) for row in squeue_field_rows(result, STATUS_FIELDS)}


def parse_squeue_text(result: RemoteResult) -> dict[str, JobState]:
    """`squeue -h -o TEXT_FORMAT`: `id|state|partition|name|reason`, no exit code or times."""
    if result.exit_code != 0:
        if "Invalid job id specified" in result.stderr:
            return {}
        raise SchedulerError(f"squeue failed (exit {result.exit_code}): {result.stderr.strip()}")
    states: dict[str, JobState] = {}
    for line in result.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 5 or not parts[0].isdigit():
            continue
        job_id, native, queue, name, reason = parts
        states[job_id] = JobState(
            job_id=job_id,
            phase=slurm_phase(native),
            native_state=native,
            queue=queue,
            name=name,
            reason="" if reason == "None" else reason,
        )
    if not states and has_text(result.stdout):
        raise unreadable_answer("squeue", result.stdout)
    return states


def parse_sacct(result: RemoteResult) -> dict[str, JobState]:
    """`sacct -n -P -o SACCT_FIELDS`: one `|`-separated line per job (its steps are skipped)."""
    if result.exit_code != 0:
        # "Slurm accounting storage is disabled": try the next source.
        raise UnsupportedOutput(result.stderr.strip())
    states: dict[str, JobState] = {}
    for line in result.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 8 or not parts[0].isdigit():
            continue  # job steps (123.batch) and array elements are not Atlas's jobs
        job_id, name, queue, native_text, exit_text, submit, start, end = parts
        native = native_text.split(" ")[0]  # "CANCELLED by 1001"
        states[job_id] = JobState(
            job_id=job_id,
            phase=slurm_phase(native),
            native_state=native,
            exit_code=exit_code_from_text(exit_text) if slurm_phase(native).finished else None,
            queue=queue,
            name=name,
            submit_time=submit if submit != "Unknown" else "",
            start_time=start if start != "Unknown" else "",
            finish_time=end if end != "Unknown" else "",
        )
    if not states and has_text(result.stdout):
        raise unreadable_answer("sacct", result.stdout)
    return states



# --- job arrays: one line per element -----------------------------------------------------------

# `squeue -r` prints every element on its own line: the array's id (%F), the element's index (%K),
# its state and reason. Without -r, pending elements share one line (`%K` `3-9%2`); both are read.
ARRAY_FORMAT = "%F|%K|%T|%r"
ARRAY_SACCT_FIELDS = "JobID,State,ExitCode"
ELEMENT_ID = re.compile(r"^(\d+)_(\[?[0-9,\-:%]+\]?)$")


def expand_indices(text: str) -> list[int]:
    """Slurm's index list as printed (`3`, `0-5`, `[3-9%2]`, `1,4-6`, `0-10:2`) as indices."""
    body = text.strip().strip("[]").split("%", 1)[0]
    indices: list[int] = []
    for part in filter(None, body.split(",")):
        span, _, step = part.partition(":")
        first, _, last = span.partition("-")
        if not first.isdigit() or (last and not last.isdigit()) or (step and not step.isdigit()):
            raise UnsupportedOutput(f"not an array index list: {text!r}")
        indices.extend(range(int(first), int(last or first) + 1, int(step or 1)))
    return indices


def array_squeue_command(array_id: str) -> str:
    return f"squeue -h -r -t all -j {shlex.quote(array_id)} -o {shlex.quote(ARRAY_FORMAT)}"


def array_lookup_command(job_name: str) -> str:
    # The login user's only, as lookup_by_name_query; one line per array (no -r): its id and state.
    return f'squeue -h -t all -u "$(id -un)" --name={shlex.quote(job_name)} -o {shlex.quote(ARRAY_FORMAT)}'


def parse_array_squeue(result: RemoteResult, by: str = "index") -> dict[str, JobState]:
    """`squeue -o ARRAY_FORMAT`: by element index (`by="index"`) or by array id (`by="array"`).
    "Invalid job id specified" (the array is past MinJobAge) is no elements."""
    if result.exit_code != 0:
        if "Invalid job id specified" in result.stderr:
            return {}
        raise UnsupportedOutput(result.stderr.strip())
    states: dict[str, JobState] = {}
    read = False
    for line in result.stdout.splitlines():
        parts = [p.strip() for p in line.strip().split("|")]
        if len(parts) != 4 or not parts[0].isdigit():
            continue
        read = True
        array_id, indices, native, reason = parts
        state = JobState(array_id, slurm_phase(native), native, reason="" if reason == "None" else reason)
        if by == "array":
            states.setdefault(array_id, state)
            continue
        if indices in ("N/A", ""):
            # The array's own record: an array cancelled while every element was pending is one
            # such line (`1|N/A|CANCELLED|None`), naming no element. It speaks for them all.
            if state.phase.finished:
                states.setdefault(EVERY_ELEMENT, state)
            continue
        for index in expand_indices(indices):
            states[str(index)] = state
    if not read and has_text(result.stdout):
        raise unreadable_answer("squeue", result.stdout)
    return states


def array_sacct_command(array_id: str) -> str:
    return f"sacct -n -P -X -o {ARRAY_SACCT_FIELDS} -j {shlex.quote(array_id)}"


def parse_array_sacct(result: RemoteResult) -> dict[str, JobState]:
    """`sacct -P -o JobID,State,ExitCode` of an array, by element index: `12_3|COMPLETED|0:0`,
    `12_[4-9%2]|PENDING|0:0`, `12_5|CANCELLED by 1000|0:15`. No accounting (exit 1): no elements."""
    if result.exit_code != 0:
        return {}
    states: dict[str, JobState] = {}
    for line in result.stdout.splitlines():
        parts = line.strip().split("|")
        if len(parts) != 3:
            continue
        match = ELEMENT_ID.match(parts[0])
        if not match:
            continue
        native = parts[1]
        state = JobState(match.group(1), slurm_phase(native), native, exit_code=exit_code_from_text(parts[2]))
        for index in expand_indices(match.group(2)):
            states[str(index)] = state
    return states
