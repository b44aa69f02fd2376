"""`LsfScheduler`: IBM Spectrum LSF 10.1 as Atlas drives it, every operation of the `Scheduler` interface.

`#BSUB` directives and the bsub/bjobs/bhist/bkill command lines are here, with the one option LSF
takes (`memory_unit`, the cluster's LSF_UNIT_FOR_LIMITS); the answers are read by jobs.py (job
states), records.py (the report's records) and hosts.py (the monitor's hosts and queue). Backfill
is declined, saying why. Formats are LSF's documented ones (IBM Spectrum LSF 10.1 command
reference), tested on recorded output in tests/unit/test_hpc_parsers.py. Pure: no I/O.
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from infra.hpc.lsf import hosts, jobs, preflight, records
from infra.hpc.options import (
    MAX_ARRAY_SIZE,
    array_size_help,
    array_size_option,
    option_error,
    option_key,
    options_section,
)
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
from infra.index_ranges import index_ranges
from infra.job_records import ElementRecord, HpcNode, QueueJob, StepRecord

# LSF prints other lines before the answer ("LSF is processing your request. Please wait ..."):
# search, never take the first line.
SUBMITTED = re.compile(r"Job <(\d+)> is submitted to (?:default )?queue <([^>]*)>")
# LSF_UNIT_FOR_LIMITS values Atlas converts a step's memory into (MiB per unit).
MEMORY_UNIT_MIB = {"KB": 1 / 1024, "MB": 1, "GB": 1024}
DEFAULT_MEMORY_UNIT = "MB"
# The spelling of `memory_unit` before `scheduler_options` (a target's top-level key, and a
# BatchJob's input in state written then).
LEGACY_MEMORY_UNIT = "lsf_memory_unit"


class LsfScheduler(Scheduler):
    name: ClassVar[str] = "lsf"
    label: ClassVar[str] = "LSF"
    script_suffix: ClassVar[str] = ".lsf"
    directive_prefix: ClassVar[str] = "#BSUB"
    job_id_variable: ClassVar[str] = "LSB_JOBID"
    log_placeholder: ClassVar[str] = "%J"
    option_value_separator: ClassVar[str] = " "
    state_phases: ClassVar[Mapping[str, Phase]] = jobs.STATE_PHASES
    submit_program: ClassVar[str] = "bsub"
    cancel_program: ClassVar[str] = "bkill"
    account_option: ClassVar[str] = "-P"
    rendered_options: ClassVar[frozenset[str]] = frozenset(
        {"-J", "-L", "-n", "-o", "-M", "-R", "-gpu", "-q", "-W", account_option}
    )
    reserved_options: ClassVar[Mapping[str, str]] = {
        "-J": "Atlas finds its jobs by this name",
        "-o": "Atlas reads each step's log (stdout and stderr) from this file",
        "-oo": "Atlas reads each step's log (stdout and stderr) from its -o file",
        "-e": "Atlas reads each step's errors from its -o file",
        "-eo": "Atlas reads each step's errors from its -o file",
        "-w": "Atlas chains the steps with dependencies of its own",
    }
    legacy_option_keys: ClassVar[tuple[str, ...]] = (LEGACY_MEMORY_UNIT,)
    option_help: ClassVar[Mapping[str, tuple[str, str]]] = {
        "memory_unit": (
            f"The unit of the cluster's memory limits (LSF_UNIT_FOR_LIMITS, `bparams -a`): one of "
            f"{', '.join(MEMORY_UNIT_MIB)}; default {DEFAULT_MEMORY_UNIT}. Older spelling: {LEGACY_MEMORY_UNIT} beside "
            "scheduler_options.",
            "GB",
        ),
        MAX_ARRAY_SIZE: array_size_help("MAX_JOB_ARRAY_SIZE", 1000, "bparams -a"),
    }
    backfill_unsupported: ClassVar[str] = (
        "preemption is a queue the site defines (PREEMPTION=PREEMPTABLE in lsb.queues)"
    )
    programs: ClassVar[tuple[str, ...]] = ("bsub", "bjobs", "bhist", "bkill", "bqueues", "lsload")
    array_task_variable: ClassVar[str] = "LSB_JOBINDEX"
    array_index_base: ClassVar[int] = 1
    array_log_placeholder: ClassVar[str] = "%J_%I"
    # MAX_JOB_ARRAY_SIZE (lsb.params, `bparams -a`): indices 1 to 1,000 at the default.
    array_size_limit: ClassVar[int] = 1000

    def __init__(self, memory_unit: str = DEFAULT_MEMORY_UNIT) -> None:
        # LSF_UNIT_FOR_LIMITS is the cluster's (bparams -a); never assume the local machine's.
        if memory_unit not in MEMORY_UNIT_MIB:
            raise ValueError(f"LSF memory unit must be one of {', '.join(MEMORY_UNIT_MIB)}, found {memory_unit!r}")
        self.memory_unit = memory_unit

    # --- its own options ----------------------------------------------------------------------

    @classmethod
    def parse_options(
        cls, options: object, key: str, legacy: Mapping[str, Any] | None = None
    ) -> dict[str, str]:
        """`memory_unit`: the unit of the cluster's memory limits (LSF_UNIT_FOR_LIMITS), MB by
        default; `lsf_memory_unit` beside `scheduler_options` is its older spelling."""
        section = options_section(options, key, tuple(cls.option_help), cls.label)
        given, older = section.get("memory_unit"), (legacy or {}).get(LEGACY_MEMORY_UNIT)
        fix = "use the cluster's LSF_UNIT_FOR_LIMITS (bparams -a | grep LSF_UNIT_FOR_LIMITS)"
        for where, unit in ((option_key(key, "memory_unit"), given), (f"{key}.{LEGACY_MEMORY_UNIT}", older)):
            if unit is not None and not (isinstance(unit, str) and unit in MEMORY_UNIT_MIB):
                raise option_error(where, f"expected one of {', '.join(MEMORY_UNIT_MIB)}, found {unit!r}", fix)
        if given is not None and older is not None and given != older:
            raise option_error(
                f"{key}.{LEGACY_MEMORY_UNIT}",
                f"says {older!r} where scheduler_options.memory_unit says {given!r}",
                "keep scheduler_options.memory_unit alone (lsf_memory_unit is its older spelling)",
            )
        return {
            "memory_unit": str(given or older or DEFAULT_MEMORY_UNIT),
            **array_size_option(section, key, "MAX_JOB_ARRAY_SIZE (bparams -a | grep MAX_JOB_ARRAY_SIZE)"),
        }

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> LsfScheduler:
        return cls(options.get("memory_unit") or DEFAULT_MEMORY_UNIT)

    # --- rendering ---------------------------------------------------------------------------

    def _memory(self, mib: int) -> str:
        return str(max(1, -(-int(mib * 1024 * 1024) // int(MEMORY_UNIT_MIB[self.memory_unit] * 1024 * 1024))))

    def directives(self, spec: JobSpec) -> list[Directive]:
        # One slot per node and span[ptile=1], as Satori's scripts asked for nodes (-n 8 -R "span[ptile=1]").
        resources = ["span[ptile=1]"]
        result = [
            Directive("-J", spec.job_name),
            Directive("-L", "/bin/bash"),
            Directive("-n", str(spec.nodes)),
            Directive("-o", spec.log_file(self.log_placeholder)),
        ]
        if spec.memory_mib is not None:
            memory = self._memory(spec.memory_mib)
            result.append(Directive("-M", memory))
            resources.insert(0, f"rusage[mem={memory}]")
        result.append(Directive("-R", " ".join(resources)))
        if spec.gpus_per_node:
            result.append(Directive("-gpu", f"num={spec.gpus_per_node}"))
        if spec.queue:
            result.append(Directive("-q", spec.queue))
        if spec.walltime_seconds:
            minutes = -(-spec.walltime_seconds // 60)
            result.append(Directive("-W", f"{minutes // 60}:{minutes % 60:02d}"))
        return result

    def array_directives(self, spec: JobSpec, count: int, parallel: int | None) -> list[Directive]:
        # The array is in the job's name (`-J "name[1-N]%P"`); %J the array's id, %I the element's index.
        throttle = f"%{parallel}" if parallel is not None else ""
        result = [d for d in self.directives(spec) if d.option not in ("-J", "-o")]
        result.append(Directive("-J", f"{spec.job_name}[1-{count}]{throttle}"))
        result.append(Directive("-o", spec.log_file(self.array_log_placeholder)))
        return result

    def phase_of(self, native_state: str, exit_code: int | None = None, reason: str = "") -> Phase:
        return jobs.lsf_phase(native_state, exit_code, reason)

    # --- submission ---------------------------------------------------------------------------

    def dependency_expression(self, after: Sequence[str], after_ended: Sequence[str] = ()) -> str:
        # done(): the job (an array: every element) ended DONE; ended(): DONE or EXIT.
        # An array's element is `<array>[<index>]`, as LSF names it.
        conditions = [
            f"{kind}({job if element is None else f'{job}[{element}]'})"
            for kind, ids in (("done", after), ("ended", after_ended))
            for job, element in validate_dependency_ids(ids)
        ]
        return " && ".join(conditions)

    def submit_command(
        self,
        workdir: str,
        script: str,
        after: Sequence[str],
        *,
        after_ended: Sequence[str] = (),
        array: ArrayRequest | None = None,
    ) -> str:
        # The script goes on stdin: `bsub script` ignores #BSUB lines unless LSB_BSUB_PARSE_SCRIPT=Y.
        # Options on the command line win over the script's #BSUB lines (a retry's -J).
        command = "bsub"
        if after or after_ended:
            command += f" -w {shlex.quote(self.dependency_expression(after, after_ended))}"
        if array is not None:
            throttle = f"%{array.parallel}" if array.parallel is not None else ""
            name = f"{validate_job_name(array.job_name)}[{index_ranges(array.indices)}]{throttle}"
            command += f" -J {shlex.quote(name)}"
        return f"cd -- {shlex.quote(workdir)} && {command} < {shlex.quote(script)}"

    def parse_submission(self, result: RemoteResult) -> str:
        # The last such line: anything before it (a wrapper's or profile's chatter) is not bsub's.
        matches = list(SUBMITTED.finditer(result.stdout))
        if result.exit_code == 0 and matches:
            return matches[-1].group(1)
        raise self.submission_refused(result)

    # --- status ---------------------------------------------------------------------------------

    def status_queries(self, job_ids: Sequence[str]) -> list[StatusQuery]:
        ids = shlex.join(validate_job_ids(job_ids))
        fields = " ".join(jobs.BJOBS_FIELDS)
        text_fields = " ".join(jobs.TEXT_FIELDS)
        return [
            # -json exists from 10.1.0.2 on; older sites get the delimited text form.
            StatusQuery(f"bjobs -o {shlex.quote(fields)} -json {ids}", self.parse_bjobs_json),
            StatusQuery(
                f"bjobs -noheader -o {shlex.quote(f'{text_fields} delimiter={jobs.TEXT_DELIMITER!r}')} {ids}",
                self.parse_bjobs_text,
            ),
        ]

    def accounting_queries(self, job_ids: Sequence[str]) -> list[StatusQuery]:
        # Past CLEAN_PERIOD only the event log knows a job.
        return [StatusQuery(f"bhist -l {shlex.join(validate_job_ids(job_ids))}", self.parse_bhist_long)]

    def lookup_by_name_query(self, job_name: str) -> StatusQuery:
        fields = " ".join(jobs.BJOBS_FIELDS)
        return StatusQuery(f"bjobs -a -J {shlex.quote(job_name)} -o {shlex.quote(fields)} -json", self.parse_bjobs_json)

    def array_lookup_query(self, job_name: str) -> StatusQuery:
        # `-J name` matches an array's elements (`name[3]`) by the array's name, keyed by JOBID.
        return self.lookup_by_name_query(job_name)

    def array_elements_query(self, array_id: str) -> StatusQuery:
        # An array's id names every element (LSF 10.1: `bjobs <id>`, `bkill <id>`, `done(<id>)`).
        fields = " ".join(jobs.ARRAY_FIELDS)
        command = f"bjobs -a -o {shlex.quote(fields)} -json {validate_job_ids([array_id])[0]}"
        return StatusQuery(command, jobs.parse_array_bjobs)

    def array_history_query(self, array_id: str) -> StatusQuery | None:
        # bjobs forgets a finished job after CLEAN_PERIOD (an hour by default); bhist reads the
        # event log, one block per element.
        return StatusQuery(f"bhist -l {validate_job_ids([array_id])[0]}", jobs.parse_array_bhist)

    def parse_bjobs_json(self, result: RemoteResult) -> dict[str, JobState]:
        return jobs.parse_bjobs_json(result)

    def parse_bjobs_text(self, result: RemoteResult) -> dict[str, JobState]:
        return jobs.parse_bjobs_text(result)

    def parse_bhist_long(self, result: RemoteResult) -> dict[str, JobState]:
        return jobs.parse_bhist_long(result)

    # --- cancel ---------------------------------------------------------------------------------

    def parse_cancel(self, job_id: str, result: RemoteResult) -> CancelOutcome:
        text = result.stdout + result.stderr
        if result.exit_code == 0 and "is being terminated" in text:
            return CancelOutcome.CANCELLED
        if "has already finished" in text:
            return CancelOutcome.ALREADY_FINISHED
        if "No matching job found" in text or "is not found" in text:
            return CancelOutcome.NOT_FOUND
        if result.exit_code == 0:
            return CancelOutcome.CANCELLED
        raise SchedulerError(f"bkill {job_id} failed (exit {result.exit_code}): {text.strip() or '(no output)'}")

    # --- the report's records -------------------------------------------------------------------

    def record_query(self, job_ids: Sequence[str]) -> str:
        return records.bjobs_query(job_ids)

    def record_query_answered(self, live: RemoteResult) -> bool:
        # bjobs -json exits 255 when some ids are unknown, yet its JSON is complete.
        return live.stdout.strip().startswith("{")

    def records_forgotten(self, live: RemoteResult, job_ids: Sequence[str]) -> list[str]:
        return records.bjobs_forgot(live, job_ids)

    def history_queries(self, job_ids: Sequence[str]) -> list[str]:
        return [records.bhist_query(job_ids)]

    def step_records(
        self,
        steps: Sequence[SubmittedStep],
        live: RemoteResult,
        history: RemoteResult | None,
        host: str,
        argv: Argv,
    ) -> tuple[StepRecord, ...]:
        return records.lsf_step_records(steps, live, history, host, argv)

    # --- a sweep's records ------------------------------------------------------------------------

    def array_record_queries(self, array_id: str) -> list[str]:
        return records.array_record_queries(validate_job_ids([array_id])[0])

    def array_element_records(
        self, array_id: str, answer: RemoteResult, command: str, host: str, year: int
    ) -> dict[int, ElementRecord]:
        return records.lsf_array_records(array_id, answer, command, host, year)

    # --- the monitor's reads --------------------------------------------------------------------

    def monitor_sections(self) -> tuple[tuple[str, str], ...]:
        return hosts.SECTIONS

    def read_nodes(self, sections: Sections) -> tuple[list[HpcNode], str]:
        return hosts.read_hosts(sections)

    def read_queue(self, sections: Sections, year: int) -> tuple[list[QueueJob], str]:
        return hosts.read_queue(sections, year)

    # --- backfill: declined (backfill_unsupported says why) ---------------------------------------

    def backfill_submit_command(self, workdir: str, script: str) -> str:
        raise self.no_backfill()

    def backfill_jobs_query(self, queue: str, finished: bool) -> str:
        raise self.no_backfill()

    def parse_backfill_jobs(self, result: RemoteResult) -> list[BackfillJob]:
        raise self.no_backfill()


    # --- the pre-flight check: the queue, and the hosts' GPUs (LSF has no dry run) ---------------

    def queue_probe(self, queue: str | None, key: str) -> Probe:
        return Probe(preflight.QUEUES_QUERY, functools.partial(preflight.judge_queue, queue, key))

    def request_probe(self, steps: Sequence[StepRequest], key: str, environment: str) -> Probe | None:
        specs = preflight.gpu_steps(steps)
        if not specs:
            return None
        return Probe(preflight.GPU_HOSTS_QUERY, functools.partial(preflight.judge_gpu_hosts, specs, key, environment))
