"""A workload as batch jobs on one login node: job scripts, the files staged beside them, and the
jobs themselves, chained by the scheduler. Shared by every environment that runs the workload
through a batch scheduler over SSH: Satori (`HpcEnvironment`) and rented instances
(`AwsEnvironment`, a one-node Slurm on each).

Everything here is rendered from the workload before any resource is registered, so
`pulumi preview` shows the exact scripts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import pulumi

from infra.hpc.providers import BatchJob, JobCompletion, job_name_for
from infra.hpc.scheduler import NO_SITE_DIRECTIVES, JobSpec, Scheduler, SiteDirectives, render_job_script
from infra.workload.model import Workload
from infra.workload.render import render_step

JOBS_DIR = ".atlas/jobs"
PYTHON_DIR = ".atlas/python"
_INFRA_DIR = Path(__file__).resolve().parents[1]
# The sampler and what it imports: stdlib only, so any python3 on the cluster runs it.
TELEMETRY_FILES = (
    "__init__.py",
    "telemetry/__init__.py",
    "telemetry/sampler.py",
    "telemetry/gpu.py",
    "telemetry/procfs.py",
    "telemetry/columns.py",
)


@dataclass(frozen=True)
class StagedFile:
    """A local file copied into the run directory (relative path there)."""

    source: Path
    path: str


@dataclass(frozen=True)
class StepScript:
    job_name: str
    path: str  # relative to the run directory
    script: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.script.encode()).hexdigest()


@dataclass(frozen=True)
class RunIdentity:
    """What names a run's jobs: the key of idempotent submission (see `job_name_for`)."""

    project: str
    stack: str
    environment: str
    run_id: str
    run_dir: str


def step_scripts(
    workload: Workload,
    scheduler: Scheduler,
    run: RunIdentity,
    queue: str | None,
    telemetry: bool = True,
    site: SiteDirectives = NO_SITE_DIRECTIVES,
) -> dict[str, StepScript]:
    """One job script per step, in the workload's order, as a site would write it by hand
    (with the site's own account and directives, from the target's config)."""
    scripts: dict[str, StepScript] = {}
    for step in workload.steps:
        rendered = render_step(workload, step.name, run.environment)
        job_name = job_name_for(run.project, run.stack, run.environment, step.name, run.run_id, run.run_dir)
        spec = JobSpec(
            job_name=job_name,
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
            telemetry_out=f"{workload.telemetry.root}/{rendered.name}.jsonl" if telemetry else None,
            telemetry_interval_s=workload.telemetry.interval_seconds,
            python_path=PYTHON_DIR if telemetry else None,
            description=step.description,
            site=site,
        )
        path = f"{JOBS_DIR}/{step.name}{scheduler.script_suffix}"
        scripts[step.name] = StepScript(job_name, path, render_job_script(scheduler, spec))
    return scripts


def staged_file_entries(
    scripts: Mapping[str, StepScript], extra_files: Sequence[StagedFile], telemetry: bool, error: type[Exception]
) -> list[dict[str, Any]]:
    """What StagedFiles (or a bucket) carries: the job scripts, the sampler, the extra files;
    `error` is raised, naming the file, for one that is missing."""
    files: list[dict[str, Any]] = [
        {"path": s.path, "content": s.script, "sha256": s.sha256, "mode": 0o644} for s in scripts.values()
    ]
    local = list(extra_files)
    if telemetry:
        local += [StagedFile(_INFRA_DIR / f, f"{PYTHON_DIR}/infra/{f}") for f in TELEMETRY_FILES]
    for item in local:
        if not item.source.is_file():
            raise error(f"extra_files: {item.source} is not a file; stage files, not directories")
        digest = hashlib.sha256(item.source.read_bytes()).hexdigest()
        files.append({"path": item.path, "source": str(item.source), "sha256": digest, "mode": 0o644})
    return files


def run_directories(workload: Workload) -> list[str]:
    """The folders the jobs write into, made when the files are staged."""
    return sorted({workload.logs.root, workload.telemetry.root, str(PurePosixPath(JOBS_DIR))})


@dataclass(frozen=True)
class SubmittedPipeline:
    jobs: dict[str, BatchJob]
    completions: dict[str, JobCompletion]


def submit_pipeline(
    name: str,
    parent: pulumi.Resource,
    *,
    workload: Workload,
    scheduler: Scheduler,
    scripts: Mapping[str, StepScript],
    run_dir: str,
    ssh_target: pulumi.Input[dict[str, Any]],
    ssh_secret: pulumi.Input[dict[str, Any]],
    queue: str | None,
    poll_interval_s: float,
    wait_for_steps: Sequence[str],
    wait_timeout_s: float,
    depends_on: Sequence[pulumi.Resource],
    lsf_memory_unit: str = "MB",
) -> SubmittedPipeline:
    """`{name}-<step>`: one BatchJob per step, each chained to the steps whose outputs it reads by
    the scheduler's own dependency; then `{name}-<step>-done`: a JobCompletion for each step in
    `wait_for_steps`, so the whole pipeline is in the queue before any step is awaited."""
    jobs: dict[str, BatchJob] = {}
    for step in workload.steps:
        script = scripts[step.name]
        jobs[step.name] = BatchJob(
            f"{name}-{step.name}",
            ssh_target=ssh_target,
            ssh_secret=ssh_secret,
            scheduler=scheduler.name,
            step=step.name,
            job_name=script.job_name,
            run_dir=run_dir,
            script_path=script.path,
            script=script.script,
            log_pattern=f"{workload.logs.root}/{step.name}.{scheduler.log_placeholder}",
            requested_queue=queue,
            after_job_ids=[jobs[d].job_id for d in workload.depends_on(step.name)],
            poll_interval_s=poll_interval_s,
            lsf_memory_unit=lsf_memory_unit,
            opts=pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on)),
        )
    completions = {
        step: JobCompletion(f"{name}-{step}-done", jobs[step], wait_timeout_s, pulumi.ResourceOptions(parent=parent))
        for step in wait_for_steps
    }
    return SubmittedPipeline(jobs, completions)
