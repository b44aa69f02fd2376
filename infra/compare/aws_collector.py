"""The AWS side in the report: from the stack outputs, and (when the steps ran) over SSH.

Where the instances ran nothing (against moto, or `execute: false`), every figure is reported
as not measured with the outputs' own reason: the AWS objects were created and destroyed for
real, but no step ran, so there is no time, throughput or cost of a run to show. The cloud
rate of the instance type (rates.yaml, `aws-<type>`) is still shown, dated and sourced.
"""

from __future__ import annotations

import dataclasses

from infra.compare.records import EnvironmentRecords, without_records
from infra.compare.runtimes import bare_runtime
from infra.outputs import AwsOutputs
from infra.provenance import label


def cloud_rate_name(outputs: AwsOutputs) -> str:
    return f"aws-{outputs.instance_type}"


def platform(outputs: AwsOutputs) -> str:
    where = "on moto, an AWS API stand-in" if outputs.emulated else outputs.region
    count = len(outputs.instances) or 1
    return f"AWS EC2 {count} x {outputs.instance_type} {outputs.market}, {where}"


def not_executed_reason(outputs: AwsOutputs) -> str:
    return f"not executed: {outputs.not_executed_reason or 'the stack outputs say no step ran'}"


def not_executed(name: str, outputs: AwsOutputs) -> EnvironmentRecords:
    reason = not_executed_reason(outputs)
    ids = ", ".join(outputs.instance_ids) or "none"
    objects = outputs.staging.objects if outputs.staging is not None else 0
    return without_records(
        name,
        outputs.kind,
        platform(outputs) + " (not executed)",
        reason,
        notes=(
            f"{reason}. " + (
                f"The AWS objects exist only as records of moto, an AWS API stand-in at {outputs.endpoint_url} "
                f"(instances {ids}; bucket {outputs.bucket}, {objects} staged objects): nothing was created on "
                "AWS and nothing could run, so no figure of a run is given."
                if outputs.emulated
                else f"The AWS objects were created for real (instances {ids}; bucket {outputs.bucket}, {objects} "
                "staged objects); no step ran on them, so no figure of a run is given."
            ),
        ),
        provenance=outputs.label(),
        gpus=outputs.gpus_per_instance,
        gpu_product=outputs.gpu_product,
        cloud_rate=cloud_rate_name(outputs),
        runtime=bare_runtime(name, "no step ran"),
    )


def as_aws(records: EnvironmentRecords, outputs: AwsOutputs) -> EnvironmentRecords:
    """Records collected over SSH from the instance's Slurm, labelled and priced as AWS capacity:
    the GPUs paid for are the instance's, whatever the steps asked for."""
    return dataclasses.replace(
        records,
        kind=outputs.kind,
        platform=f"Slurm over SSH on {platform(outputs)}",
        gpus=outputs.gpus_per_instance,
        gpu_product=outputs.gpu_product,
        cost_profile="",
        cloud_rate=cloud_rate_name(outputs),
        # The instance's Slurm's label, narrowed by what the AWS outputs show.
        provenance=label(records.provenance, outputs.facts()),
    )
