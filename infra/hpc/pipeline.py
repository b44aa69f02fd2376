"""A workload as batch jobs on one login node: the files staged into the run directory, and the
jobs themselves, chained by the scheduler. Shared by every environment that runs the workload
through a batch scheduler over SSH: Satori (`HpcEnvironment`) and rented instances
(`AwsEnvironment`, a one-node Slurm on each); the job scripts come from job_script.py.

Everything is rendered from the workload before any resource is registered, so `pulumi preview`
shows the exact scripts; the only files read here are the local ones staged (for their digests).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import pulumi

from infra.hpc.job_script import JOBS_DIR, PYTHON_DIR, StepScript, SweepScripts
from infra.hpc.providers import BatchJob, BatchJobCompletion, StagedFiles
from infra.hpc.providers.apptainer_image import SifImage
from infra.hpc.providers.sweep_job import SweepJob
from infra.hpc.scheduler import Scheduler
from infra.telemetry.bundle import SAMPLER_FILES, sampler_file
from infra.toolchain.pins import cache_root
from infra.workload.model import Workload


@dataclass(frozen=True)
class StagedFile:
    """A local file copied into the run directory (relative path there)."""

    source: Path
    path: str
    mode: int = 0o644  # 0o755 for a folder source's executables


def staged_file_entries(
    scripts: Mapping[str, StepScript],
    extra_files: Sequence[StagedFile],
    telemetry: bool,
    error: type[Exception],
    sweeps: Mapping[str, SweepScripts] | None = None,
) -> list[dict[str, Any]]:
    """What StagedFiles (or a bucket) carries: the job scripts, the sampler, the extra files;
    `error` is raised, naming the file, for one that is missing. A swept step (`sweeps`,
    job_script.sweep_scripts) stages its chunks' array scripts instead of its plain script, and
    its table of points from a local file (`sweep_tables`)."""
    sweeps = sweeps or {}
    scripts = {**{n: s for n, s in scripts.items() if n not in sweeps}, **sweep_files(sweeps)}
    extra_files = (*extra_files, *sweep_tables(sweeps))
    files: list[dict[str, Any]] = [
        {"path": s.path, "content": s.script, "sha256": s.sha256, "mode": 0o644} for s in scripts.values()
    ]
    local = list(extra_files)
    if telemetry:
        # The sampler and what it imports: stdlib only, so any python3 on the cluster runs it.
        local += [StagedFile(sampler_file(f), f"{PYTHON_DIR}/infra/{f}") for f in SAMPLER_FILES]
    for item in local:
        if not item.source.is_file():
            raise error(f"extra_files: {item.source} is not a file; stage files, not directories")
        digest = hashlib.sha256(item.source.read_bytes()).hexdigest()
        files.append({"path": item.path, "source": str(item.source), "sha256": digest, "mode": item.mode})
    return files


def run_directories(workload: Workload) -> list[str]:
    """The folders the jobs write into, made when the files are staged."""
    return sorted({workload.logs.root, workload.telemetry.root, str(PurePosixPath(JOBS_DIR))})


def sweep_files(sweeps: Mapping[str, SweepScripts]) -> dict[str, StepScript]:
    """A swept step's array scripts, one per chunk, as `staged_file_entries` takes scripts (keyed
    `<step>#c<n>`); its table of points is staged from a local file (`sweep_tables`)."""
    files: dict[str, StepScript] = {}
    for step, sweep in sweeps.items():
        for chunk, script in zip(sweep.chunks, sweep.scripts, strict=True):
            files[f"{step}#c{chunk.number}"] = script
    return files


def sweep_tables(sweeps: Mapping[str, SweepScripts], root: Path | None = None) -> tuple[StagedFile, ...]:
    """Each swept step's table of points as a local file to stage at its `table_path`.

    Staged from a file rather than as content so that StagedFiles' state holds the table's digest,
    not the table: a 1,000-point table is about 50 kB, which would otherwise be all of the growth
    of a stack's state with its sweep's size. The file is named by its sha256 and written whole
    (a temporary file renamed), so a run that stops half way, or two stacks at once, never leave
    a partial table under that name; the program writes it on every run, so the provider, which
    reads it at `up`, always finds it."""
    folder = root or cache_root() / "sweep-tables"
    tables: list[StagedFile] = []
    for sweep in sweeps.values():
        content = sweep.table.encode()
        path = folder / f"{hashlib.sha256(content).hexdigest()}.tsv"
        if not path.is_file() or path.read_bytes() != content:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".partial-", delete=False) as partial:
                partial.write(content)
            os.replace(partial.name, path)
        tables.append(StagedFile(path, sweep.table_path))
    return tuple(tables)


def _chunk_entries(sweep: SweepScripts) -> list[dict[str, Any]]:
    return [
        {
            "job_name": script.job_name,
            "script_path": script.path,
            "script_sha256": script.sha256,
            # As a BatchJob's `script_lines`: `pulumi preview` shows every line that will run.
            "script_lines": script.script.splitlines(),
            "offset": chunk.offset,
            "count": chunk.count,
            "after": chunk.after,
            "parallel": chunk.parallel,
        }
        for chunk, script in zip(sweep.chunks, sweep.scripts, strict=True)
    ]


@dataclass(frozen=True)
class SubmittedPipeline:
    jobs: dict[str, BatchJob]
    completions: dict[str, BatchJobCompletion]
    sweeps: dict[str, SweepJob] = dataclasses.field(default_factory=dict)


def submit_pipeline(
    name: str,
    parent: pulumi.Resource,
    *,
    workload: Workload,
    scheduler: Scheduler,
    scripts: Mapping[str, StepScript],
    files: Sequence[Mapping[str, Any]],
    run_dir: str,
    ssh_target: pulumi.Input[dict[str, Any]],
    ssh_secret: pulumi.Input[dict[str, Any]],
    queue: str | None,
    poll_interval_s: float,
    wait_for_steps: Sequence[str],
    wait_timeout_s: float,
    depends_on: Sequence[pulumi.Resource] = (),
    scheduler_options: Mapping[str, str] | None = None,
    sweeps: Mapping[str, SweepScripts] | None = None,
    max_attempts: int = 1,
    image: SifImage | None = None,
) -> SubmittedPipeline:
    """`{name}-staged-files`: `files` and the folders the jobs write into, in the run directory
    (after `depends_on`). Then `{name}-<step>`: one BatchJob per step, once the files are in place,
    each chained to the steps whose outputs it reads by the scheduler's own dependency; then
    `{name}-<step>-done`: a BatchJobCompletion for each step in `wait_for_steps`, so the whole pipeline
    is in the queue before any step is awaited. A swept step (`sweeps`, job_script.sweep_scripts)
    is one SweepJob instead, its chunks' arrays (and, with `max_attempts` above 1, its retries'); the
    steps after it wait for every array holding a point's last attempt to succeed (`afterok:<array
    id>`, `done(<array id>)`: every element) and for those it superseded to end (`afterany`, `ended`).
    With `image` (runtime apptainer), every job waits for its SIF and is a new job for a new image."""
    sweeps = dict(sweeps or {})
    awaited_sweeps = sorted(set(wait_for_steps) & set(sweeps))
    if awaited_sweeps:
        raise ValueError(f"wait_for_steps: {', '.join(awaited_sweeps)} is a sweep; `pulumi up` waits for none yet")
    staged = StagedFiles(
        f"{name}-staged-files",
        ssh_target=ssh_target,
        ssh_secret=ssh_secret,
        run_dir=run_dir,
        files=files,
        directories=run_directories(workload),
        opts=pulumi.ResourceOptions(parent=parent, depends_on=list(depends_on)),
    )
    jobs: dict[str, BatchJob] = {}
    swept: dict[str, SweepJob] = {}
    before_jobs: list[pulumi.Resource] = [staged] if image is None else [staged, image]
    image_digest = image.digest if image is not None else None

    def definitions(step: str) -> list[str]:
        return [(swept[d] if d in swept else jobs[d]).job_definition for d in workload.depends_on(step)]

    for step in workload.steps:
        deps = workload.depends_on(step.name)
        after_ids = [jobs[d].job_id for d in deps if d in jobs]
        # The arrays of the sweeps before it: those holding each point's last attempt, to succeed;
        # those whose failed points ran again later, to end.
        array_ids = pulumi.Output.all(*[swept[d].final_ids for d in deps if d in swept]).apply(
            lambda lists: [i for ids in lists for i in ids]
        )
        ended_ids = pulumi.Output.all(*[swept[d].ended_ids for d in deps if d in swept]).apply(
            lambda lists: [i for ids in lists for i in ids]
        )
        has_arrays = any(d in swept for d in deps)
        if step.name in sweeps:
            sweep = sweeps[step.name]
            swept[step.name] = SweepJob(
                f"{name}-{step.name}",
                ssh_target=ssh_target,
                ssh_secret=ssh_secret,
                scheduler=scheduler.name,
                step=step.name,
                run_dir=run_dir,
                table_path=sweep.table_path,
                table=sweep.table,
                chunks=_chunk_entries(sweep),
                log_pattern=f"{workload.logs.root}/{step.name}.{scheduler.array_log_placeholder}",
                requested_queue=queue,
                after_job_ids=after_ids,
                after_array_ids=array_ids if has_arrays else None,
                after_ended_ids=ended_ids if has_arrays else None,
                after_definitions=definitions(step.name),
                max_attempts=max_attempts,
                poll_interval_s=poll_interval_s,
                scheduler_options=scheduler_options,
                image_digest=image_digest,
                opts=pulumi.ResourceOptions(parent=parent, depends_on=before_jobs),
            )
            continue
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
            after_job_ids=after_ids,
            after_array_ids=array_ids if has_arrays else None,
            after_ended_ids=ended_ids if has_arrays else None,
            after_definitions=definitions(step.name),
            poll_interval_s=poll_interval_s,
            scheduler_options=scheduler_options,
            image_digest=image_digest,
            opts=pulumi.ResourceOptions(parent=parent, depends_on=before_jobs),
        )
    completions = {
        step: BatchJobCompletion(
            f"{name}-{step}-done", jobs[step], wait_timeout_s, pulumi.ResourceOptions(parent=parent)
        )
        for step in wait_for_steps
    }
    return SubmittedPipeline(jobs, completions, swept)
