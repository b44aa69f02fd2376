"""`SlurmScheduler`: Slurm as Atlas drives it, every operation of the `Scheduler` interface.

`#SBATCH` directives and the sbatch/squeue/sacct/scancel command lines are here; the answers are
read by jobs.py (job states), records.py (the report's records) and nodes.py (the monitor's
nodes and queue). Backfill that yields runs in a preemptible partition, requeued when a real job
takes its GPUs. Slurm's one scheduler option is `max_array_size` (its MaxArraySize). Formats were
recorded on Debian bookworm's slurm-wlm 22.05.8 (tests/unit/data). Pure: no I/O.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from infra.hpc.options import MAX_ARRAY_SIZE, array_size_help, array_size_option, options_section
from infra.hpc.remote import RemoteResult
from infra.hpc.scheduler import (
    Argv,
    ArrayRequest,
    BackfillJob,
    CancelOutcome,
    Directive,
    JobSpec,
    JobState,
    Phase,
    Probe,
    Scheduler,
    SchedulerError,
    Sections,
    StatusQuery,
    StepRequest,
    SubmittedStep,
    validate_dependency_ids,
    validate_job_ids,
    validate_job_name,
)
from infra.hpc.slurm import jobs, nodes, preflight, records
from infra.index_ranges import index_ranges
from infra.job_records import ElementRecord, HpcNode, QueueJob, StepRecord

PARSABLE = re.compile(r"^(\d+)(?:;\S+)?$")
SUBMITTED = re.compile(r"Submitted batch job (\d+)")
BACKFILL_FORMAT = "%i|%T|%r|%j"


class SlurmScheduler(Scheduler):
    name: ClassVar[str] = "slurm"
    label: ClassVar[str] = "Slurm"
    script_suffix: ClassVar[str] = ".sbatch"
    directive_prefix: ClassVar[str] = "#SBATCH"
    job_id_variable: ClassVar[str] = "SLURM_JOB_ID"
    log_placeholder: ClassVar[str] = "%j"
    option_value_separator: ClassVar[str] = "="
    state_phases: ClassVar[Mapping[str, Phase]] = jobs.STATE_PHASES
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
        "--array": "Atlas runs one job per step, and one array per swept step",
        "-a": "Atlas runs one job per step, and one array per swept step",
    }
    programs: ClassVar[tuple[str, ...]] = ("sbatch", "squeue", "sacct", "scancel", "sinfo")
    array_task_variable: ClassVar[str] = "SLURM_ARRAY_TASK_ID"
    array_index_base: ClassVar[int] = 0
    array_log_placeholder: ClassVar[str] = "%A_%a"
    # MaxArraySize (slurm.conf, `scontrol show config`) caps the largest index plus one: 0 to 1000.
    array_size_limit: ClassVar[int] = 1001
    option_help: ClassVar[Mapping[str, tuple[str, str]]] = {
        MAX_ARRAY_SIZE: array_size_help("MaxArraySize", 1001, "scontrol show config"),
    }

    # --- its own options: the array limit --------------------------------------------------------

    @classmethod
    def parse_options(
        cls, options: object, key: str, legacy: Mapping[str, Any] | None = None
    ) -> dict[str, str]:
        section = options_section(options, key, tuple(cls.option_help), cls.label)
        return array_size_option(section, key, "MaxArraySize (scontrol show config | grep MaxArraySize)")

    # --- rendering ---------------------------------------------------------------------------

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

    def array_directives(self, spec: JobSpec, count: int, parallel: int | None) -> list[Directive]:
        # %A the array's id, %a the element's index: each element writes its own log.
        result = [d for d in self.directives(spec) if d.option != "--output"]
        result.append(Directive("--output", spec.log_file(self.array_log_placeholder)))
        throttle = f"%{parallel}" if parallel is not None else ""
        result.append(Directive("--array", f"0-{count - 1}{throttle}"))
        return result

    # --- submission ---------------------------------------------------------------------------

    def dependency_option(self, after: Sequence[str], after_ended: Sequence[str] = ()) -> str:
        # Slurm silently drops a dependency on an unknown job: callers check the ids exist first.
        # A comma joins conditions that must all hold (afterok: succeeded; afterany: ended).
        # An array's element is `<array>_<task>`, as Slurm names it.
        kinds = [("afterok", validate_dependency_ids(after)), ("afterany", validate_dependency_ids(after_ended))]
        return "--dependency=" + ",".join(
            f"{kind}:" + ":".join(job if element is None else f"{job}_{element}" for job, element in ids)
            for kind, ids in kinds
            if ids
        )

    def submit_command(
        self,
        workdir: str,
        script: str,
        after: Sequence[str],
        *,
        after_ended: Sequence[str] = (),
        array: ArrayRequest | None = None,
    ) -> str:
        command = "sbatch --parsable"
        if after or after_ended:
            command += " " + shlex.quote(self.dependency_option(after, after_ended))
        if array is not None:
            throttle = f"%{array.parallel}" if array.parallel is not None else ""
            command += f" --array={index_ranges(array.indices)}{throttle}"
            command += f" --job-name={validate_job_name(array.job_name)}"
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
            StatusQuery(f"squeue -h -t all -j {ids} -O {shlex.quote(jobs.STATUS_FORMAT)}", self.parse_squeue_fields),
            # A Slurm whose -O lacks a field: the short form (no exit code or times).
            StatusQuery(f"squeue -h -t all -j {ids} -o {shlex.quote(jobs.TEXT_FORMAT)}", self.parse_squeue_text),
        ]

    def accounting_queries(self, job_ids: Sequence[str]) -> list[StatusQuery]:
        ids = validate_job_ids(job_ids)
        return [
            StatusQuery(jobs.sacct_command(ids), self.parse_sacct),
            # Without slurmdbd, jobcomp/filetxt still records finished jobs.
            StatusQuery(jobs.sacct_command(ids, jobcomp=True), self.parse_sacct),
        ]

    def lookup_by_name_query(self, job_name: str) -> StatusQuery:
        # The login user's jobs only: squeue lists every user's by default, and another user's
        # job of the same name (a colleague's clone of the same stack) is not this resource's.
        # (bjobs -J shows only the user's own.) `--me` is Slurm 20.11+; -u works everywhere.
        return StatusQuery(
            f'squeue -h -t all -u "$(id -un)" --name={shlex.quote(job_name)} -o {shlex.quote(jobs.TEXT_FORMAT)}',
            self.parse_squeue_text,
        )

    def array_lookup_query(self, job_name: str) -> StatusQuery:
        return StatusQuery(jobs.array_lookup_command(job_name), functools.partial(jobs.parse_array_squeue, by="array"))

    def array_elements_query(self, array_id: str) -> StatusQuery:
        # `-j <array id>` lists every element; `afterok:<array id>` likewise waits for every one.
        return StatusQuery(jobs.array_squeue_command(validate_job_ids([array_id])[0]), jobs.parse_array_squeue)

    def array_history_query(self, array_id: str) -> StatusQuery | None:
        return StatusQuery(jobs.array_sacct_command(validate_job_ids([array_id])[0]), jobs.parse_array_sacct)

    def parse_squeue_fields(self, result: RemoteResult) -> dict[str, JobState]:
        return jobs.parse_squeue_fields(result)

    def state_from_fields(self, row: Mapping[str, str]) -> JobState:
        return jobs.state_from_fields(row)

    def parse_squeue_text(self, result: RemoteResult) -> dict[str, JobState]:
        return jobs.parse_squeue_text(result)

    def parse_sacct(self, result: RemoteResult) -> dict[str, JobState]:
        return jobs.parse_sacct(result)

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

    # --- the report's records -------------------------------------------------------------------

    def record_query(self, job_ids: Sequence[str]) -> str:
        return records.squeue_query(job_ids)

    def record_query_answered(self, live: RemoteResult) -> bool:
        # Exit 1 with "Invalid job id specified": none of the jobs is known any more, an answer.
        return live.exit_code == 0 or "Invalid job id" in live.stderr

    def records_forgotten(self, live: RemoteResult, job_ids: Sequence[str]) -> list[str]:
        return records.squeue_forgot(live, job_ids)

    def history_queries(self, job_ids: Sequence[str]) -> list[str]:
        return records.sacct_queries(job_ids)

    def step_records(
        self,
        steps: Sequence[SubmittedStep],
        live: RemoteResult,
        history: RemoteResult | None,
        host: str,
        argv: Argv,
    ) -> tuple[StepRecord, ...]:
        return records.slurm_step_records(steps, live, history, host, argv)

    # --- a sweep's records ------------------------------------------------------------------------

    def array_record_queries(self, array_id: str) -> list[str]:
        return records.array_record_queries(validate_job_ids([array_id])[0])

    def array_element_records(
        self, array_id: str, answer: RemoteResult, command: str, host: str, year: int
    ) -> dict[int, ElementRecord]:
        return records.slurm_array_records(array_id, answer, command, host)

    # --- the monitor's reads --------------------------------------------------------------------

    def monitor_sections(self) -> tuple[tuple[str, str], ...]:
        return nodes.SECTIONS

    def read_nodes(self, sections: Sections) -> tuple[list[HpcNode], str]:
        return nodes.read_nodes(sections)

    def read_queue(self, sections: Sections, year: int) -> tuple[list[QueueJob], str]:
        return nodes.read_queue(sections)

    # --- backfill that yields: a preemptible partition, requeued jobs ---------------------------

    def backfill_submit_command(self, workdir: str, script: str) -> str:
        # --requeue: a preempted job goes back to the queue instead of ending.
        return self.submit_command(workdir, script, ()).replace("sbatch --parsable", "sbatch --parsable --requeue")

    def backfill_jobs_query(self, queue: str, finished: bool) -> str:
        states = " -t all" if finished else ""
        return f'squeue -h -u "$USER" -p {shlex.quote(queue)}{states} -o {shlex.quote(BACKFILL_FORMAT)}'

    def parse_backfill_jobs(self, result: RemoteResult) -> list[BackfillJob]:
        """`squeue -o '%i|%T|%r|%j'`: id, state, reason, name."""
        found = []
        for line in result.stdout.splitlines():
            parts = line.strip().split("|")
            if len(parts) == 4 and parts[0].isdigit():
                found.append(BackfillJob(job_id=parts[0], state=parts[1], reason=parts[2], name=parts[3]))
        return found

    # --- the pre-flight check: the partition, and sbatch --test-only for each step --------------

    def queue_probe(self, queue: str | None, key: str) -> Probe:
        return Probe(preflight.PARTITIONS_QUERY, functools.partial(preflight.judge_partition, queue, key))

    def request_probe(self, steps: Sequence[StepRequest], key: str, environment: str) -> Probe | None:
        # Every step, not only the GPU one: a walltime over the partition's MaxTime fails as surely.
        if not steps:
            return None
        judge = functools.partial(preflight.judge_dry_run, steps, key, environment)
        return Probe(preflight.dry_run_command(steps), judge)
