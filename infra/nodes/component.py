"""`Backfill`: backfill that yields, as a Pulumi component, so `pulumi destroy` removes it.

Children (each `f"{name}-<role>"`, parent=self):
- Kubernetes: `{name}-provider`, `{name}-priority` (a PriorityClass below every real pod,
  never preempting), `{name}-namespace` (its own, so backfill never uses a run's quota) and
  `{name}-deployment` (one-GPU pods; a preempted pod is replaced and waits for free GPUs);
- per batch environment whose scheduler takes backfill (Slurm): `{name}-{env}-scripts` (the job
  scripts, staged by SFTP) and `{name}-{env}-<i>`, one BatchJob per GPU in the preemptible
  partition (preempted jobs are requeued by Slurm; destroy cancels them). The scheduler comes
  from the registry by the target's name; one that cannot take backfill is refused, saying why.
Everything is rendered before registration (backfill.py's pure functions), no resource is
created inside an apply.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.hpc.providers import BatchJob, StagedFiles, target_ssh_inputs
from infra.hpc.registry import scheduler_for
from infra.hpc.target import HpcTarget
from infra.hpc.target_parser import validate_remote_path
from infra.nodes import backfill
from infra.nodes.settings import BackfillSettings
from infra.openshift.cluster_access import cluster_access, cluster_provider
from infra.openshift.target import KubernetesTarget

TYPE_TOKEN = "atlas:nodes:Backfill"  # noqa: S105 (a type token, not a password)


@dataclass(frozen=True)
class HpcBackfillTarget:
    """A batch environment backfill fills: its target (whose scheduler must take backfill)."""

    environment: str
    target: HpcTarget
    # The environment's run folder (where the workload's code and data are staged) and what must
    # exist first (the environment's component: its preparation steps are awaited by `pulumi up`).
    run_dir: str | None = None
    after: tuple[pulumi.Resource, ...] = ()


@dataclass
class BackfillArgs:
    settings: BackfillSettings
    work: backfill.BackfillWork
    stack: str
    kubernetes: KubernetesTarget | None = None
    hpc: tuple[HpcBackfillTarget, ...] = field(default_factory=tuple)
    # The image the copies run (the run's own, an output once it is built); else work.image.
    image: pulumi.Input[str] | None = None


class Backfill(pulumi.ComponentResource):
    namespace: pulumi.Output[str] | None
    priority_class: pulumi.Output[str] | None
    hpc_job_ids: dict[str, list[pulumi.Output[str]]]

    def __init__(self, name: str, args: BackfillArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(TYPE_TOKEN, name, None, opts)
        settings = args.settings
        self.namespace = None
        self.priority_class = None
        outputs: dict[str, Any] = {"workload": args.work.workload, "gpus_per_environment": settings.gpus}
        if args.kubernetes is not None:
            outputs["kubernetes"] = self._kubernetes(name, args.kubernetes, settings, args.work, args.image)
        self.hpc_job_ids = {}
        for hpc in args.hpc:
            self.hpc_job_ids[hpc.environment] = self._hpc(name, hpc, settings, args)
        # The key says slurm: the outputs' shape stays as stacks recorded it.
        outputs["slurm"] = {env: pulumi.Output.all(*ids) for env, ids in self.hpc_job_ids.items()}
        self.outputs = outputs
        self.register_outputs(outputs)

    def _kubernetes(
        self,
        name: str,
        target: KubernetesTarget,
        settings: BackfillSettings,
        work: backfill.BackfillWork,
        image: pulumi.Input[str] | None,
    ) -> dict[str, Any]:
        provider = cluster_provider(f"{name}-provider", cluster_access(target), self)
        child = pulumi.ResourceOptions(parent=self, provider=provider)
        priority = backfill.priority_class(settings.priority)
        self.priority = k8s.scheduling.v1.PriorityClass(
            f"{name}-priority",
            metadata={"labels": priority["metadata"]["labels"]},  # auto-named: replaced without a collision
            value=priority["value"],
            global_default=False,
            preemption_policy=priority["preemptionPolicy"],
            description=priority["description"],
            opts=child,
        )
        # The namespace's name is the configured one: operators look for it by name.
        self.namespace_resource = k8s.core.v1.Namespace(
            f"{name}-namespace",
            metadata={"name": settings.namespace, "labels": backfill.backfill_namespace()["metadata"]["labels"]},
            opts=child,
        )
        deployment = backfill.backfill_deployment(work, settings.gpus, settings.namespace, "PLACEHOLDER")
        spec = deployment["spec"]
        template_spec = dict(spec["template"]["spec"])
        template_spec["priorityClassName"] = self.priority.metadata.name
        if image is not None:
            template_spec["containers"] = [{**template_spec["containers"][0], "image": image}]
        self.deployment = k8s.apps.v1.Deployment(
            f"{name}-deployment",
            metadata={
                "namespace": self.namespace_resource.metadata.name,
                "labels": deployment["metadata"]["labels"],
                # Backfill pods wait for free GPUs, maybe for hours: that is their job, so `pulumi up`
                # does not wait for the Deployment to become available.
                "annotations": {"pulumi.com/skipAwait": "true"},
            },
            spec={
                "replicas": spec["replicas"],
                "selector": spec["selector"],
                "template": {"metadata": spec["template"]["metadata"], "spec": template_spec},
            },
            opts=child,
        )
        self.namespace = self.namespace_resource.metadata.name
        self.priority_class = self.priority.metadata.name
        return {
            "namespace": self.namespace,
            "priority_class": self.priority_class,
            "priority": settings.priority,
            "deployment": self.deployment.metadata.name,
        }

    def _hpc(
        self, name: str, hpc: HpcBackfillTarget, settings: BackfillSettings, args: BackfillArgs
    ) -> list[pulumi.Output[str]]:
        target = hpc.target
        scheduler = scheduler_for(target.scheduler, target.scheduler_options)
        run_dir = validate_remote_path(
            hpc.run_dir or f"{target.remote_work_dir}/{args.stack}/{hpc.environment}/backfill", "remote_work_dir"
        )
        # With the environment's run folder, the staged code (.atlas/python) and the sampler are there.
        scripts = backfill.backfill_scripts(
            scheduler,
            args.work,
            hpc.environment,
            run_dir,
            settings.gpus,
            settings.partition,
            telemetry=hpc.run_dir is not None,
        )
        ssh_target = target_ssh_inputs(target, key=f"atlas:hpc.{hpc.environment}")
        ssh_secret = pulumi.Output.secret(
            {"private_key": target.private_key, "passphrase": target.private_key_passphrase}
        )
        files = [
            {
                "path": f"{backfill.JOBS_DIR}/{job_name}{scheduler.script_suffix}",
                "content": script,
                "sha256": hashlib.sha256(script.encode()).hexdigest(),
                "mode": 0o644,
            }
            for job_name, script in scripts
        ]
        staged = StagedFiles(
            f"{name}-{hpc.environment}-scripts",
            ssh_target=ssh_target,
            ssh_secret=ssh_secret,
            run_dir=run_dir,
            files=files,
            directories=[backfill.JOBS_DIR, f"{backfill.JOBS_DIR}/logs"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=list(hpc.after)),
        )
        ids = []
        for index, (job_name, script) in enumerate(scripts):
            job = BatchJob(
                f"{name}-{hpc.environment}-{index}",
                ssh_target=ssh_target,
                ssh_secret=ssh_secret,
                scheduler=scheduler.name,
                scheduler_options=target.scheduler_options,
                step=f"backfill-{index}",
                job_name=job_name,
                run_dir=run_dir,
                script_path=f"{backfill.JOBS_DIR}/{job_name}{scheduler.script_suffix}",
                script=script,
                log_pattern=f"{backfill.JOBS_DIR}/logs/backfill-{index}.{scheduler.log_placeholder}",
                requested_queue=settings.partition,
                poll_interval_s=target.poll_interval_s,
                opts=pulumi.ResourceOptions(parent=self, depends_on=[staged]),
            )
            ids.append(job.job_id)
        return ids
