"""An HPC side of the monitor over SSH: batched, rate-limited reads of the scheduler.

One poll of an environment is two remote commands, whatever the number of jobs:
1. the status of every step's job in one query, under TZ=UTC so times read back exactly
   (LSF `bjobs -a -hms -o ... -json ids`, Slurm `squeue -h -t all -O ... -j ids`): the report's
   own record query, read by the same parser (the scheduler's `record_query`, `live_step_records`);
2. one script printing, in marked sections, the nodes' GPUs and the queue (the scheduler's
   `monitor_sections`: Slurm `sinfo -N -O ...`; LSF `lsload -gpu`, `lsload -gpuload`,
   `bhosts -w`), the last lines of each running step's telemetry and of the training log, and
   each swept step's arrays, one query per array (`array_elements_query`: `squeue -r -j <id>`,
   `bjobs -a ... <id>`), read into its elements by state.
A poll happens no more often than the interval (the site's `poll_interval_seconds`, what site
admins ask for); between polls the last answer is served. A poll that fails is not retried
sooner than `backoff_s` (one interval, then twice as long each time, at most 10 minutes): until
then the same error is the answer. `calls` counts the remote commands (tests read it).
What differs between the schedulers is on their classes (infra.hpc.registry gives the one of
the outputs' `scheduler`); an environment whose `scheduler` the registry does not know is an error.
"""

from __future__ import annotations

import dataclasses
import posixpath
import shlex
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from infra.compare.sweeps import state_counts
from infra.hpc.arrays import PHASES, summary, sweep_letters
from infra.hpc.polling import backoff_s
from infra.hpc.registry import scheduler_for
from infra.hpc.remote import RemoteResult, Runner
from infra.hpc.scheduler import JobState, Scheduler, SchedulerError, Sections, SubmittedStep, UnsupportedOutput
from infra.monitor.hpc_reads import (
    TELEMETRY_LINES,
    json_lines,
    parse_sections,
    read_log_tail,
    sections_script,
    telemetry_tail,
)
from infra.monitor.model import HpcPoll, StepRecord, StepTelemetry, SweepView
from infra.outputs import HpcOutputs


@dataclass
class HpcSource:
    """One HPC environment of the stack outputs, polled at most every `interval_s`."""

    name: str
    outputs: HpcOutputs
    runner: Runner
    interval_s: float = 30.0
    telemetry_lines: int = TELEMETRY_LINES
    clock: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    calls: int = 0  # remote commands sent (one status query + one node query per poll)
    polls: int = 0
    failures: int = 0  # polls failed in a row
    _last: HpcPoll | None = None
    _last_at: float | None = None
    _error: Exception | None = None
    _retry_at: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def scheduler(self) -> str:
        return self.outputs.scheduler

    def _run(self, command: str) -> RemoteResult:
        self.calls += 1
        return self.runner(command)

    def scheduler_of(self) -> Scheduler:
        """The outputs' scheduler; UnknownSchedulerError for a name infra.hpc.registry does not list."""
        return scheduler_for(self.scheduler)

    def steps(self) -> tuple[SubmittedStep, ...]:
        return SubmittedStep.all_of(self.outputs)

    def status_command(self) -> str:
        return self.scheduler_of().record_query([s.job_id for s in self.steps()])

    def node_sections(self, running: Sequence[str]) -> list[tuple[str, str]]:
        sections = list(self.scheduler_of().monitor_sections())
        telemetry_dir = self.outputs.telemetry.path
        for step in running:
            path = posixpath.join(telemetry_dir, f"{step}.jsonl")
            sections.append((f"telemetry {step}", f"tail -n {int(self.telemetry_lines)} -- {shlex.quote(path)}"))
        logs_dir = self.outputs.logs.path
        if running and logs_dir:
            sections.append(("log", f"tail -q -n 2 -- {shlex.quote(logs_dir)}/*_log.jsonl"))
        # A swept step's elements: one query per array, in the same script (SweepJob's refresh query).
        scheduler = self.scheduler_of()
        for batch_step in self.outputs.steps:
            for array in batch_step.sweep.arrays if batch_step.sweep is not None else ():
                sections.append((f"sweep {array.job_id}", scheduler.array_elements_query(array.job_id).command))
        return sections

    def sweep_views(self, sections: Sections) -> tuple[SweepView, ...]:
        """Each swept step's elements by state from the poll script's `sweep <array id>` sections;
        an array whose query did not answer leaves its unfinished points unknown, saying why."""
        scheduler = self.scheduler_of()
        views = []
        for step in self.outputs.steps:
            if step.sweep is None:
                continue
            seen: dict[str, dict[str, JobState]] = {}
            failed = []
            for array in step.sweep.arrays:
                query = scheduler.array_elements_query(array.job_id)
                code, text = sections.get(f"sweep {array.job_id}", (-1, ""))
                try:
                    seen[array.job_id] = query.parse(RemoteResult(query.command, code, text, text))  # 2>&1
                except (UnsupportedOutput, SchedulerError) as error:
                    failed.append(f"array {array.job_id}: {str(error)[:200] or f'exit {code}'}")
            letters = sweep_letters(step.sweep, seen, scheduler.array_index_base)
            views.append(
                SweepView(
                    step=step.name,
                    points=step.sweep.points,
                    states=state_counts([PHASES[letter] for letter in letters], step.sweep.points),
                    source=f"{self.outputs.login}: one query per array "
                    f"({scheduler.array_elements_query(step.sweep.arrays[0].job_id).command} ...)"
                    if step.sweep.arrays
                    else "the stack outputs (no array submitted)",
                    note="; ".join(failed),
                    phase=summary(letters).value,
                )
            )
        return tuple(views)

    def poll(self, force: bool = False) -> HpcPoll:
        """The last answer if younger than the interval; otherwise ask the scheduler (two commands).
        After a failed poll, the same error until `backoff_s` has passed."""
        with self._lock:
            now = self.clock()
            if self._error is not None and now < self._retry_at and not force:
                raise self._error
            fresh = self._last_at is not None and now - self._last_at < self.interval_s
            if self._last is not None and fresh and self._error is None and not force:
                return self._last
            try:
                self._last = self._poll_now()
            except Exception as error:  # kept, and raised again until the site is asked anew
                self.failures += 1
                self._error = error
                self._retry_at = self.clock() + backoff_s(self.interval_s, self.failures)
                raise
            self.failures, self._error = 0, None
            self._last_at = self.clock()
            self.polls += 1
            return self._last

    def _poll_now(self) -> HpcPoll:
        scheduler = self.scheduler_of()
        commands = []
        steps: tuple[StepRecord, ...] = ()
        submitted = self.steps()
        if submitted:
            command = self.status_command()
            commands.append(command)
            steps = scheduler.live_step_records(submitted, command, self._run(command), self.outputs.host)
        # LSF prints a running job's expected end as FINISH_TIME (`... E`, from its run limit): a job
        # that has not finished has no finish time here.
        steps = tuple(
            s
            if scheduler.phase_of(s.state).finished or s.finished_at is None
            else dataclasses.replace(s, finished_at=None)
            for s in steps
        )
        running = [s.step for s in steps if s.started_at is not None and s.finished_at is None]
        script = sections_script(self.node_sections(running))
        commands.append(script)
        sections = parse_sections(self._run(script).stdout)
        nodes, node_error = scheduler.read_nodes(sections)
        telemetry: dict[str, StepTelemetry] = {}
        missing: dict[str, str] = {}
        host = f"{self.outputs.user}@{self.outputs.host}"
        for step in running:
            code, text = sections.get(f"telemetry {step}", (-1, "not asked"))
            parsed, why = telemetry_tail(code, text, f"tail of {step}.jsonl on {host}")
            if parsed is not None:
                telemetry[step] = parsed
            else:
                missing[step] = why
        log = read_log_tail(json_lines(sections.get("log", (-1, ""))[1]))
        queue, queue_error = scheduler.read_queue(sections, time.gmtime(self.wall()).tm_year)
        sweeps = self.sweep_views(sections)
        return HpcPoll(
            at=self.wall(),
            steps=steps,
            nodes=tuple(nodes),
            telemetry=telemetry,
            log=log,
            commands=tuple(commands),
            node_error=node_error,
            queue=tuple(queue),
            queue_error=queue_error,
            sweeps=sweeps,
            telemetry_missing=missing,
        )
