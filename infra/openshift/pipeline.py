"""TrainingPipeline: one Job per workload step, in the definition's order.

Every Job carries `pulumi.com/skipAwait`; a preparation step's Job is followed by a
`JobCompletion` (completion.py) named `{name}-<step>-done`, which holds until its pod
succeeded (for as long as the step's walltime), and the next step's Job depends on it, so a
later step is created only after the earlier one succeeded. The last step (training) has no
completion unless `pipeline.await_last_step`: `pulumi up` returns once it is created, not
days later. Jobs are immutable, so a changed step is replaced: auto-named, and deleted before
its replacement is created, so two copies never hold GPUs against the quota at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pulumi
import pulumi_kubernetes as k8s

from infra.openshift.completion import ApiAccess, JobCompletion
from infra.openshift.manifests.pods import PodContext
from infra.openshift.manifests.step_jobs import is_awaited, step_job
from infra.openshift.settings import OpenShiftSettings
from infra.openshift.staging import AWAIT_MARGIN_S
from infra.workload.model import Workload
from infra.workload.render import RenderedStep


@dataclass
class TrainingPipelineArgs:
    workload: Workload
    steps: tuple[RenderedStep, ...]  # render_steps(workload, "openshift")
    settings: OpenShiftSettings
    context: PodContext
    access: ApiAccess
    depends_on: list[pulumi.Resource] = field(default_factory=list)


class TrainingPipeline(pulumi.ComponentResource):
    steps: pulumi.Output[list[dict[str, str]]]

    def __init__(self, name: str, args: TrainingPipelineArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("atlas:openshift:TrainingPipeline", name, None, opts)
        self.jobs: dict[str, k8s.batch.v1.Job] = {}
        self.completions: dict[str, JobCompletion] = {}
        previous: list[pulumi.Resource] = list(args.depends_on)
        for index, step in enumerate(args.steps):
            job = step_job(step, args.workload, args.settings, args.context)
            resource = k8s.batch.v1.Job(
                f"{name}-{step.name}",
                metadata=job["metadata"],
                spec=job["spec"],
                opts=pulumi.ResourceOptions(parent=self, depends_on=previous, delete_before_replace=True),
            )
            self.jobs[step.name] = resource
            previous = [resource]
            if is_awaited(index, args.steps, args.settings):
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
        self.steps = pulumi.Output.all(*[_step_output(step, job) for step, job in self.jobs.items()])
        self.register_outputs({"steps": self.steps})


def _step_output(step: str, job: k8s.batch.v1.Job) -> pulumi.Output[dict[str, str]]:
    """One entry of the outputs contract's `steps`."""

    def entry(name_and_uid: list[str | None]) -> dict[str, str]:
        return {"name": step, "job": name_and_uid[0] or "", "uid": name_and_uid[1] or ""}

    return pulumi.Output.all(job.metadata.name, job.metadata.uid).apply(entry)
