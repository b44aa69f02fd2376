"""`HpcEnvironment`: one workload on one LSF or Slurm cluster, as a Pulumi component.

Children (each `f"{name}-<role>"`, parent=self):
- `{name}-staged-files`: the job scripts, the telemetry sampler and any extra files, in the
  run directory `<remote_work_dir>/<stack>/<workload>` on the login node;
- `{name}-<step>`: one `BatchJob` per workload step, chained through the scheduler's own
  dependencies (`-w "done(id)"`, `--dependency=afterok:id`) from the workload's inputs and
  outputs, so the cluster, not Pulumi, sequences the steps;
- `{name}-<step>-done`: a `BatchJobCompletion` for each step in `wait_for_steps` (the short preparation
  steps): `pulumi up` waits for it after the whole pipeline is submitted, and fails with the
  step's exit code and log if it did not succeed.

Everything is rendered in Python before any resource is registered (no resources inside
`apply`), so `pulumi preview` shows the exact job scripts.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi

from infra.hpc.apptainer import ContainerExec
from infra.hpc.job_script import PYTHON_DIR, SubmissionKey, SweepScripts, step_scripts, sweep_scripts
from infra.hpc.pipeline import StagedFile, SubmittedPipeline, staged_file_entries, submit_pipeline
from infra.hpc.providers import endpoint_inputs
from infra.hpc.providers.apptainer_image import SifImage
from infra.hpc.providers.sweep_job import Retry
from infra.hpc.registry import scheduler_for
from infra.hpc.ssh.resolve import refuse_real_route, resolve_endpoint
from infra.hpc.target import PROVENANCE_NOT_STATED, HpcConfigError, HpcTarget
from infra.hpc.target_parser import validate_remote_path
from infra.outputs import (
    BatchStep,
    ContainerRuntime,
    FilesAt,
    HpcOutputs,
    SifConversion,
    SweepArray,
    SweepOutputs,
)
from infra.workload.load import folder_files
from infra.workload.model import FolderSource, GitSource, InTreeSource, Step, Workload, WorkloadError
from infra.workload.render import requested_gpus
from infra.workload_source import SourceError, materialize_cached, staged_paths

TYPE_TOKEN = "atlas:hpc:HpcEnvironment"  # noqa: S105 (a type token, not a password)
# StagedFile is the pipeline's; re-exported here, where the stack program finds it.
__all__ = ["HpcEnvironment", "HpcEnvironmentArgs", "StagedFile", "workload_source_files"]


def source_cache_root() -> Path:
    """Where materialised workload sources are kept between `up`s (one tree per commit and patch)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "atlas" / "sources"


def workload_source_files(
    workload: Workload, repo_root: Path, local_source: Path | None = None, cache_root: Path | None = None
) -> tuple[StagedFile, ...]:
    """The workload's code, staged into the run directory the steps start in.

    - In-tree (the probe): its Python files, beside the telemetry sampler, so `python3 -m
      workloads.<name>` runs on the login node's own Python.
    - From a Git repository (BigGAN): the pinned commit with the workload's patch applied
      (infra/workload_source.py, the same tree the container build makes), materialised here
      once per commit and patch from `local_source` (atlas:workloadSource: a clone or bundle,
      where there is no network) or else from the repository; its Python files, licence and
      source record are staged at the run directory's root, where `python main.py` looks.
    - A folder beside the definition: every file as it is (modes kept), at the run directory's
      root, where the steps start (infra/workload/load.py:folder_files, its limits).
    """
    if isinstance(workload.source, GitSource):
        source = workload.source
        patch = repo_root / source.patch if source.patch else None
        try:
            tree = materialize_cached(
                workload.name, source.repository, source.commit, cache_root or source_cache_root(), patch, local_source
            ).dest
        except SourceError as error:
            raise HpcConfigError(f"workload {workload.name!r} source: {error}") from None
        return tuple(StagedFile(tree / p, p.as_posix()) for p in staged_paths(tree))
    if isinstance(workload.source, FolderSource):
        try:
            return tuple(StagedFile(f.source, f.path, f.mode) for f in folder_files(workload))
        except WorkloadError as error:
            raise HpcConfigError(f"workload {workload.name!r}: {error}") from None
    if not isinstance(workload.source, InTreeSource):
        return ()
    package = repo_root / workload.source.path
    files = sorted(package.glob("*.py"))
    if not files:
        raise HpcConfigError(f"workload source {package} holds no Python files to stage")
    # Parent packages' __init__.py, so the dotted module path imports.
    parents = [p / "__init__.py" for p in package.relative_to(repo_root).parents if str(p) != "."]
    files += [repo_root / p for p in parents if (repo_root / p).is_file()]
    return tuple(StagedFile(f, f"{PYTHON_DIR}/{f.relative_to(repo_root).as_posix()}") for f in files)


@dataclass
class HpcEnvironmentArgs:
    target: HpcTarget
    workload: Workload
    environment: str  # the name in the workload's overrides and in the outputs (e.g. "satori")
    stack: str
    project: str = "atlas"
    run_id: str = "1"  # change it to submit every step afresh
    wait_for_steps: tuple[str, ...] = ()  # short prep steps whose failure should fail `pulumi up`
    wait_timeout_s: float = 3600.0
    telemetry: bool = True
    extra_files: tuple[StagedFile, ...] = ()
    # The private key as a Pulumi secret (config.require_secret); otherwise the target's, or else the
    # user's agent and ssh config (infra/hpc/ssh/resolve.py).
    private_key: pulumi.Input[str] | None = None
    # What the environment is (config's `provenance`), carried into the outputs for the report.
    provenance: str = PROVENANCE_NOT_STATED
    sweep_max_attempts: int = 1  # how many times a sweep's point may run (atlas:sweep.max_attempts)
    # The image the stack's OpenShift side runs (by digest, once built), for runtime apptainer
    # where the target names none of its own.
    image: pulumi.Input[str] | None = None


class HpcEnvironment(pulumi.ComponentResource):
    outputs: pulumi.Output[dict[str, Any]]

    def __init__(self, name: str, args: HpcEnvironmentArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TYPE_TOKEN, name, None, opts)
        target = args.target
        workload = args.workload
        scheduler = scheduler_for(target.scheduler, target.scheduler_options)
        unknown_waits = sorted(set(args.wait_for_steps) - {s.name for s in workload.steps})
        if unknown_waits:
            raise HpcConfigError(
                f"wait_for_steps: {', '.join(unknown_waits)} not in workload {workload.name!r}; "
                f"use step names: {', '.join(s.name for s in workload.steps)}"
            )
        # One folder per environment: two environments on one login node (LSF and Slurm on
        # the local Satori) must not share staged files or logs.
        run_dir = validate_remote_path(
            f"{target.remote_work_dir}/{args.stack}/{args.environment}/{workload.name}", "remote_work_dir"
        )

        # The login node as the user's ssh config reaches it (an alias, jump hosts, the agent),
        # resolved once here; the providers log in with what this puts in their `ssh` input.
        endpoint = resolve_endpoint(
            target, f"atlas:hpc.{args.environment}", key_from_secret=args.private_key is not None
        )
        # A program that builds the component itself is held to the stack's rule too: `real` is
        # refused for a route on this machine's loopback, which the outputs then record.
        refuse_real_route(args.provenance, endpoint, f"atlas:hpc.{args.environment}")
        observed = tuple(fact.what for fact in endpoint.stand_in_facts())
        ssh_target = endpoint_inputs(endpoint)
        private_key: pulumi.Input[str] | None = args.private_key if args.private_key is not None else target.private_key
        ssh_secret: pulumi.Output[dict[str, str | None]] = pulumi.Output.secret(
            pulumi.Output.from_input(private_key).apply(
                lambda key: {"private_key": key, "passphrase": target.private_key_passphrase}
            )
        )

        run = SubmissionKey(args.project, args.stack, args.environment, args.run_id, run_dir)
        container = (
            ContainerExec(target.apptainer.command, target.apptainer.binds) if target.apptainer is not None else None
        )
        scripts = step_scripts(
            workload, scheduler, run, target.queue, args.telemetry, target.directives, container
        )
        # A swept step runs as arrays (its plain script is not staged): its table and chunk scripts.
        sweeps = sweep_scripts(
            workload,
            scheduler,
            run,
            target.queue,
            args.telemetry,
            target.directives,
            array_limit=scheduler.array_limit_of(target.scheduler_options),
            container=container,
        )
        if sweeps and args.wait_for_steps and set(args.wait_for_steps) & set(sweeps):
            raise HpcConfigError(
                f"wait_for_steps: {', '.join(sorted(set(args.wait_for_steps) & set(sweeps)))} is a swept step; "
                "`pulumi up` does not wait for a sweep yet: remove it from waitFor"
            )
        self.sif: SifImage | None = None
        if target.apptainer is not None:
            image = target.apptainer.image or args.image
            if image is None:
                raise HpcConfigError(
                    f"atlas:hpc.{args.environment}.apptainer.image: runtime apptainer needs an image, and this stack "
                    "has no OpenShift side whose image to use; give the image by digest "
                    "(registry/repository@sha256:...)"
                )
            self.sif = SifImage(
                f"{name}-image",
                ssh_target=ssh_target,
                ssh_secret=ssh_secret,
                environment=args.environment,
                stack=args.stack,
                run_dir=run_dir,
                image=image,
                settings=dataclasses.asdict(target.apptainer),
                opts=pulumi.ResourceOptions(parent=self),
            )
        pipeline = submit_pipeline(
            name,
            self,
            workload=workload,
            scheduler=scheduler,
            scripts=scripts,
            files=staged_file_entries(scripts, args.extra_files, args.telemetry, HpcConfigError, sweeps),
            run_dir=run_dir,
            ssh_target=ssh_target,
            ssh_secret=ssh_secret,
            queue=target.queue,
            poll_interval_s=target.poll_interval_s,
            wait_for_steps=args.wait_for_steps,
            wait_timeout_s=args.wait_timeout_s,
            scheduler_options=target.scheduler_options,
            sweeps=sweeps,
            max_attempts=args.sweep_max_attempts,
            image=self.sif,
        )
        self.jobs, self.completions, self.sweeps = pipeline.jobs, pipeline.completions, pipeline.sweeps

        gpus = requested_gpus(workload, args.environment)
        step_outputs = batch_step_outputs(workload, pipeline, sweeps, target.queue or "", args.sweep_max_attempts)
        self.run_dir = run_dir
        runtime = runtime_output(self.sif)
        self.outputs = pulumi.Output.all(pulumi.Output.all(*step_outputs), runtime).apply(
            lambda found: HpcOutputs(
                gpus_requested=gpus,
                run_id=args.run_id,
                scheduler=target.scheduler,
                # The login node as the stack names it (a Host alias stays one: the tools resolve it
                # through the same ssh config), and the port and user it was reached with.
                host=target.host,
                port=endpoint.port,
                user=endpoint.user,
                run_dir=run_dir,
                steps=tuple(BatchStep(**s) for s in found[0]),
                telemetry=FilesAt(f"{run_dir}/{workload.telemetry.root}"),
                logs=FilesAt(f"{run_dir}/{workload.logs.root}"),
                provenance=args.provenance,
                runtime=found[1],
                observed=observed,
            ).to_dict()
        )
        self.register_outputs({"outputs": self.outputs})


def runtime_output(sif: SifImage | None) -> pulumi.Output[ContainerRuntime]:
    """The environment's `runtime` output: bare, or Apptainer with the image, its SIF and the
    conversion's record (what the SifImage found on the site)."""
    if sif is None:
        return pulumi.Output.from_input(ContainerRuntime())
    return pulumi.Output.all(
        image=sif.image, digest=sif.digest, sif=sif.sif, arch=sif.arch, version=sif.apptainer_version,
        conversion=sif.conversion,
    ).apply(
        lambda found: ContainerRuntime(
            name="apptainer",
            image=str(found["image"]),
            digest=found["digest"],
            version=found["version"],
            sif=found["sif"],
            arch=found["arch"],
            conversion=SifConversion(**found["conversion"]) if found.get("conversion") else None,
        )
    )


def batch_step_outputs(
    workload: Workload,
    pipeline: SubmittedPipeline,
    sweeps: Mapping[str, SweepScripts],
    queue: str,
    max_attempts: int,
) -> list[pulumi.Output[dict[str, Any]]]:
    """Each step's BatchStep fields as a batch side submitted it (HPC, or AWS's instance): a job's,
    or a sweep's first array id with the sweep as one object (its arrays, its elements)."""
    outputs = []
    for step in workload.steps:
        if step.name in pipeline.jobs:
            job = pipeline.jobs[step.name]
            outputs.append(
                pulumi.Output.all(
                    name=step.name,
                    job_id=job.job_id,
                    queue=job.queue,
                    script_sha256=job.script_sha256,
                    submitted_at=job.submitted_at,
                )
            )
            continue
        swept = pipeline.sweeps[step.name]
        outputs.append(
            pulumi.Output.all(
                name=step.name,
                job_id=swept.job_id,
                queue=queue,
                script_sha256=sweeps[step.name].scripts[0].sha256,
                submitted_at=swept.submitted_at,
                sweep=pulumi.Output.all(
                    job_ids=swept.job_ids, elements=swept.elements, retries=swept.retries
                ).apply(functools.partial(sweep_outputs, step, sweeps[step.name], max_attempts)),
            )
        )
    return outputs


def sweep_outputs(step: Step, sweep: SweepScripts, max_attempts: int, found: dict[str, Any]) -> SweepOutputs:
    """A swept step's `sweep` output (infra.outputs.SweepOutputs) from its SweepJob's array ids
    (one per chunk, in chunk order), retries and element letters."""
    assert step.sweep is not None  # only swept steps have SweepScripts
    arrays = [
        SweepArray(job_id=job_id, offset=chunk.offset, count=chunk.count)
        for job_id, chunk in zip(found["job_ids"], sweep.chunks, strict=True)
    ]
    for entry in found.get("retries") or []:
        retry = Retry.of(entry)
        chunk = sweep.chunks[retry.chunk]
        arrays.append(SweepArray(job_id=retry.job_id, offset=chunk.offset, count=len(retry.points),
                                 points=retry.points))
    points = sum(chunk.count for chunk in sweep.chunks)
    return SweepOutputs(points=points, arrays=tuple(arrays), elements=found["elements"], results=step.sweep.results,
                        max_attempts=max_attempts)
