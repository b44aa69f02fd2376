"""DataStaging: the volumes' directories, then the workload's data inputs, before the pipeline.

One Job creates every directory the steps mount as subPaths (writable by the project's
group); then one Job per configured source fills a workload data input on the data PVC from
an existing PVC, an HTTP(S) URL (stage_data.py, from a ConfigMap) or an S3 URL (aws-cli).
Each Job is followed by a JobCompletion (completion.py) that holds until its pod succeeded,
for as long as the Job's deadline allows, so the first step starts on staged data. The same
data the HPC side reads: the sources are named in the stack configuration, never baked into
the image.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s

from infra.openshift.completion import ApiAccess, JobCompletion
from infra.openshift.manifests.pods import PodContext
from infra.openshift.manifests.staging_jobs import STAGE_SCRIPT, prepare_volumes_job, staging_job
from infra.openshift.settings import OpenShiftSettings
from infra.workload.model import Workload

STAGE_SCRIPT_PATH = Path(__file__).with_name(STAGE_SCRIPT)
# Beyond the Job's own deadline, so that Atlas reports the Job's failure rather than its own timeout.
AWAIT_MARGIN_S = 600


@dataclass
class DataStagingArgs:
    workload: Workload
    settings: OpenShiftSettings
    context: PodContext
    access: ApiAccess
    depends_on: list[pulumi.Resource] = field(default_factory=list)


class DataStaging(pulumi.ComponentResource):
    def __init__(self, name: str, args: DataStagingArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("atlas:openshift:DataStaging", name, None, opts)
        context = args.context
        settings = args.settings

        def job_opts(depends_on: list[pulumi.Resource]) -> pulumi.ResourceOptions:
            # Jobs are immutable: the old one goes before its replacement is created.
            return pulumi.ResourceOptions(parent=self, depends_on=depends_on, delete_before_replace=True)

        def done(job_name: str, job: k8s.batch.v1.Job, deadline_s: int, step: str) -> JobCompletion:
            return JobCompletion(
                f"{job_name}-done",
                job=job,
                step=step,
                access=args.access,
                timeout_s=deadline_s + AWAIT_MARGIN_S,
                opts=pulumi.ResourceOptions(parent=self),
            )

        prepare = prepare_volumes_job(args.workload, context)
        self.prepare_job = k8s.batch.v1.Job(
            f"{name}-volumes", metadata=prepare["metadata"], spec=prepare["spec"], opts=job_opts(list(args.depends_on))
        )
        deadline = prepare["spec"]["activeDeadlineSeconds"]
        self.prepare_done = done(f"{name}-volumes", self.prepare_job, deadline, "prepare-volumes")
        self.scripts: k8s.core.v1.ConfigMap | None = None
        if any(s.scheme != "s3" for s in settings.data.sources):
            self.scripts = k8s.core.v1.ConfigMap(
                f"{name}-scripts",
                metadata={"namespace": context.namespace, "labels": context.identity.labels("staging")},
                data={STAGE_SCRIPT: STAGE_SCRIPT_PATH.read_text()},
                opts=pulumi.ResourceOptions(parent=self),
            )
        scripts_name: pulumi.Input[str] = self.scripts.metadata.name if self.scripts is not None else ""
        self.jobs: dict[str, k8s.batch.v1.Job] = {}
        self.ready: list[pulumi.Resource] = [self.prepare_done]  # what the pipeline's first step waits for
        for source in settings.data.sources:
            job = staging_job(source, args.workload, settings, context, scripts_name)
            self.jobs[source.input] = k8s.batch.v1.Job(
                f"{name}-{source.input}",
                metadata=job["metadata"],
                spec=job["spec"],
                opts=job_opts([*args.depends_on, self.prepare_done]),
            )
            job_name, deadline = f"{name}-{source.input}", settings.data.timeout_seconds
            self.ready.append(done(job_name, self.jobs[source.input], deadline, f"stage-{source.input}"))
        self.register_outputs(
            {"volumes_job": self.prepare_job.metadata.name, "jobs": {k: j.metadata.name for k, j in self.jobs.items()}}
        )
