"""`HpcEnvironment`: one workload on one LSF or Slurm cluster, as a Pulumi component.

Children (each `f"{name}-<role>"`, parent=self):
- `{name}-staged-files`: the job scripts, the telemetry sampler and any extra files, in the
  run directory `<remote_work_dir>/<stack>/<workload>` on the login node;
- `{name}-<step>`: one `BatchJob` per workload step, chained through the scheduler's own
  dependencies (`-w "done(id)"`, `--dependency=afterok:id`) from the workload's inputs and
  outputs, so the cluster, not Pulumi, sequences the steps;
- `{name}-<step>-done`: a `JobCompletion` for each step in `wait_for_steps` (the short preparation
  steps): `pulumi up` waits for it after the whole pipeline is submitted, and fails with the
  step's exit code and log if it did not succeed.

Everything is rendered in Python before any resource is registered (no resources inside
`apply`), so `pulumi preview` shows the exact job scripts.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import pulumi

from infra.hpc.providers import BatchJob, JobCompletion, StagedFiles, job_name_for, ssh_inputs
from infra.hpc.scheduler import JobSpec, render_job_script, scheduler_for
from infra.hpc.target import HpcConfigError, HpcTarget, validate_remote_path
from infra.workload import InTreeSource, RenderedStep, Workload, render_step

TYPE_TOKEN = "atlas:hpc:HpcEnvironment"  # noqa: S105 (a type token, not a password)
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
    """A local file to upload, and where it goes relative to the run directory."""

    source: Path
    path: str


def workload_source_files(workload: Workload, repo_root: Path) -> tuple[StagedFile, ...]:
    """The Python files of an in-tree workload (the probe), staged beside the telemetry
    sampler so `python3 -m workloads.<name>` runs on the login node's own Python.

    A workload from a Git repository (BigGAN) is not staged: the cluster clones it.
    """
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
    # The private key as a Pulumi secret (config.require_secret); otherwise the target's.
    private_key: pulumi.Input[str] | None = None


def _sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _job_spec(args: HpcEnvironmentArgs, rendered: RenderedStep, run_dir: str, job_name: str) -> JobSpec:
    workload = args.workload
    return JobSpec(
        job_name=job_name,
        step=rendered.name,
        workdir=run_dir,
        log_dir=workload.logs.root,
        command=rendered.argv,
        env=rendered.env,
        nodes=rendered.resources.nodes,
        gpus_per_node=rendered.resources.gpus_per_node,
        cpus_per_task=rendered.resources.cpus_per_task,
        memory_mib=rendered.resources.memory_mib,
        walltime_seconds=rendered.resources.walltime_seconds,
        queue=args.target.queue,
        telemetry_out=f"{workload.telemetry.root}/{rendered.name}.jsonl" if args.telemetry else None,
        telemetry_interval_s=workload.telemetry.interval_seconds,
        python_path=PYTHON_DIR if args.telemetry else None,
        description=workload.step(rendered.name).description,
    )


class HpcEnvironment(pulumi.ComponentResource):
    outputs: pulumi.Output[dict[str, Any]]

    def __init__(self, name: str, args: HpcEnvironmentArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TYPE_TOKEN, name, None, opts)
        target = args.target
        workload = args.workload
        scheduler = scheduler_for(target.scheduler, target.lsf_memory_unit)
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

        ssh_target = ssh_inputs(
            target.host,
            target.port,
            target.user,
            target.load_known_hosts(),
            target.known_hosts_source,
            str(target.private_key_file) if target.private_key_file else None,
        )
        private_key: pulumi.Input[str] | None = args.private_key if args.private_key is not None else target.private_key
        ssh_secret: pulumi.Output[dict[str, str | None]] = pulumi.Output.secret(
            pulumi.Output.from_input(private_key).apply(
                lambda key: {"private_key": key, "passphrase": target.private_key_passphrase}
            )
        )

        scripts: dict[str, tuple[str, str, str]] = {}  # step -> (job name, script path, script)
        for step in workload.steps:
            rendered = render_step(workload, step.name, args.environment)
            job_name = job_name_for(args.project, args.stack, args.environment, step.name, args.run_id, run_dir)
            script = render_job_script(scheduler, _job_spec(args, rendered, run_dir, job_name))
            scripts[step.name] = (job_name, f"{JOBS_DIR}/{step.name}{scheduler.script_suffix}", script)

        files: list[dict[str, Any]] = [
            {"path": path, "content": script, "sha256": hashlib.sha256(script.encode()).hexdigest(), "mode": 0o644}
            for _, path, script in scripts.values()
        ]
        staged_locals = list(args.extra_files)
        if args.telemetry:
            staged_locals += [StagedFile(_INFRA_DIR / f, f"{PYTHON_DIR}/infra/{f}") for f in TELEMETRY_FILES]
        for item in staged_locals:
            if not item.source.is_file():
                raise HpcConfigError(f"extra_files: {item.source} is not a file; stage files, not directories")
            files.append(
                {"path": item.path, "source": str(item.source), "sha256": _sha256_file(item.source), "mode": 0o644}
            )

        directories = sorted({workload.logs.root, workload.telemetry.root, str(PurePosixPath(JOBS_DIR))})
        staged = StagedFiles(
            f"{name}-staged-files",
            ssh_target=ssh_target,
            ssh_secret=ssh_secret,
            run_dir=run_dir,
            files=files,
            directories=directories,
            opts=pulumi.ResourceOptions(parent=self),
        )

        self.jobs: dict[str, BatchJob] = {}
        for step in workload.steps:
            job_name, script_path, script = scripts[step.name]
            after = [self.jobs[d].job_id for d in workload.depends_on(step.name)]
            self.jobs[step.name] = BatchJob(
                f"{name}-{step.name}",
                ssh_target=ssh_target,
                ssh_secret=ssh_secret,
                scheduler=target.scheduler,
                step=step.name,
                job_name=job_name,
                run_dir=run_dir,
                script_path=script_path,
                script=script,
                log_pattern=f"{workload.logs.root}/{step.name}.{scheduler.log_placeholder}",
                requested_queue=target.queue,
                after_job_ids=after,
                poll_interval_s=target.poll_interval_s,
                lsf_memory_unit=target.lsf_memory_unit,
                opts=pulumi.ResourceOptions(parent=self, depends_on=[staged]),
            )
        # Every step is in the queue, chained by the scheduler, before any is awaited.
        self.completions = {
            step: JobCompletion(
                f"{name}-{step}-done", self.jobs[step], args.wait_timeout_s, pulumi.ResourceOptions(parent=self)
            )
            for step in args.wait_for_steps
        }

        gpus = max(
            (render_step(workload, s.name, args.environment).resources.total_gpus for s in workload.steps), default=0
        )
        step_outputs = [
            pulumi.Output.all(
                name=s.name,
                job_id=self.jobs[s.name].job_id,
                queue=self.jobs[s.name].queue,
                script_sha256=self.jobs[s.name].script_sha256,
                submitted_at=self.jobs[s.name].submitted_at,
            )
            for s in workload.steps
        ]
        self.run_dir = run_dir
        self.outputs = pulumi.Output.all(*step_outputs).apply(
            lambda steps: {
                "kind": "hpc",
                "scheduler": target.scheduler,
                "host": target.host,
                "port": target.port,
                "user": target.user,
                "run_dir": run_dir,
                "steps": [dict(s) for s in steps],
                "gpus": gpus,
                "telemetry": {"path": f"{run_dir}/{workload.telemetry.root}"},
                "logs": {"path": f"{run_dir}/{workload.logs.root}"},
            }
        )
        self.register_outputs({"outputs": self.outputs})
