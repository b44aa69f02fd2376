"""`AwsEnvironment`: the workload on rented AWS GPU instances, as a Pulumi component.

Children (each `f"{name}-<role>"`, parent=self):
- `{name}-bucket`: the S3 data bucket; `{name}-staged-objects`: the job scripts, the telemetry
  sampler and the workload's files under `s3://<bucket>/<project>/<stack>/<environment>/<workload>/`;
- `{name}-role`: an IAM role and instance profile that may read that prefix (the launch script
  copies it to the run folder);
- `{name}-key-pair`, `{name}-security-group` (SSH from the configured CIDRs only);
- `{name}-instance-<i>`: the GPU instances, with the launch script (a one-node Slurm each);
- with `execute`: `{name}-staged-files` and one `BatchJob` per step on the first instance, through
  the HPC side's own providers over SSH, exactly as on Satori under Slurm.

Against an AWS API stand-in (moto), nothing runs on the instances: every AWS object is created
and destroyed for real, and the outputs say `executed: false` with the reason.
Everything is rendered before any resource is registered (no resources inside `apply`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pulumi

from infra.aws.launch import LaunchSpec, render_launch_script
from infra.aws.providers import DataBucket, Instance, InstanceRole, KeyPair, SecurityGroup, StagedObjects, common_inputs
from infra.aws.settings import AwsConfigError, AwsSettings
from infra.hpc.components import batch_step_outputs
from infra.hpc.job_script import StepScript, SubmissionKey, SweepScripts, step_scripts, sweep_scripts
from infra.hpc.pipeline import (
    StagedFile,
    SubmittedPipeline,
    run_directories,
    staged_file_entries,
    submit_pipeline,
)
from infra.hpc.providers import BatchJob, ssh_inputs
from infra.hpc.registry import scheduler_for
from infra.hpc.scheduler import Scheduler
from infra.outputs import AwsInstance, AwsOutputs, AwsStaging, BatchStep, FilesAt, HpcOutputs
from infra.workload.model import Workload
from infra.workload.render import render_step, requested_gpus

TYPE_TOKEN = "atlas:aws:AwsEnvironment"  # noqa: S105 (a type token, not a password)
SCHEDULER = "slurm"  # what the launch script sets up on each instance
QUEUE = "normal"
REMOTE_WORK_DIR = "atlas-runs"
_INFRA_DIR = Path(__file__).resolve().parents[1]


@dataclass
class AwsEnvironmentArgs:
    settings: AwsSettings
    workload: Workload
    environment: str  # the name in the outputs and the workload's overrides (e.g. "aws")
    stack: str
    project: str = "atlas"
    run_id: str = "1"
    wait_for_steps: tuple[str, ...] = ()
    wait_timeout_s: float = 3600.0
    extra_files: tuple[StagedFile, ...] = ()  # the in-tree workload's source (workload_source_files)
    sweep_max_attempts: int = 1  # how many times a sweep's point may run (atlas:sweep.max_attempts)


def name_prefix(project: str, stack: str, environment: str) -> str:
    """AWS object names start with this (a random suffix follows): lower case, at most 41 characters."""
    text = re.sub(r"[^a-z0-9-]+", "-", f"{project}-{stack}-{environment}".lower()).strip("-")
    return re.sub(r"-{2,}", "-", text)[:32].rstrip("-") or "atlas"


def check_fits(workload: Workload, environment: str, wait_for_steps: tuple[str, ...]) -> None:
    """What the AWS side can run, checked before anything is registered: bad input creates nothing."""
    unknown_waits = sorted(set(wait_for_steps) - {s.name for s in workload.steps})
    if unknown_waits:
        raise AwsConfigError(
            f"atlas:aws.wait_for: {', '.join(unknown_waits)} not in workload {workload.name!r}; "
            f"use step names: {', '.join(s.name for s in workload.steps)}"
        )
    swept_waits = sorted(s.name for s in workload.steps if s.sweep is not None and s.name in wait_for_steps)
    if swept_waits:
        raise AwsConfigError(
            f"atlas:aws.wait_for: {', '.join(swept_waits)} is a swept step; `pulumi up` does not wait for a "
            "sweep yet: remove it from wait_for"
        )
    too_wide = [s.name for s in workload.steps if render_step(workload, s.name, environment).resources.nodes > 1]
    if too_wide:
        raise AwsConfigError(
            f"workload {workload.name!r}: step(s) {', '.join(too_wide)} ask for more than one node; the AWS side "
            "runs each step on one instance"
        )


class AwsEnvironment(pulumi.ComponentResource):
    outputs: pulumi.Output[dict[str, Any]]

    def __init__(self, name: str, args: AwsEnvironmentArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        settings = args.settings
        workload = args.workload
        check_fits(workload, args.environment, args.wait_for_steps)
        super().__init__(TYPE_TOKEN, name, None, opts)
        self.run_dir = f"{REMOTE_WORK_DIR}/{args.stack}/{args.environment}/{workload.name}"
        self.prefix = f"{args.project}/{args.stack}/{args.environment}/{workload.name}"
        scheduler = scheduler_for(SCHEDULER)
        run = SubmissionKey(args.project, args.stack, args.environment, args.run_id, self.run_dir)
        scripts = step_scripts(workload, scheduler, run, QUEUE)
        # A swept step runs as arrays on the instance's Slurm, as on an HPC side: its table and
        # chunk scripts are staged instead of its plain script.
        sweeps = sweep_scripts(workload, scheduler, run, QUEUE)
        files = staged_file_entries(scripts, args.extra_files, True, AwsConfigError, sweeps)

        credentials = settings.credentials
        aws_secret = pulumi.Output.secret(
            {"access_key_id": credentials.access_key_id, "secret_access_key": credentials.secret_access_key}
        )
        tags = {
            "atlas:project": args.project,
            "atlas:stack": args.stack,
            "atlas:environment": args.environment,
            "atlas:run": args.run_id,
            "atlas:workload": workload.name,
            "Name": f"{args.project}-{args.stack}-{args.environment}",
        }
        common = common_inputs(
            settings.region,
            settings.endpoint_url,
            aws_secret,
            name_prefix(args.project, args.stack, args.environment),
            tags,
        )
        self._storage(name, common, files)
        self._instances(name, args, common)
        self.jobs: dict[str, BatchJob] = {}
        self.pipeline: SubmittedPipeline | None = None
        if settings.execute:
            self.pipeline = self._pipeline(name, args, scheduler, scripts, files, sweeps)
            self.jobs = self.pipeline.jobs
        script_sha256 = {s: (sweeps[s].scripts[0] if s in sweeps else scripts[s]).sha256 for s in scripts}
        self.outputs = self._outputs(args, script_sha256, sweeps)
        self.register_outputs({"outputs": self.outputs})

    def _storage(self, name: str, common: dict[str, Any], files: list[dict[str, Any]]) -> None:
        """The data bucket, the run's files in it, and the role the instances read them with."""
        child = pulumi.ResourceOptions(parent=self)
        self.bucket = DataBucket(f"{name}-bucket", common=common, opts=child)
        self.staged = StagedObjects(
            f"{name}-staged-objects", common=common, bucket=self.bucket.bucket, prefix=self.prefix, files=files,
            opts=child,
        )
        self.role = InstanceRole(
            f"{name}-role", common=common, bucket=self.bucket.bucket, prefix=self.prefix, opts=child
        )

    def _instances(self, name: str, args: AwsEnvironmentArgs, common: dict[str, Any]) -> None:
        """The key pair, the security group and the GPU instances, each with the launch script."""
        settings = args.settings
        child = pulumi.ResourceOptions(parent=self)
        self.key_pair = KeyPair(f"{name}-key-pair", common=common, public_key=settings.ssh_public_key, opts=child)
        # A key pair AWS created: its private half, a Pulumi secret, is what logs in.
        self.ssh_secret: pulumi.Output[dict[str, Any]] = pulumi.Output.secret(
            self.key_pair.private_key.apply(lambda key: {"private_key": key, "passphrase": None})
        )
        self.security_group = SecurityGroup(
            f"{name}-security-group",
            common=common,
            allowed_ssh_cidrs=settings.allowed_ssh_cidrs,
            allow_ssh_from_anywhere=settings.allow_ssh_from_anywhere,
            subnet_id=settings.subnet_id,
            opts=child,
        )
        instance_type = settings.instance_type
        launch_script = render_launch_script(
            LaunchSpec(
                stack=args.stack,
                environment=args.environment,
                run_id=args.run_id,
                workload=args.workload.name,
                instance_type=instance_type.name,
                gpus=instance_type.gpus,
                gpu_product=instance_type.gpu_product,
                ssh_user=settings.ssh_user,
                run_dir=self.run_dir,
                bucket_prefix=self.prefix,
                directories=tuple(run_directories(args.workload)),
            )
        )
        self.instances = [
            Instance(
                f"{name}-instance-{index}",
                common=common,
                image_id=settings.ami,
                instance_type=instance_type.name,
                market=settings.market,
                spot_max_price=settings.spot_max_price,
                key_name=self.key_pair.key_name,
                security_group_id=self.security_group.group_id,
                subnet_id=settings.subnet_id,
                instance_profile_arn=self.role.profile_arn,
                root_volume_gib=settings.root_volume_gib,
                launch_script=launch_script,
                bucket=self.bucket.bucket,
                ssh_user=settings.ssh_user,
                ssh_private_key_file=_private_key_file(settings),
                ssh_secret=self.ssh_secret,
                wait_ready=settings.execute,
                ready_timeout_s=settings.ready_timeout_s,
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self.staged]),
            )
            for index in range(settings.instance_count)
        ]

    def _pipeline(
        self,
        name: str,
        args: AwsEnvironmentArgs,
        scheduler: Scheduler,
        scripts: Mapping[str, StepScript],
        files: list[dict[str, Any]],
        sweeps: Mapping[str, SweepScripts],
    ) -> SubmittedPipeline:
        """The steps as Slurm jobs on the first instance, over SSH, as on Satori (a swept step as
        its arrays)."""
        settings = args.settings
        head = self.instances[0]
        ssh_target = pulumi.Output.all(head.public_ip, head.host_public_key).apply(
            lambda ip_and_key: ssh_inputs(
                ip_and_key[0],
                22,
                settings.ssh_user,
                f"{ip_and_key[0]} {ip_and_key[1]}\n",
                "the instance's host key (generated by Atlas at launch)",
                _private_key_file(settings),
            )
        )
        # The launch script copied the bucket's files; this keeps them in step with later changes.
        return submit_pipeline(
            name,
            self,
            workload=args.workload,
            scheduler=scheduler,
            scripts=scripts,
            files=files,
            run_dir=self.run_dir,
            ssh_target=ssh_target,
            ssh_secret=self.ssh_secret,
            queue=QUEUE,
            poll_interval_s=settings.poll_interval_s,
            wait_for_steps=args.wait_for_steps,
            wait_timeout_s=args.wait_timeout_s,
            depends_on=[head],
            sweeps=sweeps,
            max_attempts=args.sweep_max_attempts,
        )

    def _outputs(
        self, args: AwsEnvironmentArgs, script_sha256: dict[str, str], sweeps: Mapping[str, SweepScripts]
    ) -> pulumi.Output[dict[str, Any]]:
        """This side of the outputs contract (infra.outputs.AwsOutputs), as a dict."""
        settings = args.settings
        workload = args.workload
        step_names = [s.name for s in workload.steps]
        instance_outputs = [
            pulumi.Output.all(
                id=i.instance_id,
                type=i.instance_type,
                state=i.state,
                lifecycle=i.lifecycle,
                public_ip=i.public_ip,
                host_public_key=i.host_public_key,
            )
            for i in self.instances
        ]
        if self.pipeline is not None:
            step_outputs: list[Any] = batch_step_outputs(
                workload, self.pipeline, sweeps, QUEUE, args.sweep_max_attempts
            )
        else:
            step_outputs = [{"name": s, "state": "not-executed", "script_sha256": script_sha256[s]} for s in step_names]
        gpus = requested_gpus(workload, args.environment)
        run_dir = self.run_dir

        def typed(parts: list[Any]) -> dict[str, Any]:
            bucket, staged_keys, group_id, key_name, *rest = parts
            instances = [dict(i) for i in rest[: len(self.instances)]]
            steps = tuple(BatchStep(**s) for s in rest[len(self.instances) :])
            batch = None
            if settings.execute:
                head_ip = instances[0]["public_ip"]
                batch = HpcOutputs(
                    gpus_requested=gpus,
                    run_id=args.run_id,
                    scheduler=SCHEDULER,
                    host=head_ip,
                    port=22,
                    user=settings.ssh_user,
                    run_dir=run_dir,
                    steps=steps,
                    telemetry=FilesAt(f"{run_dir}/{workload.telemetry.root}"),
                    logs=FilesAt(f"{run_dir}/{workload.logs.root}"),
                    provenance=_provenance(settings),
                    # The host key is public; scripts/compare checks the instance against it.
                    known_hosts=f"{head_ip} {instances[0]['host_public_key']}",
                )
            return AwsOutputs(
                gpus_requested=gpus,
                run_id=args.run_id,
                region=settings.region,
                endpoint_url=settings.endpoint_url,
                emulated=settings.emulated,
                market=settings.market,
                instance_type=settings.instance_type.name,
                instances=tuple(
                    AwsInstance(**{k: v or "" for k, v in i.items() if k != "host_public_key"}) for i in instances
                ),
                gpus_per_instance=settings.instance_type.gpus,
                gpu_product=settings.instance_type.gpu_product,
                bucket=bucket,
                staging=AwsStaging(bucket, self.prefix, len(staged_keys or [])),
                security_group_id=group_id,
                key_name=key_name,
                executed=settings.execute,
                not_executed_reason=settings.not_executed_reason,
                steps=steps,
                batch=batch,
            ).to_dict()

        return pulumi.Output.all(
            self.bucket.bucket,
            self.staged.keys,
            self.security_group.group_id,
            self.key_pair.key_name,
            *instance_outputs,
            *step_outputs,
        ).apply(typed)


def _private_key_file(settings: AwsSettings) -> str | None:
    return str(settings.ssh_private_key_file) if settings.ssh_private_key_file else None


def _provenance(settings: AwsSettings) -> str:
    """What the instances are: real, or objects of an API stand-in on which nothing runs."""
    return "moto, an AWS API stand-in: nothing runs on its instances" if settings.emulated else "real"
