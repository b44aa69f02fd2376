"""TrainingPipeline: one Job per workload step, in the definition's order.

Every Job carries `pulumi.com/skipAwait`; a preparation step's Job is followed by a
`JobCompletion` (completion.py) named `{name}-<step>-done`, which holds until its pod
succeeded (for as long as the step's walltime), and the next step's Job depends on it, so a
later step is created only after the earlier one succeeded. The last step (training) has no
completion unless `pipeline.await_last_step`: `pulumi up` returns once it is created, not
days later. Jobs are immutable, so a changed step is replaced: auto-named, and deleted before
its replacement is created, so two copies never hold GPUs against the quota at once.

A swept step (`sweep:` in the definition) is one Indexed Job (manifests/sweep_jobs.py: one
completion per point, the sweep's `parallel`, `backoffLimitPerIndex` from `sweep_max_attempts`)
beside an immutable ConfigMap holding its table of points, and a `SweepCompletion`
(sweep_completion.py) named `{name}-<step>-done` in place of the JobCompletion: where the step is
awaited it holds until every point ended (the steps after it wait for the whole Indexed Job), and
either way it keeps a letter per point in state, read again by `pulumi refresh`; the step's
`sweep` output (infra.outputs.SweepOutputs) is made from it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from infra.openshift.completion import ApiAccess, JobCompletion
from infra.openshift.manifests.pods import PodContext
from infra.openshift.manifests.step_jobs import is_awaited, step_job
from infra.openshift.manifests.sweep_jobs import indexed_step_job, points_config_map_data
from infra.openshift.manifests.volumes import volume_path
from infra.openshift.settings import OpenShiftSettings
from infra.openshift.staging import AWAIT_MARGIN_S
from infra.openshift.sweep_completion import SweepCompletion, sweep_outputs, sweep_timeout_s
from infra.workload.model import Sweep, Workload
from infra.workload.render import RenderedStep
from infra.workload.sweep import point_count


@dataclass
class TrainingPipelineArgs:
    workload: Workload
    steps: tuple[RenderedStep, ...]  # render_steps(workload, "openshift")
    settings: OpenShiftSettings
    context: PodContext
    access: ApiAccess
    depends_on: list[pulumi.Resource] = field(default_factory=list)
    # How many times a point of a sweep may run (the stack's atlas:sweep.max_attempts): its
    # Indexed Job's backoffLimitPerIndex is one less.
    sweep_max_attempts: int = 1


class TrainingPipeline(pulumi.ComponentResource):
    steps: pulumi.Output[list[dict[str, str]]]

    def __init__(self, name: str, args: TrainingPipelineArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("atlas:openshift:TrainingPipeline", name, None, opts)
        self.jobs: dict[str, k8s.batch.v1.Job] = {}
        self.completions: dict[str, JobCompletion] = {}
        self.points: dict[str, k8s.core.v1.ConfigMap] = {}
        self.sweeps: dict[str, SweepCompletion] = {}
        outputs: list[pulumi.Output[dict[str, Any]]] = []
        previous: list[pulumi.Resource] = list(args.depends_on)
        for index, step in enumerate(args.steps):
            sweep = args.workload.step(step.name).sweep
            job_opts = pulumi.ResourceOptions(parent=self, depends_on=previous, delete_before_replace=True)
            awaited = is_awaited(index, args.steps, args.settings)
            if sweep is not None:
                previous = [self._sweep(name, step, sweep, args, job_opts, awaited)]
                outputs.append(self._sweep_output(step.name, sweep, args))
                continue
            job = step_job(step, args.workload, args.settings, args.context)
            resource = k8s.batch.v1.Job(
                f"{name}-{step.name}", metadata=job["metadata"], spec=job["spec"], opts=job_opts
            )
            self.jobs[step.name] = resource
            previous = [resource]
            if awaited:
                done = JobCompletion(
                    f"{name}-{step.name}-done",
                    job=resource,
                    step=step.name,
                    access=args.access,
                    timeout_s=step.resources.walltime_seconds + AWAIT_MARGIN_S,
                    opts=pulumi.ResourceOptions(parent=self),
                )
                self.completions[step.name] = done
                previous = [done]
            outputs.append(_step_output(step.name, resource))
        self.steps = pulumi.Output.all(*outputs)
        self.register_outputs({"steps": self.steps})

    def _sweep(
        self,
        name: str,
        step: RenderedStep,
        sweep: Sweep,
        args: TrainingPipelineArgs,
        job_opts: pulumi.ResourceOptions,
        awaited: bool,
    ) -> SweepCompletion:
        """A swept step's table of points, its Indexed Job and the completion that follows it."""
        context = args.context
        # Immutable: other points are a new ConfigMap (auto-named), and so a new Indexed Job.
        self.points[step.name] = points = k8s.core.v1.ConfigMap(
            f"{name}-{step.name}-points",
            metadata={"namespace": context.namespace, "labels": context.identity.labels("sweep-points", step.name)},
            data=points_config_map_data(sweep),
            immutable=True,
            opts=pulumi.ResourceOptions(parent=self, replace_on_changes=["data"]),
        )
        job = indexed_step_job(
            step, sweep, args.workload, args.settings, context, points.metadata.name, args.sweep_max_attempts
        )
        self.jobs[step.name] = resource = k8s.batch.v1.Job(
            f"{name}-{step.name}", metadata=job["metadata"], spec=job["spec"], opts=job_opts
        )
        size = point_count(sweep)
        self.sweeps[step.name] = done = SweepCompletion(
            f"{name}-{step.name}-done",
            job=resource,
            step=step.name,
            size=size,
            access=args.access,
            wait=awaited,
            timeout_s=sweep_timeout_s(
                step.resources.walltime_seconds, size, job["spec"]["parallelism"], args.sweep_max_attempts,
                AWAIT_MARGIN_S,
            ),
            opts=pulumi.ResourceOptions(parent=self),
        )
        return done

    def _sweep_output(self, step: str, sweep: Sweep, args: TrainingPipelineArgs) -> pulumi.Output[dict[str, Any]]:
        """A swept step's entry of `steps`: its Indexed Job, and the sweep as one object."""
        job, done = self.jobs[step], self.sweeps[step]
        results = volume_path(args.workload, sweep.results)[1]

        def entry(values: list[Any]) -> dict[str, Any]:
            name, uid, elements = (v or "" for v in values)
            found = sweep_outputs(point_count(sweep), name, elements, results, args.sweep_max_attempts)
            return {"name": step, "job": name, "uid": uid, "sweep": dataclasses.asdict(found)}

        return pulumi.Output.all(job.metadata.name, job.metadata.uid, done.elements).apply(entry)


def _step_output(step: str, job: k8s.batch.v1.Job) -> pulumi.Output[dict[str, str]]:
    """One entry of the outputs contract's `steps`."""

    def entry(name_and_uid: list[str | None]) -> dict[str, str]:
        return {"name": step, "job": name_and_uid[0] or "", "uid": name_and_uid[1] or ""}

    return pulumi.Output.all(job.metadata.name, job.metadata.uid).apply(entry)
