"""Slurm: `#SBATCH` scripts, sbatch/squeue/sacct/scancel command lines and their output.

Formats were recorded on Debian bookworm's slurm-wlm 22.05.8 (tests/unit/data holds the recordings).
Status is read from `squeue -O` fields and `sacct -P`, never `squeue --json` (see STATUS_FIELDS).
Pure: no I/O.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from typing import ClassVar

from infra.hpc.remote import RemoteResult
from infra.hpc.scheduler import (
    CancelOutcome,
    Directive,
    JobSpec,
    JobState,
    Phase,
    Scheduler,
    SchedulerError,
    StatusQuery,
    UnsupportedOutput,
    has_text,
    unreadable_answer,
    validate_job_ids,
)

PARSABLE = re.compile(r"^(\d+)(?:;\S+)?$")
SUBMITTED = re.compile(r"Submitted batch job (\d+)")
TEXT_FORMAT = "%i|%T|%P|%j|%r"
# The live status query's fields (`squeue -O`, each ended by `|`): state, exit code and times in
# one line per asked-for job. Not `squeue --json`: through 22.05 it ignores -j and -t ("all other
# formatting and filtering arguments will be ignored") and prints every job the controller holds
# (0.32 s and every user's jobs for 3,000 jobs on the local Satori, against 0.02 s for these).
STATUS_FIELDS = ("JobID", "State", "Partition", "Name", "Reason", "exit_code", "SubmitTime", "StartTime", "EndTime")
STATUS_FORMAT = ",".join(f"{field}:|" for field in STATUS_FIELDS)
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


def _time_text(value: str) -> str:
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


def _exit_code_from_text(text: str) -> int | None:
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


class SlurmScheduler(Scheduler):
    name: ClassVar[str] = "slurm"
    label: ClassVar[str] = "Slurm"
    script_suffix: ClassVar[str] = ".sbatch"
    directive_prefix: ClassVar[str] = "#SBATCH"
    job_id_variable: ClassVar[str] = "SLURM_JOB_ID"
    log_placeholder: ClassVar[str] = "%j"
    option_value_separator: ClassVar[str] = "="
    state_phases: ClassVar[Mapping[str, Phase]] = STATE_PHASES
    submit_program: ClassVar[str] = "sbatch"
    cancel_program: ClassVar[str] = "scancel"
    account_option: ClassVar[str] = "--account"
    rendered_options: ClassVar[frozenset[str]] = frozenset(
        {
            "--cpus-per-task",
            "--job-name",
            "--nodes",
            "--ntasks-per-node",
            "--output",
            "--gres",
            "--mem",
            "--partition",
            "--time",
            account_option,
        }
    )
    reserved_options: ClassVar[Mapping[str, str]] = {
        "--job-name": "Atlas finds its jobs by this name",
        "-J": "Atlas finds its jobs by this name",
        "--output": "Atlas reads each step's log (stdout and stderr) from this file",
        "-o": "Atlas reads each step's log (stdout and stderr) from this file",
        "--error": "Atlas reads each step's errors from its --output file",
        "-e": "Atlas reads each step's errors from its --output file",
        "--dependency": "Atlas chains the steps with dependencies of its own",
        "-d": "Atlas chains the steps with dependencies of its own",
        "--array": "Atlas runs one job per step",
        "-a": "Atlas runs one job per step",
    }

    @classmethod
    def option_of(cls, directive_text: str) -> str:
        option = super().option_of(directive_text)
        # A short option may carry its value attached (`-pdebug`): every short option is one letter.
        return option[:2] if len(option) > 2 and not option.startswith("--") else option

    def directives(self, spec: JobSpec) -> list[Directive]:
        result = [
            Directive("--cpus-per-task", str(spec.cpus_per_task)),
            Directive("--job-name", spec.job_name),
            Directive("--nodes", str(spec.nodes)),
            Directive("--ntasks-per-node", "1"),
            Directive("--output", spec.log_file(self.log_placeholder)),
        ]
        if spec.gpus_per_node:
            result.append(Directive("--gres", f"gpu:{spec.gpus_per_node}"))
        if spec.memory_mib is not None:
            result.append(Directive("--mem", f"{spec.memory_mib}M"))
        if spec.queue:
            result.append(Directive("--partition", spec.queue))
        if spec.walltime_seconds:
            days, rest = divmod(spec.walltime_seconds, 86400)
            hours, rest = divmod(rest, 3600)
            minutes, seconds = divmod(rest, 60)
            clock = f"{hours:02d}:{minutes:02d}:{seconds:02d}"
            result.append(Directive("--time", f"{days}-{clock}" if days else clock))
        return result

    # --- submission ---------------------------------------------------------------------------

    def dependency_option(self, after: Sequence[str]) -> str:
        # Slurm silently drops a dependency on an unknown job: callers check the ids exist first.
        return "--dependency=afterok:" + ":".join(validate_job_ids(after))

    def submit_command(self, workdir: str, script: str, after: Sequence[str]) -> str:
        command = "sbatch --parsable"
        if after:
            command += " " + shlex.quote(self.dependency_option(after))
        return f"cd -- {shlex.quote(workdir)} && {command} {shlex.quote(script)}"

    def parse_submission(self, result: RemoteResult) -> str:
        if result.exit_code == 0:
            for line in reversed(result.stdout.strip().splitlines()):
                match = PARSABLE.match(line.strip()) or SUBMITTED.search(line)
                if match:
                    return match.group(1)
        raise self.submission_refused(result)

    # --- status ---------------------------------------------------------------------------------

    def status_queries(self, job_ids: Sequence[str]) -> list[StatusQuery]:
        ids = ",".join(validate_job_ids(job_ids))
        return [
            # -t all: finished jobs stay visible for MinJobAge (300 s by default).
            StatusQuery(f"squeue -h -t all -j {ids} -O {shlex.quote(STATUS_FORMAT)}", self.parse_squeue_fields),
            # A Slurm whose -O lacks a field: the short form (no exit code or times).
            StatusQuery(f"squeue -h -t all -j {ids} -o {shlex.quote(TEXT_FORMAT)}", self.parse_squeue_text),
        ]

    def accounting_queries(self, job_ids: Sequence[str]) -> list[StatusQuery]:
        ids = ",".join(validate_job_ids(job_ids))
        return [
            StatusQuery(f"sacct -n -P -X -o {SACCT_FIELDS} -j {ids}", self.parse_sacct),
            # Without slurmdbd, jobcomp/filetxt still records finished jobs.
            StatusQuery(f"sacct -c -n -P -o {SACCT_FIELDS} -j {ids}", self.parse_sacct),
        ]

    def lookup_by_name_query(self, job_name: str) -> StatusQuery:
        # The login user's jobs only: squeue lists every user's by default, and another user's
        # job of the same name (a colleague's clone of the same stack) is not this resource's.
        # (bjobs -J shows only the user's own.) `--me` is Slurm 20.11+; -u works everywhere.
        return StatusQuery(
            f'squeue -h -t all -u "$(id -un)" --name={shlex.quote(job_name)} -o {shlex.quote(TEXT_FORMAT)}',
            self.parse_squeue_text,
        )

    def parse_squeue_fields(self, result: RemoteResult) -> dict[str, JobState]:
        """`squeue -h -O STATUS_FORMAT`: `id|state|partition|name|reason|exit|submit|start|end|`."""
        return {row["JobID"]: self.state_from_fields(row) for row in squeue_field_rows(result, STATUS_FIELDS)}

    def state_from_fields(self, row: Mapping[str, str]) -> JobState:
        """One `squeue -O` line read by `squeue_field_rows`, with at least STATUS_FIELDS."""
        native = row["State"]
        phase = self.phase_of(native)
        exit_text = row["exit_code"]
        status = int(exit_text) if exit_text.isdigit() else None
        return JobState(
            job_id=row["JobID"],
            phase=phase,
            native_state=native,
            exit_code=_exit_code_from_status(status) if phase.finished else None,
            queue=row["Partition"],
            name=row["Name"],
            submit_time=_time_text(row["SubmitTime"]),
            start_time=_time_text(row["StartTime"]) if native != "PENDING" else "",
            finish_time=_time_text(row["EndTime"]) if phase.finished else "",
            reason="" if row["Reason"] == "None" else row["Reason"],
        )

    def parse_squeue_text(self, result: RemoteResult) -> dict[str, JobState]:
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
                phase=self.phase_of(native),
                native_state=native,
                queue=queue,
                name=name,
                reason="" if reason == "None" else reason,
            )
        if not states and has_text(result.stdout):
            raise unreadable_answer("squeue", result.stdout)
        return states

    def parse_sacct(self, result: RemoteResult) -> dict[str, JobState]:
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
                phase=self.phase_of(native),
                native_state=native,
                exit_code=_exit_code_from_text(exit_text) if self.phase_of(native).finished else None,
                queue=queue,
                name=name,
                submit_time=submit if submit != "Unknown" else "",
                start_time=start if start != "Unknown" else "",
                finish_time=end if end != "Unknown" else "",
            )
        if not states and has_text(result.stdout):
            raise unreadable_answer("sacct", result.stdout)
        return states

    # --- cancel ---------------------------------------------------------------------------------

    def parse_cancel(self, job_id: str, result: RemoteResult) -> CancelOutcome:
        # scancel is silent and exits 0 for unknown and finished jobs alike; the caller's status
        # query tells those apart.
        if result.exit_code == 0:
            return CancelOutcome.CANCELLED
        text = (result.stderr + result.stdout).strip()
        if "Invalid job id specified" in text:
            return CancelOutcome.NOT_FOUND
        if "already completing or completed" in text or "Job/step already completed" in text:
            return CancelOutcome.ALREADY_FINISHED
        raise SchedulerError(f"scancel {job_id} failed (exit {result.exit_code}): {text or '(no output)'}")
