"""What every batch scheduler has in common: job specs, job states, site directives, and the `Scheduler` interface.

Everything Atlas knows of one scheduler lives in its own package (infra/hpc/lsf/, infra/hpc/slurm/)
on a subclass of `Scheduler`, the way dask-jobqueue splits them: rendering, submission, status,
cancel, the report's records, the monitor's reads, backfill and its own options. The interface
below lists each operation as an abstract method, so a scheduler that lacks one fails when its
class is instantiated (the registry's test instantiates every one), never at run time.
registry.py names the schedulers, and everything else asks it. The whole job script is rendered
from a `JobSpec` by one pure function in job_script.py (`render_job_script`); a site's own
directives (`SiteDirectives`: account, extra lines, directives to leave out) go through it too.
Running a scheduler's queries is the callers' (polling.py's `query_states`, the report's and the
monitor's runners); nothing in this module does I/O.

What crosses to the report and the monitor is scheduler-neutral data: `StepRecord`, `HpcNode` and
`QueueJob` (infra/job_records.py), `BackfillJob` here; never a scheduler's own dict.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

from infra.doctor import Finding
from infra.hpc.apptainer import ContainerExec
from infra.hpc.remote import RemoteResult, Runner
from infra.job_records import ElementRecord, HpcNode, QueueJob, StepRecord, step_record
from infra.outputs import HpcOutputs, SweepArray, SweepOutputs

JOB_ID = re.compile(r"^[0-9]{1,12}$")
# Job names Atlas gives its jobs: scheduler-safe everywhere (LSF, Slurm, file names).
JOB_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
# Characters a directive value may use without quotes, as sites write them by hand.
_BARE = re.compile(r"^[A-Za-z0-9_@%+:,./-]+$")
_DOUBLE_QUOTE_SAFE = re.compile(r'^[^"$`\\!\n]*$')
# The queue (LSF) or partition (Slurm) backfill that yields runs in unless a site names another
# (infra/nodes/backfill.py): its jobs give way to any real job, so none is ahead of a real one.
BACKFILL_QUEUE = "backfill"
PREEMPTIBLE_QUEUES = frozenset({BACKFILL_QUEUE})


# The name of the monitor's section that lists every user's jobs (`read_queue` reads it).
QUEUE_SECTION = "queue"


class Phase(StrEnum):
    """A job's state in one vocabulary for both schedulers (the native state is kept beside it)."""

    PENDING = "pending"
    RUNNING = "running"
    SUSPENDED = "suspended"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"

    @property
    def finished(self) -> bool:
        return self in (Phase.SUCCEEDED, Phase.FAILED, Phase.CANCELLED)


@dataclass(frozen=True)
class JobState:
    job_id: str
    phase: Phase
    native_state: str
    exit_code: int | None = None
    queue: str = ""
    name: str = ""
    submit_time: str = ""
    start_time: str = ""
    finish_time: str = ""
    reason: str = ""


class UnsupportedOutput(Exception):
    """This query's output is not what this parser reads (an older scheduler): try the next query."""


def unreadable_answer(command: str, stdout: str) -> UnsupportedOutput:
    """An answer that exited 0 but has not one line a parser reads: garbage, not "no jobs"
    (which is empty output), so the caller tries another query or stops instead of taking the
    jobs for gone."""
    first = next((line.strip() for line in stdout.splitlines() if line.strip()), "")
    return UnsupportedOutput(f"{command} printed nothing Atlas can read (first line: {first[:200]!r})")


def has_text(stdout: str) -> bool:
    return any(line.strip() for line in stdout.splitlines())


class SchedulerError(Exception):
    """The scheduler refused or failed; the message quotes it and names the fix where known."""


class CancelOutcome(StrEnum):
    CANCELLED = "cancelled"  # the scheduler accepted the request
    ALREADY_FINISHED = "already-finished"
    NOT_FOUND = "not-found"


@dataclass(frozen=True)
class SiteDirectives:
    """What a site asks of every job script, beyond what Atlas renders from the workload.

    Validated once from the target's config (target_parser.py); dask-jobqueue's `account`,
    `job_extra_directives` and `job_directives_skip`, and submitit's `additional_parameters`.
    """

    account: str | None = None  # LSF `-P`, Slurm `--account`
    extra: tuple[str, ...] = ()  # directive lines without the prefix (`--qos=high`), kept as written
    skip: tuple[str, ...] = ()  # options (or option prefixes) of Atlas's own directives to leave out

    def skips(self, option: str) -> bool:
        return any(option.startswith(prefix) for prefix in self.skip)


NO_SITE_DIRECTIVES = SiteDirectives()


@dataclass(frozen=True)
class JobSpec:
    """One workload step as a batch job: everything the script is rendered from."""

    job_name: str
    step: str
    workdir: str  # absolute or relative to the login user's home; validated by the caller
    log_dir: str  # relative to workdir
    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    nodes: int = 1
    gpus_per_node: int = 0
    cpus_per_task: int = 1
    memory_mib: int | None = None
    walltime_seconds: int | None = None
    queue: str | None = None
    telemetry_out: str | None = None  # relative to workdir; None: no sampler
    telemetry_interval_s: float = 5.0
    python_path: str | None = None  # where the staged `infra.telemetry` package lives, relative to workdir
    description: str = ""
    site: SiteDirectives = NO_SITE_DIRECTIVES
    # How the command runs in the image (`apptainer exec`, infra/hpc/apptainer.py); None: bare.
    container: ContainerExec | None = None

    def log_file(self, placeholder: str) -> str:
        return f"{self.log_dir}/{self.step}.{placeholder}"


@dataclass(frozen=True)
class SubmittedStep:
    """A workload step's job as the stack outputs name it: what the report and the monitor ask about."""

    step: str
    job_id: str
    submitted_at: str = ""  # when Atlas submitted it (ISO 8601, UTC): the year LSF does not print

    @classmethod
    def all_of(cls, outputs: HpcOutputs) -> tuple[SubmittedStep, ...]:
        """Every step an HPC side's stack outputs list."""
        return tuple(cls(s.name, s.job_id, s.submitted_at) for s in outputs.steps)


# By step: the command line the step's sampler recorded (the report puts it beside the record).
Argv = Mapping[str, tuple[str, ...]]
# What one monitor poll's sections script answered, by section name: (exit status, output).
Sections = Mapping[str, tuple[int, str]]


@dataclass(frozen=True)
class BackfillJob:
    """One of the login user's backfill jobs, as the scheduler lists it."""

    job_id: str
    state: str  # the scheduler's own state (PENDING, RUNNING, ...)
    reason: str  # why it waits, where the scheduler says
    name: str


@dataclass(frozen=True)
class StatusQuery:
    """One way to ask for job states; `parse` raises UnsupportedOutput when it cannot read the output."""

    command: str
    parse: Callable[[RemoteResult], dict[str, JobState]]


@dataclass(frozen=True)
class ArrayRequest:
    """Some elements of an array script, submitted under another name: a retry of a sweep's failed
    points (the script's own array directive and name are overridden on the command line, which
    both schedulers let win over the script's)."""

    job_name: str
    indices: tuple[int, ...]  # the elements, as the scheduler counts them (from array_index_base)
    parallel: int | None = None


@dataclass(frozen=True)
class StepRequest:
    """One step as the scheduler will be asked to run it: its spec and its whole job script
    (job_script.render_job_script), for the pre-flight check to ask about without submitting."""

    spec: JobSpec
    script: str


@dataclass(frozen=True)
class Probe:
    """One read-only command of the pre-flight check (`atlas doctor`, infra/hpc/doctor.py) and its
    judge: a pure function of what the command answered. Nothing a probe runs creates anything."""

    command: str
    judge: Callable[[RemoteResult], Finding]


def directive_value(value: str) -> str:
    """Quote a directive value the way sites write them (`-R "span[ptile=1]"`), shell-safe.

    Values of plain characters stay bare; values needing quotes get double quotes when
    nothing in them is special inside double quotes (what Satori's scripts did), otherwise
    shlex's single quotes. All three read back to the same text under POSIX shell rules,
    which is how both bsub and sbatch split directive lines.
    """
    if _BARE.match(value):
        return value
    if _DOUBLE_QUOTE_SAFE.match(value):
        return f'"{value}"'
    return shlex.quote(value)


@dataclass(frozen=True)
class Directive:
    option: str
    value: str | None = None  # None: a flag


class Scheduler(ABC):
    """One batch scheduler: its data (class variables) and every operation whose logic differs.

    Grouped as the callers use them: rendering (job_script.py), submission, status and cancel
    (the providers, polling.py), the report's records (infra/compare/hpc_collector.py), the
    monitor's reads (infra/monitor/hpc.py), backfill (infra/nodes/) and the scheduler's own
    options (target_parser.py, the BatchJob's `scheduler_options` input).
    """

    name: ClassVar[str]  # the target's `scheduler` value
    label: ClassVar[str]  # how reports name it ("LSF over SSH")
    script_suffix: ClassVar[str]
    directive_prefix: ClassVar[str]
    job_id_variable: ClassVar[str]  # the job's id inside the job
    log_placeholder: ClassVar[str]  # the job id in an output file name
    option_value_separator: ClassVar[str]  # " " for `-q normal`, "=" for `--partition=normal`
    state_phases: ClassVar[Mapping[str, Phase]]
    submit_program: ClassVar[str]  # named in the error when it refuses a job
    cancel_program: ClassVar[str]
    account_option: ClassVar[str]  # what a site's `account` becomes
    # Every option `directives` may write (and the account's): what a site's skip entries may name.
    rendered_options: ClassVar[frozenset[str]]
    # Options Atlas's own bookkeeping depends on, with why: a site may neither skip nor add them.
    reserved_options: ClassVar[Mapping[str, str]]
    # Keys of a target's section beside `scheduler_options` that this scheduler still reads: an
    # older spelling of one of its options (another scheduler's target refuses them).
    legacy_option_keys: ClassVar[tuple[str, ...]] = ()
    # The options a target's `scheduler_options` may give this scheduler, each with what it means
    # (docs/configuration.md lists them from here): (description, example).
    option_help: ClassVar[Mapping[str, tuple[str, str]]] = {}
    # Why backfill that yields cannot be placed here; empty where it can (preemptible partitions).
    backfill_unsupported: ClassVar[str] = ""
    # Job arrays (a swept step, infra/hpc/job_script.py's render_array_script): the element's
    # index inside the job, the first index of an array, the array's id and the element's index
    # in an output file name, and the site's default cap on an array's indices.
    array_task_variable: ClassVar[str]
    array_index_base: ClassVar[int]
    array_log_placeholder: ClassVar[str]
    array_size_limit: ClassVar[int]
    # The programs Atlas runs on the login node (submit, status, history, cancel, the monitor's
    # reads): the pre-flight check asks that the login shell finds each.
    programs: ClassVar[tuple[str, ...]]

    # --- its own options ----------------------------------------------------------------------

    @classmethod
    @abstractmethod
    def parse_options(
        cls, options: object, key: str, legacy: Mapping[str, Any] | None = None
    ) -> dict[str, str]:
        """A target's `scheduler_options` (and the `legacy_option_keys` it has) validated, every
        default filled in, so two spellings of the same settings compare equal. Raises
        HpcConfigError naming `<key>.scheduler_options.<option>` (or the legacy key) and the fix;
        an option this scheduler does not take is refused the same way."""

    @classmethod
    def array_limit_of(cls, options: Mapping[str, str]) -> int:
        """The most elements one array of this site may have: the target's `max_array_size`, or
        else the scheduler's default (`array_size_limit`)."""
        return int(options.get("max_array_size") or cls.array_size_limit)

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> Scheduler:
        """The scheduler for options `parse_options` returned (absent ones take their defaults)."""
        return cls()

    # --- rendering ---------------------------------------------------------------------------

    @abstractmethod
    def directives(self, spec: JobSpec) -> list[Directive]: ...

    @classmethod
    def option_of(cls, directive_text: str) -> str:
        """The option a site's directive line sets: `--qos` of `--qos=high`, `-P` of `-P proj`."""
        return directive_text.split(maxsplit=1)[0].split("=", 1)[0]

    def format_directive(self, directive: Directive) -> str:
        if directive.value is None:
            return f"{self.directive_prefix} {directive.option}"
        return (
            f"{self.directive_prefix} {directive.option}{self.option_value_separator}{directive_value(directive.value)}"
        )

    @abstractmethod
    def array_directives(self, spec: JobSpec, count: int, parallel: int | None) -> list[Directive]:
        """`directives` for an array of `count` elements (indices from `array_index_base`), at
        most `parallel` running at once (None: no throttle), each with its own output file."""

    def array_directive_lines(self, spec: JobSpec, count: int, parallel: int | None) -> list[str]:
        """`directive_lines` of an array: the same site account, skips and extras."""
        return self.directive_lines(spec, self.array_directives(spec, count, parallel))

    def directive_lines(self, spec: JobSpec, own: list[Directive] | None = None) -> list[str]:
        """Atlas's directives and the site's account, sorted, less what the site skips; then the
        site's extra lines as written (extras are never skipped, as in dask-jobqueue)."""
        own = self.directives(spec) if own is None else list(own)
        if spec.site.account:
            own.append(Directive(self.account_option, spec.site.account))
        lines = sorted(self.format_directive(d) for d in own if not spec.site.skips(d.option))
        # Config validation (target_parser.py) is the first wall; a line break here would end the
        # directive and put the rest into the script as a command, so this is the second.
        unprintable = [extra for extra in spec.site.extra if not extra.isprintable()]
        if unprintable:
            raise ValueError(f"site directives must be one printable line each, found {unprintable!r}")
        return lines + [f"{self.directive_prefix} {extra}" for extra in spec.site.extra]

    def phase_of(self, native_state: str, exit_code: int | None = None, reason: str = "") -> Phase:
        return self.state_phases.get(native_state.split(" ")[0].upper(), Phase.UNKNOWN)

    # --- submission, status, cancel (the providers) -------------------------------------------

    @abstractmethod
    def submit_command(
        self,
        workdir: str,
        script: str,
        after: Sequence[str],
        *,
        after_ended: Sequence[str] = (),
        array: ArrayRequest | None = None,
    ) -> str:
        """The submission of `script` from `workdir`, once every job of `after` succeeded (an
        array: every element) and every one of `after_ended` ended, whatever its outcome; `array`
        submits only some elements of an array script, under another name."""

    @abstractmethod
    def parse_submission(self, result: RemoteResult) -> str: ...

    def submission_refused(self, result: RemoteResult) -> SchedulerError:
        """The error for a submission the scheduler did not accept: its last line of complaint."""
        message = (result.stderr.strip() or result.stdout.strip() or "(no output)").splitlines()[-1]
        return SchedulerError(f"{self.submit_program} refused the job (exit {result.exit_code}): {message}")

    @abstractmethod
    def status_queries(self, job_ids: Sequence[str]) -> list[StatusQuery]: ...

    @abstractmethod
    def accounting_queries(self, job_ids: Sequence[str]) -> list[StatusQuery]: ...

    @abstractmethod
    def lookup_by_name_query(self, job_name: str) -> StatusQuery: ...

    # --- job arrays (a swept step's SweepJob) ---------------------------------------------------

    @abstractmethod
    def array_lookup_query(self, job_name: str) -> StatusQuery:
        """The login user's arrays of this name, keyed by array id (any element's state): what an
        interrupted submission already put in the queue."""

    @abstractmethod
    def array_elements_query(self, array_id: str) -> StatusQuery:
        """Every element of one array in one query, keyed by the element's index as the scheduler
        counts it (from `array_index_base`), as text; `EVERY_ELEMENT` for the state of the
        elements the answer does not list one by one (Slurm's one line for an array ended while
        all of it was pending)."""

    def array_history_query(self, array_id: str) -> StatusQuery | None:
        """Where elements the live query forgot are still known (Slurm's accounting); None: nowhere."""
        return None

    def cancel_command(self, *job_ids: str) -> str:
        return f"{self.cancel_program} {shlex.join(validate_job_ids(job_ids))}"

    @abstractmethod
    def parse_cancel(self, job_id: str, result: RemoteResult) -> CancelOutcome: ...

    # --- the report's records (infra/compare/hpc_collector.py) ---------------------------------

    @abstractmethod
    def record_query(self, job_ids: Sequence[str]) -> str:
        """One command for every job's lifecycle (times printed under TZ=UTC), also the monitor's
        status query: what the scheduler still holds in memory. The ids come from the stack
        outputs, so each is quoted (an id no scheduler knows is simply not found)."""

    @abstractmethod
    def record_query_answered(self, live: RemoteResult) -> bool:
        """Whether `record_query` answered at all (an answer may still know none of the jobs)."""

    @abstractmethod
    def records_forgotten(self, live: RemoteResult, job_ids: Sequence[str]) -> list[str]:
        """The jobs `record_query` printed nothing of: the history queries are asked for them."""

    @abstractmethod
    def history_queries(self, job_ids: Sequence[str]) -> list[str]:
        """Where finished jobs are kept longer (LSF's event log, Slurm's accounting): commands
        tried in order, the next only when one exits non-zero."""

    @abstractmethod
    def step_records(
        self,
        steps: Sequence[SubmittedStep],
        live: RemoteResult,
        history: RemoteResult | None,
        host: str,
        argv: Argv,
    ) -> tuple[StepRecord, ...]:
        """Each step's record, from the live answer or else the history's; a job neither knows
        is an UNKNOWN record saying so. `host` is named in each record's source."""

    def collect_step_records(
        self, runner: Runner, steps: Sequence[SubmittedStep], host: str, argv: Argv
    ) -> tuple[StepRecord, ...]:
        """One live query for every job; the history only when the live one forgot some."""
        ids = [s.job_id for s in steps]
        live = runner(self.record_query(ids))
        history = None
        if self.records_forgotten(live, ids):
            for command in self.history_queries(ids):
                history = runner(command)
                if history.exit_code == 0:
                    break
        return self.step_records(steps, live, history, host, argv)

    def live_step_records(
        self, steps: Sequence[SubmittedStep], command: str, live: RemoteResult, host: str
    ) -> tuple[StepRecord, ...]:
        """The monitor's view: the answer to `record_query` (`command`) alone; SchedulerError
        when it did not answer (the monitor shows why, never "no jobs")."""
        if not self.record_query_answered(live):
            raise SchedulerError(f"`{command}` exited {live.exit_code}: {live.stderr.strip()[:500]}")
        return self.step_records(steps, live, None, host, {})

    # --- a sweep's records (infra/compare/hpc_collector.py) --------------------------------------

    @abstractmethod
    def array_record_queries(self, array_id: str) -> list[str]:
        """Commands each answering for every element of one array (times under TZ=UTC), asked in
        order until every element is known: the live one, then where finished elements are kept."""

    @abstractmethod
    def array_element_records(
        self, array_id: str, answer: RemoteResult, command: str, host: str, year: int
    ) -> dict[int, ElementRecord]:
        """One `array_record_queries` answer as records by the element's index as the scheduler
        counts it (from `array_index_base`), their `point` not yet set; UnsupportedOutput where
        the command did not answer. `year`: the submission's, for a scheduler that prints none."""

    def collect_sweep_records(
        self, runner: Runner, sweep: SweepOutputs, host: str, year: int
    ) -> tuple[tuple[ElementRecord, ...], tuple[str, ...]]:
        """Every point's record, one query per array (the next of `array_record_queries` only for
        an array some of whose elements the last did not know), and a note for each array no
        query answered. A point's record is its last attempt's (arrays in submission order:
        chunks, then retries); a point whose last array does not know it is UNKNOWN, saying so."""
        by_point: dict[int, ElementRecord] = {}
        attempts: dict[int, int] = {}
        notes = []
        for array in sweep.arrays:
            found: dict[int, ElementRecord] = {}
            failures = []
            for command in self.array_record_queries(array.job_id):
                try:
                    answer = self.array_element_records(array.job_id, runner(command), command, host, year)
                except UnsupportedOutput as error:
                    failures.append(f"`{command}`: {str(error)[:200] or 'no answer'}")
                    continue
                for index, record in answer.items():
                    found.setdefault(index, record)
                if len(found) >= array.count:
                    break
            if failures and not found:
                notes.append(f"array {array.job_id}: no query answered ({'; '.join(failures)})")
            for position, point in array_points(array).items():
                attempts[point] = attempts.get(point, 0) + 1
                seen = found.get(position + self.array_index_base)
                by_point[point] = (
                    dataclasses.replace(
                        seen,
                        point=point,
                        attempt=attempts[point],
                        array=array.job_id,
                        index=position + self.array_index_base,
                    )
                    if seen is not None
                    else ElementRecord(
                        point=point,
                        job=f"{array.job_id} element {position + self.array_index_base}",
                        state="UNKNOWN",
                        phase=Phase.UNKNOWN.value,
                        requested_at=None,
                        started_at=None,
                        finished_at=None,
                        exit_code=None,
                        node="",
                        source=f"no query of array {array.job_id} knows the element",
                        attempt=attempts[point],
                        array=array.job_id,
                        index=position + self.array_index_base,
                    )
                )
        return tuple(by_point[p] for p in sorted(by_point)), tuple(notes)

    def array_log_name(self, step: str, array_id: str, index: int) -> str:
        """An element's log file name, `array_log_placeholder` filled in (LSF `%J_%I`, Slurm
        `%A_%a`: the array's id, the element's index), as render_array_script names it."""
        name = self.array_log_placeholder
        for placeholder, value in (("%A", array_id), ("%J", array_id), ("%a", str(index)), ("%I", str(index))):
            name = name.replace(placeholder, value)
        return f"{step}.{name}"

    # --- the monitor's reads (infra/monitor/hpc.py) --------------------------------------------

    @abstractmethod
    def monitor_sections(self) -> tuple[tuple[str, str], ...]:
        """The nodes' and the queue's sections of the monitor's poll script: (name, command)."""

    def node_sections(self) -> tuple[tuple[str, str], ...]:
        """The sections `read_nodes` reads: the monitor's, without the queue's (every user's jobs,
        which a report that only asks what the nodes' GPUs are need not make the site list)."""
        return tuple((name, command) for name, command in self.monitor_sections() if name != QUEUE_SECTION)

    @abstractmethod
    def read_nodes(self, sections: Sections) -> tuple[list[HpcNode], str]:
        """The nodes' GPUs from `monitor_sections`' answers, and an error note (empty when read)."""

    @abstractmethod
    def read_queue(self, sections: Sections, year: int) -> tuple[list[QueueJob], str]:
        """Every user's jobs in the queue, and an error note (empty when read). `year`: the
        current one, for a scheduler that prints none."""

    # --- backfill that yields (infra/nodes/) ----------------------------------------------------

    def no_backfill(self) -> SchedulerError:
        return SchedulerError(f"no backfill on {self.label}: {self.backfill_unsupported}")

    @abstractmethod
    def backfill_submit_command(self, workdir: str, script: str) -> str:
        """Submit one backfill job script (relative to `workdir`), requeued when preempted."""

    @abstractmethod
    def backfill_jobs_query(self, queue: str, finished: bool) -> str:
        """The login user's jobs in the backfill `queue`; with `finished`, the ended ones too."""

    @abstractmethod
    def parse_backfill_jobs(self, result: RemoteResult) -> list[BackfillJob]: ...

    # --- the pre-flight check (`atlas doctor`, infra/hpc/doctor.py) ----------------------------

    @abstractmethod
    def queue_probe(self, queue: str | None, key: str) -> Probe:
        """Whether the queue (partition) a target names exists and takes jobs; None: the
        scheduler's default. `key` is the target's config key, which the fix names."""

    @abstractmethod
    def request_probe(self, steps: Sequence[StepRequest], key: str, environment: str) -> Probe | None:
        """Whether the cluster would accept each step's request (GPUs per node, nodes, time,
        memory) in the target's queue, asked in one command that submits nothing; `environment`
        names the workload's overrides a fix points at. None: nothing to ask."""


def array_points(array: SweepArray) -> dict[int, int]:
    """An array's elements by position (the element's index less `array_index_base`) -> the
    sweep's point it runs: a chunk's element at position i runs `offset + i`; a retry runs its
    chunk's script with the indices of just its points (`--array=3,17`, `name[4,18]`), so each of
    its elements is at its point's position in the chunk."""
    if array.points:
        return {point - array.offset: point for point in array.points}
    return {position: array.offset + position for position in range(array.count)}


def job_step_record(step: SubmittedStep, state: JobState, source: str, argv: Argv, **given: Any) -> StepRecord:
    """A step whose job the scheduler knows: its id, native state and exit code, and what else
    the scheduler gave (times, pending reason, node, GPUs) as `step_record`'s keywords."""
    return step_record(
        step.step, step.job_id, state.native_state, source, exit_code=state.exit_code, argv=argv.get(step.step), **given
    )


def unknown_step_record(step: SubmittedStep, why: str, argv: Argv) -> StepRecord:
    """A step whose job no query knows any more: UNKNOWN, with why as its pending reason."""
    return step_record(step.step, step.job_id, "UNKNOWN", "", pending_reason=why, argv=argv.get(step.step))


def no_answer(tool: str, text: str) -> str:
    """The error note of a monitor section that did not answer: the tool and what it printed."""
    return f"{tool}: {text.strip()[:300] or 'no answer'}"


def validate_job_ids(job_ids: Sequence[str]) -> list[str]:
    bad = [j for j in job_ids if not isinstance(j, str) or not JOB_ID.match(j)]
    if bad:
        raise SchedulerError(f"job ids must be numbers, found {bad!r}")
    return list(job_ids)


# An array query's key for "every element it does not list one by one" (array_elements_query).
EVERY_ELEMENT = "*"
# What a dependency may name: a job or an array (`123`), or one element of an array (`123_4`, by
# the scheduler's own index: a sweep's superseded arrays, infra/hpc/providers/sweep_job.py).
DEPENDENCY_ID = re.compile(r"^[0-9]+(_[0-9]+)?$")


def validate_dependency_ids(job_ids: Sequence[str]) -> list[tuple[str, str | None]]:
    """Each id as (job or array, element index or None); SchedulerError for anything else."""
    bad = [j for j in job_ids if not isinstance(j, str) or not DEPENDENCY_ID.match(j)]
    if bad:
        raise SchedulerError(f"dependencies must be job ids or array elements (123_4), found {bad!r}")
    return [(j.partition("_")[0], j.partition("_")[2] or None) for j in job_ids]


def validate_job_name(job_name: str) -> str:
    if not JOB_NAME.match(job_name):
        raise SchedulerError(f"job names must be at most 63 lower-case letters, digits and '-', found {job_name!r}")
    return job_name
