"""Rendering of batch job scripts: a `JobSpec` into what bsub or sbatch reads, a workload's steps one script each.

`render_job_script` is one pure function, the way submitit does it, so a golden file pins the
whole script (tests/unit/golden/); the scheduler's own directive lines come from its
`Scheduler.directive_lines` (infra/hpc/scheduler.py), a site's directives last. `step_scripts`
renders every step of a workload under a job name that `job_name_for` makes unique to the run.
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass, replace

from infra.hpc.apptainer import ContainerExec
from infra.hpc.remote import remote_path_expression
from infra.hpc.scheduler import NO_SITE_DIRECTIVES, JobSpec, Scheduler, SiteDirectives
from infra.workload.model import Sweep, Workload
from infra.workload.render import render_step, telemetry_file
from infra.workload.sweep import (
    INDEX_ENV,
    ArrayChunk,
    point_count,
    points_table,
    selector_lines,
    shell_words,
    split_points,
    table_digest,
)

JOBS_DIR = ".atlas/jobs"
PYTHON_DIR = ".atlas/python"


def render_job_script(scheduler: Scheduler, spec: JobSpec) -> str:
    """The whole job script: shebang, directives (the site's last), environment, the (sampled) command."""
    lines = ["#!/bin/bash"]
    lines += scheduler.directive_lines(spec)
    lines += [
        f"# Atlas job for step {spec.step!r}; written by `pulumi up` (infra/hpc). Edit the workload, not this file.",
    ]
    if spec.description:
        lines.append(f"# {' '.join(spec.description.split())}")
    lines.append(f"cd -- {remote_path_expression(spec.workdir)} || exit 1")
    lines += [f"export {name}={shlex.quote(value)}" for name, value in sorted(spec.env)]
    argv: tuple[str, ...] = spec.command
    if spec.telemetry_out is not None:
        if spec.python_path is not None:
            # The sampler is staged beside the run (stdlib only); nothing else of Atlas is needed there.
            lines.append(f'export PYTHONPATH="$PWD"/{shlex.quote(spec.python_path)}"${{PYTHONPATH:+:$PYTHONPATH}}"')
        lines.append(f"mkdir -p -- {shlex.quote(_parent(spec.telemetry_out))}")
        # The sampler appends: a rerun in the same run folder starts a fresh file, the old one kept aside.
        out = shlex.quote(spec.telemetry_out)
        lines.append(f'if [ -e {out} ]; then mv -f -- {out} {out}."$(date +%s)"; fi')
        argv = (
            "python3",
            "-m",
            "infra.telemetry.sampler",
            "--out",
            spec.telemetry_out,
            "--interval",
            f"{spec.telemetry_interval_s:g}",
            "--step",
            spec.step,
            "--",
            *argv,
        )
    lines += _run_lines(spec, shlex.join(argv))
    return "\n".join(lines) + "\n"


def _run_lines(spec: JobSpec, command: str) -> list[str]:
    """The script's command line: as it is (bare), or in the image (`apptainer exec`)."""
    if spec.container is None:
        return [command]
    return spec.container.script_lines(spec.gpus_per_node > 0, command)


def render_array_script(scheduler: Scheduler, spec: JobSpec, sweep: Sweep, chunk: ArrayChunk, table: str) -> str:
    """One array of a swept step: the step's job script whose elements each run one point.

    The element's index (the scheduler's, from its base, plus the chunk's offset) picks the point's
    line of the table of points staged at `table` (relative to the run directory; see
    `sweep.points_table` for why a table and not a `case`); its values reach the program through
    `ATLAS_SWEEP_<NAME>` and the arguments `sweep.shell_words` appends. Each element has its own
    log file and its own telemetry (`<telemetry>/<step>/point-<index>.jsonl`)."""
    size = point_count(sweep)
    last = chunk.offset + chunk.count - 1
    lines = ["#!/bin/bash"]
    lines += scheduler.array_directive_lines(spec, chunk.count, chunk.parallel)
    lines.append(
        f"# Atlas job array for step {spec.step!r}: points {chunk.offset} to {last} of a sweep of {size}; "
        "written by `pulumi up` (infra/hpc). Edit the workload, not this file."
    )
    if spec.description:
        lines.append(f"# {' '.join(spec.description.split())}")
    lines.append(f"# The points: {table}, one line each (sha256 {table_digest_of(sweep)}).")
    lines.append(f"cd -- {remote_path_expression(spec.workdir)} || exit 1")
    lines += [f"export {name}={shlex.quote(value)}" for name, value in sorted(spec.env)]
    # LSF counts from 1 (`LSB_JOBINDEX - 1`), Slurm from 0; a later chunk adds its offset.
    index = scheduler.array_task_variable
    if scheduler.array_index_base:
        index += f" - {scheduler.array_index_base}"
    if chunk.offset:
        index = f"{chunk.offset} + {index}"
    lines += selector_lines(sweep, table, index)
    command = shlex.join(spec.command)
    if spec.telemetry_out is not None:
        if spec.python_path is not None:
            lines.append(f'export PYTHONPATH="$PWD"/{shlex.quote(spec.python_path)}"${{PYTHONPATH:+:$PYTHONPATH}}"')
        folder = spec.telemetry_out.removesuffix(".jsonl")
        lines.append(f"atlas_telemetry={shlex.quote(folder + '/point-')}\"${INDEX_ENV}\".jsonl")
        lines.append(f"mkdir -p -- {shlex.quote(folder)}")
        lines.append(
            'if [ -e "$atlas_telemetry" ]; then mv -f -- "$atlas_telemetry" "$atlas_telemetry.$(date +%s)"; fi'
        )
        sampler = ("python3", "-m", "infra.telemetry.sampler", "--out")
        rest = ("--interval", f"{spec.telemetry_interval_s:g}", "--step", spec.step, "--")
        command = f'{shlex.join(sampler)} "$atlas_telemetry" {shlex.join(rest)} {command}'
    lines += _run_lines(spec, " ".join([command, *shell_words(sweep)]))
    return "\n".join(lines) + "\n"


def table_digest_of(sweep: Sweep) -> str:
    return table_digest(points_table(sweep))


def table_path(step: str, sweep: Sweep) -> str:
    """Where a swept step's table of points is staged, relative to the run directory: beside its
    scripts, named by its digest, so an element of an earlier array still reads its own points."""
    return f"{JOBS_DIR}/{step}.{table_digest_of(sweep)[:12]}.points"


def _parent(path: str) -> str:
    head, _, _ = path.rpartition("/")
    return head or "."


@dataclass(frozen=True)
class StepScript:
    job_name: str
    path: str  # relative to the run directory
    script: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.script.encode()).hexdigest()


@dataclass(frozen=True)
class SubmissionKey:
    """A run's submission key: what names its jobs (`job_name_for`), so a retried submission
    finds the job it already submitted and never adopts another deployment's."""

    project: str
    stack: str
    environment: str
    run_id: str
    run_dir: str


def step_specs(
    workload: Workload,
    run: SubmissionKey,
    queue: str | None,
    telemetry: bool = True,
    site: SiteDirectives = NO_SITE_DIRECTIVES,
    container: ContainerExec | None = None,
) -> dict[str, JobSpec]:
    """Each step's `JobSpec`, in the workload's order: what its job asks of the scheduler, under
    a job name that `job_name_for` makes unique to the run."""
    specs: dict[str, JobSpec] = {}
    for step in workload.steps:
        rendered = render_step(workload, step.name, run.environment)
        specs[step.name] = JobSpec(
            job_name=job_name_for(run.project, run.stack, run.environment, step.name, run.run_id, run.run_dir),
            step=rendered.name,
            workdir=run.run_dir,
            log_dir=workload.logs.root,
            command=rendered.argv,
            env=rendered.env,
            nodes=rendered.resources.nodes,
            gpus_per_node=rendered.resources.gpus_per_node,
            cpus_per_task=rendered.resources.cpus_per_task,
            memory_mib=rendered.resources.memory_mib,
            walltime_seconds=rendered.resources.walltime_seconds,
            queue=queue,
            telemetry_out=telemetry_file(workload, rendered.name) if telemetry else None,
            telemetry_interval_s=workload.telemetry.interval_seconds,
            python_path=PYTHON_DIR if telemetry else None,
            description=step.description,
            site=site,
            container=container,
        )
    return specs


def step_scripts(
    workload: Workload,
    scheduler: Scheduler,
    run: SubmissionKey,
    queue: str | None,
    telemetry: bool = True,
    site: SiteDirectives = NO_SITE_DIRECTIVES,
    container: ContainerExec | None = None,
) -> dict[str, StepScript]:
    """One job script per step, in the workload's order, as a site would write it by hand
    (with the site's own account and directives, from the target's config)."""
    scripts = {}
    for name, spec in step_specs(workload, run, queue, telemetry, site, container).items():
        path = f"{JOBS_DIR}/{name}{scheduler.script_suffix}"
        scripts[name] = StepScript(spec.job_name, path, render_job_script(scheduler, spec))
    return scripts


@dataclass(frozen=True)
class SweepScripts:
    """A swept step as one scheduler runs it: its table of points (staged at `table_path`) and
    one array script per chunk of the split at the site's limit, in order."""

    step: str
    table_path: str
    table: str
    chunks: tuple[ArrayChunk, ...]
    scripts: tuple[StepScript, ...]


def chunk_job_name(job_name: str, chunk: ArrayChunk) -> str:
    """The first chunk keeps the step's job name; a later one adds `-c<number>` (at most 10 chunks
    of 1,000 under MAX_SWEEP_POINTS, so the name stays within 63 characters)."""
    return job_name if chunk.number == 0 else f"{job_name}-c{chunk.number}"


def sweep_scripts(
    workload: Workload,
    scheduler: Scheduler,
    run: SubmissionKey,
    queue: str | None,
    telemetry: bool = True,
    site: SiteDirectives = NO_SITE_DIRECTIVES,
    array_limit: int | None = None,
    container: ContainerExec | None = None,
) -> dict[str, SweepScripts]:
    """Each swept step's table and array scripts, split at `array_limit` (None: the scheduler's
    default, LSF's MAX_JOB_ARRAY_SIZE 1,000 or Slurm's MaxArraySize 1,001)."""
    limit = array_limit or scheduler.array_size_limit
    result = {}
    specs = step_specs(workload, run, queue, telemetry, site, container)
    for step in workload.steps:
        if step.sweep is None:
            continue
        sweep, spec = step.sweep, specs[step.name]
        table = table_path(step.name, sweep)
        chunks = split_points(point_count(sweep), limit, sweep.parallel)
        scripts = []
        for chunk in chunks:
            name = chunk_job_name(spec.job_name, chunk)
            suffix = f".c{chunk.number}" if chunk.number else ""
            script = render_array_script(scheduler, replace(spec, job_name=name), sweep, chunk, table)
            scripts.append(StepScript(name, f"{JOBS_DIR}/{step.name}{suffix}{scheduler.script_suffix}", script))
        result[step.name] = SweepScripts(step.name, table, points_table(sweep), chunks, tuple(scripts))
    return result


def job_name_for(project: str, stack: str, environment: str, step: str, run_id: str, run_dir: str) -> str:
    """A scheduler job name unique to one resource of one stack: the key of idempotent submission.

    The run folder is part of it: two deployments that stage into different folders (two
    checkouts, or a test beside a user's stack) never adopt each other's jobs.
    """
    parts = (project, stack, environment, step, run_id, run_dir)
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:10]
    return f"atlas-{step[:40].rstrip('-')}-{digest}"
