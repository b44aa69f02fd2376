"""The AWS side of the monitor as a source: its instances, and where the steps ran, the one-node
Slurm on the first of them.

When the steps ran (`executed`), the view is the HPC source's (hpc_view.py) polling the first
instance's Slurm over SSH, checked against the host key the outputs carry, named as AWS
capacity. When nothing ran (against moto, an AWS API stand-in, or with `execute: false`), the
view lists the instances the outputs name, their GPUs by instance type, every step "not
executed" with the outputs' reason, and nothing read from a scheduler: there is none.
"""

from __future__ import annotations

from infra.compare.aws_collector import not_executed_reason, platform
from infra.monitor.model import CellReasons, EnvironmentView, NodeView, StepView
from infra.monitor.sources import EnvironmentSource, ViewContext
from infra.outputs import AwsOutputs


class AwsInstancesSource(EnvironmentSource):
    """An AWS environment whose steps did not run: what the outputs say, nothing polled."""

    def __init__(self, name: str, outputs: AwsOutputs) -> None:
        self.name, self.outputs = name, outputs

    def view(self, now: float, context: ViewContext) -> EnvironmentView:
        outputs = self.outputs
        reason = not_executed_reason(outputs)
        # moto, not executed: what the outputs show (infra.provenance), never "real" by default.
        provenance = outputs.label()
        # A stand-in's instances are API records, not capacity: no node to judge. Real instances
        # that run nothing are GPUs paid for and idle, which is what the node listing is for.
        nodes = () if outputs.emulated else tuple(
            NodeView(
                name=instance.id,
                state=instance.state or "unknown",
                gpus_total=outputs.gpus_per_instance,
                gpus_allocated=0,  # no step was submitted: nothing holds them
                gpu_util_percent=None,
                util_source=f"not measured: {reason}",
                site=outputs.endpoint_url or outputs.region,
                provenance=outputs.label(run=False),
            )
            for instance in outputs.instances
        )
        steps = tuple(
            StepView(
                name=step.name,
                job="",
                phase="not executed",
                native_state=step.state or "not-executed",
                node="",
                requested_at=None,
                started_at=None,
                finished_at=None,
                elapsed_s=None,
                queue_wait_s=None,
                reason=reason,
                gpus=None,
                # The step's `reason` says why it did not run; each cell says only that it did not.
                reasons=CellReasons("not executed", "not executed", "not executed", "not executed"),
            )
            for step in outputs.steps
        )
        return EnvironmentView(
            name=self.name,
            kind=outputs.kind,
            platform=f"{platform(outputs)} (not executed)",
            steps=steps,
            nodes=nodes,
            polled_at=None,
            source="the stack outputs (nothing to poll: no step was submitted)",
            notes=(
                f"{reason}; instances {', '.join(outputs.instance_ids) or '(none)'}"
                + (" exist only as records of the API stand-in, so no node is listed" if outputs.emulated else ""),
            ),
            provenance=provenance,
        )
