"""Slurm: `#SBATCH` scripts, sbatch/squeue/sacct/scancel command lines and their output.

Formats were recorded on Debian bookworm's slurm-wlm 22.05.8 (tests/unit/data holds the recordings);
newer releases' JSON shapes (exit_code as an object, numbers as {"set", "number"}) are read
too. Pure: no I/O.
"""

from __future__ import annotations

import datetime
import json
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

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


def _number(value: Any) -> int | None:
    """22.05 writes plain integers; 23.02+ writes {"set": bool, "infinite": bool, "number": int}."""
    if isinstance(value, dict):
        if not value.get("set", True) or value.get("infinite"):
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _epoch_text(value: Any) -> str:
    epoch = _number(value)
    if not epoch:
        return ""
    return datetime.datetime.fromtimestamp(epoch, tz=datetime.UTC).isoformat().replace("+00:00", "Z")


def _time_text(value: str) -> str:
    """squeue's and sacct's times as written (the cluster's local time); unset ones are empty."""
    return "" if value in ("", "N/A", "Unknown", "None") else value


def _exit_code_from_json(value: Any) -> int | None:
    if isinstance(value, dict):  # 23.02+: {"status": [...], "return_code": {...}, "signal": {...}}
        code = _number(value.get("return_code"))
        signal = value.get("signal", {})
        signal_id = _number(signal.get("id") if isinstance(signal, dict) else None)
        if signal_id:
            return 128 + signal_id
        return code
    status = _number(value)
    if status is None:
        return None
    # 22.05: the raw wait status (768 for `exit 3`); a signal shows in the low 7 bits.
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
        if result.exit_code != 0:
            if "Invalid job id specified" in result.stderr:
                return {}  # every id asked for is unknown
            # An older -O without one of the fields, or the controller down: the short form
            # tries next and, if the controller is down, fails with Slurm's own message.
            raise UnsupportedOutput(result.stderr.strip())
        states: dict[str, JobState] = {}
        for line in result.stdout.splitlines():
            parts = [p.strip() for p in line.split("|")]
            if len(parts) != len(STATUS_FIELDS) + 1 or parts[-1] or not parts[0].isdigit():
                continue
            job_id, native, queue, name, reason, exit_text, submit, start, end = parts[:-1]
            phase = self.phase_of(native)
            status = int(exit_text) if exit_text.isdigit() else None
            states[job_id] = JobState(
                job_id=job_id,
                phase=phase,
                native_state=native,
                exit_code=_exit_code_from_json(status) if phase.finished else None,
                queue=queue,
                name=name,
                submit_time=_time_text(submit),
                start_time=_time_text(start) if native != "PENDING" else "",
                finish_time=_time_text(end) if phase.finished else "",
                reason="" if reason == "None" else reason,
            )
        if not states and has_text(result.stdout):
            raise unreadable_answer("squeue", result.stdout)
        return states

    def parse_squeue_json(self, result: RemoteResult) -> dict[str, JobState]:
        if result.exit_code != 0:
            if "Invalid job id specified" in result.stderr:
                return {}  # every id asked for is unknown
            raise UnsupportedOutput(result.stderr.strip())
        try:
            document = json.loads(result.stdout)
        except json.JSONDecodeError:
            raise UnsupportedOutput("squeue --json printed no JSON (Slurm older than 21.08?)") from None
        if not isinstance(document, dict):
            raise unreadable_answer("squeue --json", result.stdout)
        errors = [e.get("error") or e.get("description") for e in document.get("errors") or [] if isinstance(e, dict)]
        if errors and not document.get("jobs"):
            # 22.05 exits 0 with no jobs and an "errors" list when slurmctld cannot be reached:
            # not "no such jobs". The text form then fails with slurm's own message.
            raise UnsupportedOutput(f"squeue --json: {'; '.join(str(e) for e in errors)}")
        # squeue --json always writes a "jobs" list (empty for none): without one it is not squeue's.
        if not isinstance(document.get("jobs"), list):
            raise unreadable_answer("squeue --json", result.stdout)
        states: dict[str, JobState] = {}
        for job in document.get("jobs", []):
            if not isinstance(job, dict) or _number(job.get("job_id")) is None:
                raise unreadable_answer("squeue --json", result.stdout)
            raw_state = job.get("job_state", "")
            native = raw_state[0] if isinstance(raw_state, list) and raw_state else str(raw_state)  # 23.02+: a list
            job_id = str(_number(job.get("job_id")))
            exit_code = _exit_code_from_json(job.get("exit_code")) if native not in ("PENDING", "RUNNING") else None
            states[job_id] = JobState(
                job_id=job_id,
                phase=self.phase_of(native),
                native_state=native,
                exit_code=exit_code,
                queue=str(job.get("partition", "")),
                name=str(job.get("name", "")),
                submit_time=_epoch_text(job.get("submit_time")),
                start_time=_epoch_text(job.get("start_time")) if native != "PENDING" else "",
                finish_time=_epoch_text(job.get("end_time")) if self.phase_of(native).finished else "",
                reason=str(job.get("state_reason", "")),
            )
        return states

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
