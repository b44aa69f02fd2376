"""The AWS kind: `AwsEnvironment`, its instances in the report and the monitor, and its steps
(when they ran) read as the one-node Slurm on its first instance.

Everything the rest of Atlas asks of rented GPU instances, in the order of `EnvironmentKind`
(base.py). Where the steps ran, the batch side is read by the HPC kind's own code
(infra/kinds/hpc.py) and labelled and priced as AWS capacity; where nothing ran (against moto,
or `execute: false`), every reading is "not executed" with the outputs' reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from infra.kinds.base import BackfillRequest, BuildContext, Built, DoctorContext, EnvironmentKind
from infra.kinds.hpc import HpcKind, polled_source
from infra.outputs import AwsOutputs

if TYPE_CHECKING:
    from infra.compare.access import Access
    from infra.compare.records import EnvironmentRecords, ReportContract
    from infra.doctor import EnvironmentChecks
    from infra.monitor.sources import EnvironmentSource
    from infra.stack_config import StackConfig
    from infra.workload.model import Workload

ENVIRONMENT = "aws"


class AwsKind(EnvironmentKind[AwsOutputs]):
    name = AwsOutputs.kind
    outputs_type = AwsOutputs

    def stages_source(self, config: StackConfig, workload: Workload) -> bool:
        return config.aws is not None

    def build(self, context: BuildContext) -> dict[str, Built]:
        config, workload = context.config, context.workload
        if config.aws is None:
            return {}
        # Imported only for a stack with AWS: boto3 is a third of the program's start-up.
        from infra.aws.components import AwsEnvironment, AwsEnvironmentArgs

        # A swept step is never awaited by default (`pulumi up` waits for no sweep), as on HPC.
        preparation_steps = tuple(step.name for step in workload.steps[:-1] if step.sweep is None)
        environment = AwsEnvironment(
            ENVIRONMENT,
            AwsEnvironmentArgs(
                settings=config.aws,
                workload=workload,
                environment=ENVIRONMENT,
                stack=config.stack,
                run_id=config.run_id,
                wait_for_steps=config.aws.wait_for if config.aws.wait_for is not None else preparation_steps,
                extra_files=context.source_files,
                sweep_max_attempts=config.sweep_max_attempts,
            ),
        )
        return {ENVIRONMENT: Built(environment, environment.outputs)}

    def outputs_before_up(self, config: Mapping[str, Any], stack: str) -> dict[str, AwsOutputs]:
        return {}  # nothing is rented before `pulumi up`: no node to list, no scheduler to ask

    def collect(
        self, name: str, outputs: AwsOutputs, access: Access, raw_dir: Path, contract: ReportContract
    ) -> EnvironmentRecords:
        from infra.compare.aws_collector import as_aws, not_executed

        if outputs.batch is None:
            return not_executed(name, outputs)
        return as_aws(HpcKind().collect(name, outputs.batch, access, raw_dir, contract), outputs)

    def unreachable(self, name: str, outputs: AwsOutputs, reason: str) -> EnvironmentRecords:
        from infra.compare.aws_collector import cloud_rate_name, platform
        from infra.compare.records import without_records
        from infra.compare.runtimes import bare_runtime

        return without_records(
            name,
            outputs.kind,
            platform(outputs),
            reason,
            notes=(reason,),
            gpus=outputs.gpus_per_instance,
            gpu_product=outputs.gpu_product,
            cloud_rate=cloud_rate_name(outputs),
            runtime=bare_runtime(name),
            provenance=outputs.label(),
        )

    def monitor_source(self, name: str, outputs: AwsOutputs, access: Access, interval_s: float) -> EnvironmentSource:
        from infra.compare.aws_collector import platform
        from infra.monitor.aws_view import AwsInstancesSource

        if outputs.batch is None:
            return AwsInstancesSource(name, outputs)
        return polled_source(name, outputs.batch, access, interval_s, outputs.kind, f" on {platform(outputs)}")

    def polls_scheduler(self, outputs: AwsOutputs) -> bool:
        return outputs.batch is not None  # the steps ran under the instances' Slurm

    def backfill(self, request: BackfillRequest, outputs: AwsOutputs, echo: Callable[[str], None]) -> None:
        echo(f"{request.environment}: no backfill for rented AWS instances here (only Kubernetes and Slurm)")

    def doctor(self, context: DoctorContext) -> dict[str, EnvironmentChecks]:
        settings = context.config.aws
        if settings is None:
            return {}
        from infra.aws.doctor import aws_checks
        from infra.doctor import EnvironmentChecks

        return {ENVIRONMENT: EnvironmentChecks(ENVIRONMENT, self.name, aws_checks(settings))}
