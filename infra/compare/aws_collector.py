"""The AWS side in the report: from the stack outputs, and (when the steps ran) over SSH.

Where the instances ran nothing (against moto, or `execute: false`), every figure is reported
as not measured with the outputs' own reason: the AWS objects were created and destroyed for
real, but no step ran, so there is no time, throughput or cost of a run to show. The cloud
rate of the instance type (rates.yaml, `aws-<type>`) is still shown, dated and sourced.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from infra.compare.records import EnvironmentRecords, without_records


def cloud_rate_name(outputs: Mapping[str, Any]) -> str:
    return f"aws-{outputs.get('instance_type', '')}"


def platform(outputs: Mapping[str, Any]) -> str:
    where = "on moto, an AWS API stand-in" if outputs.get("emulated") else str(outputs.get("region", ""))
    count = outputs.get("instance_count") or len(outputs.get("instance_ids") or []) or 1
    return f"AWS EC2 {count} x {outputs.get('instance_type')} {outputs.get('market', '')}, {where}"


def not_executed(name: str, outputs: Mapping[str, Any]) -> EnvironmentRecords:
    reason = f"not executed: {outputs.get('not_executed_reason') or 'the stack outputs say no step ran'}"
    ids = ", ".join(outputs.get("instance_ids") or []) or "none"
    return without_records(
        name,
        "aws",
        platform(outputs) + " (not executed)",
        reason,
        outputs,
        notes=(
            f"{reason}. The AWS objects were created for real (instances {ids}; bucket "
            f"{outputs.get('bucket')}, {(outputs.get('staging') or {}).get('objects', 0)} staged objects); no step "
            "ran on them, so no figure of a run is given.",
        ),
        cloud_rate=cloud_rate_name(outputs),
    )


def as_aws(records: EnvironmentRecords, outputs: Mapping[str, Any]) -> EnvironmentRecords:
    """Records collected over SSH from the instance's Slurm, labelled and priced as AWS capacity."""
    return dataclasses.replace(
        records,
        kind="aws",
        platform=f"Slurm over SSH on {platform(outputs)}",
        gpu_product=outputs.get("gpu_product"),
        cost_profile="",
        cloud_rate=cloud_rate_name(outputs),
    )
