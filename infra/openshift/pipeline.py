"""TrainingPipeline: one Job per workload step, in the definition's order.

A step's Job is registered with `depends_on` its predecessor, and pulumi-kubernetes awaits a
preparation Job until it completes (for as long as its walltime), so a later step is created
only after the earlier one succeeded. The last step (training) carries
`pulumi.com/skipAwait`: `pulumi up` returns once it is created, not days later.
Jobs are immutable, so a changed step is replaced: auto-named, and deleted before its
replacement is created, so two copies never hold GPUs against the quota at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from infra.openshift import manifests
from infra.openshift.settings import OpenShiftSettings
from infra.openshift.staging import AWAIT_MARGIN_S
from infra.workload import RenderedStep, Workload


@dataclass
class TrainingPipelineArgs:
    workload: Workload
    steps: tuple[RenderedStep, ...]  # render_steps(workload, "openshift")
    settings: OpenShiftSettings
    context: manifests.PodContext
    depends_on: list[pulumi.Resource] = field(default_factory=list)


class TrainingPipeline(pulumi.ComponentResource):
    steps: pulumi.Output[list[dict[str, str]]]

    def __init__(self, name: str, args: TrainingPipelineArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("atlas:openshift:TrainingPipeline", name, None, opts)
        self.jobs: dict[str, k8s.batch.v1.Job] = {}
        previous: list[pulumi.Resource] = list(args.depends_on)
        for index, step in enumerate(args.steps):
            awaited = manifests.is_awaited(index, args.steps, args.settings)
            job = manifests.step_job(step, args.workload, args.settings, args.context, awaited)
            timeouts = (
                pulumi.CustomTimeouts(create=f"{step.resources.walltime_seconds + AWAIT_MARGIN_S}s")
                if awaited
                else None
            )
            resource = k8s.batch.v1.Job(
                f"{name}-{step.name}",
                metadata=job["metadata"],
                spec=job["spec"],
                opts=pulumi.ResourceOptions(
                    parent=self, depends_on=previous, delete_before_replace=True, custom_timeouts=timeouts
                ),
            )
            self.jobs[step.name] = resource
            previous = [resource]
        self.steps = pulumi.Output.all(*[_step_output(step, job) for step, job in self.jobs.items()])
        self.register_outputs({"steps": self.steps})


def _step_output(step: str, job: k8s.batch.v1.Job) -> pulumi.Output[dict[str, str]]:
    """One entry of the outputs contract's `steps`."""

    def entry(name_and_uid: list[str | None]) -> dict[str, str]:
        return {"name": step, "job": name_and_uid[0] or "", "uid": name_and_uid[1] or ""}

    return pulumi.Output.all(job.metadata.name, job.metadata.uid).apply(entry)
