"""`BatchJobCompletion`: the end of a BatchJob's job, awaited after the whole pipeline is submitted.

Apart from the BatchJob, so a pipeline is submitted whole at once (each step chained to the one
before by the scheduler's own dependency) and only then awaited; a job that did not succeed fails
`pulumi up` with its exit code and the end of its log. Its Pulumi type is still
`hpc:JobCompletion`, the name it was registered under before the OpenShift side's `JobCompletion`
(infra/openshift/completion.py) took that class name.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi.dynamic

from infra.dynamic.inputs import changed
from infra.hpc.providers.batch_job import BatchJob, dependency_replaced, job_call, wait_until_finished
from infra.hpc.providers.common import PROVIDER_VERSION, SshResource

COMPLETION_OUTPUTS = ("state", "exit_code", "finished_at")


class BatchJobCompletionProvider(pulumi.dynamic.ResourceProvider):
    """Waits for a submitted job to finish; a job that did not succeed fails `pulumi up` with its
    exit code and the end of its log.

    Apart from the BatchJob, so a pipeline is submitted whole at once (each step chained to
    the one before by the scheduler's own dependency, as a user would with `-w done()` or
    `--dependency=afterok`) and only then awaited: the scheduler starts a step when its
    predecessor ends, not when Atlas next polls and submits it.
    """

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        replaces = changed(olds, news, ("scheduler",))
        if dependency_replaced(olds, news, "job_id", "job_definition"):
            replaces.append("job_id")
        updates = changed(
            olds,
            news,
            ("provider_version", "wait_timeout_s", "poll_interval_s", "ssh_secret", "ssh", "job_urn", "job_definition"),
        )
        return pulumi.dynamic.DiffResult(changes=bool(replaces or updates), replaces=replaces)

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        job_id = str(props["job_id"])
        state = wait_until_finished(job_call(props), job_id)
        outs = {**props, "state": state.phase.value, "exit_code": state.exit_code, "finished_at": state.finish_time}
        return pulumi.dynamic.CreateResult(f"{job_id}-done", outs)

    def update(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        return pulumi.dynamic.UpdateResult({**news, **{k: olds.get(k) for k in COMPLETION_OUTPUTS}})

    def read(self, id_: str, props: dict[str, Any]) -> pulumi.dynamic.ReadResult:
        # What the job did afterwards is its BatchJob's to report (refresh reads it there).
        return pulumi.dynamic.ReadResult(id_, props)

    def delete(self, _id: str, _props: dict[str, Any]) -> None:
        return None  # nothing to undo: waiting changed nothing


_COMPLETION_INPUTS = (
    "ssh",
    "ssh_secret",
    "scheduler",
    "scheduler_options",
    "step",
    "job_name",
    "run_dir",
    "log_pattern",
    "poll_interval_s",
)


class BatchJobCompletion(SshResource, module="hpc", name="JobCompletion"):
    """The end of a BatchJob's job, awaited (see BatchJobCompletionProvider)."""

    state: pulumi.Output[str]
    exit_code: pulumi.Output[int | None]
    finished_at: pulumi.Output[str]

    def __init__(self, name: str, job: BatchJob, wait_timeout_s: float, opts: pulumi.ResourceOptions | None = None):
        # What reaching the scheduler and naming the log takes, from the job itself.
        inputs = {
            "provider_version": PROVIDER_VERSION,
            **{k: getattr(job, k) for k in _COMPLETION_INPUTS},
            "job_id": job.job_id,
            # What preview knows of the job while its id is not known (dependency_replaced).
            "job_definition": job.job_definition,
            "job_urn": job.urn,
            "wait_timeout_s": wait_timeout_s,
        }
        super().__init__(BatchJobCompletionProvider(), name, inputs, COMPLETION_OUTPUTS, opts)
