"""Rendering of batch job scripts: a `JobSpec` into what bsub or sbatch reads, a workload's steps one script each.

`render_job_script` is one pure function, the way submitit does it, so a golden file pins the
whole script (tests/unit/golden/); the scheduler's own directive lines come from its
`Scheduler.directive_lines` (infra/hpc/scheduler.py), a site's directives last. `step_scripts`
renders every step of a workload under a job name that `job_name_for` makes unique to the run.
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass

from infra.hpc.scheduler import NO_SITE_DIRECTIVES, JobSpec, Scheduler, SiteDirectives
from infra.workload.model import Workload
from infra.workload.render import render_step, telemetry_file

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
    lines.append(f"cd -- {_remote_dir_expression(spec.workdir)} || exit 1")
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
    lines.append(shlex.join(argv))
    return "\n".join(lines) + "\n"


def _remote_dir_expression(path: str) -> str:
    """A run directory as shell text: relative paths are relative to the login user's home,
    as for SFTP, while a job starts wherever the scheduler puts it."""
    return shlex.quote(path) if path.startswith("/") else f'"$HOME"/{shlex.quote(path)}'


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
        )
    return specs


def step_scripts(
    workload: Workload,
    scheduler: Scheduler,
    run: SubmissionKey,
    queue: str | None,
    telemetry: bool = True,
    site: SiteDirectives = NO_SITE_DIRECTIVES,
) -> dict[str, StepScript]:
    """One job script per step, in the workload's order, as a site would write it by hand
    (with the site's own account and directives, from the target's config)."""
    scripts = {}
    for name, spec in step_specs(workload, run, queue, telemetry, site).items():
        path = f"{JOBS_DIR}/{name}{scheduler.script_suffix}"
        scripts[name] = StepScript(spec.job_name, path, render_job_script(scheduler, spec))
    return scripts


def job_name_for(project: str, stack: str, environment: str, step: str, run_id: str, run_dir: str) -> str:
    """A scheduler job name unique to one resource of one stack: the key of idempotent submission.

    The run folder is part of it: two deployments that stage into different folders (two
    checkouts, or a test beside a user's stack) never adopt each other's jobs.
    """
    parts = (project, stack, environment, step, run_id, run_dir)
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:10]
    return f"atlas-{step[:40].rstrip('-')}-{digest}"
