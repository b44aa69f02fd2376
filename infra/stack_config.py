"""A stack's configuration as frozen dataclasses: its workload, run id and each environment's target.

infra/config.py reads and validates the stack's `atlas:*` values into these; components take
them as arguments and never read `pulumi.Config` themselves.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from infra.aws.settings import AwsSettings
from infra.hpc.target import PROVENANCE_NOT_STATED, HpcTarget
from infra.nodes.settings import BackfillSettings
from infra.openshift.settings import OpenShiftSettings
from infra.openshift.target import KubernetesTarget


@dataclass(frozen=True)
class HpcEnvironmentConfig:
    """One batch-scheduler environment (`atlas:hpc.<name>`), e.g. Satori under LSF."""

    name: str
    target: HpcTarget
    # Steps whose jobs `pulumi up` waits for, so their failure fails the update; None:
    # every step but the last (the preparation steps), as on the OpenShift side.
    wait_for: tuple[str, ...] | None
    # What the environment is, shown beside its name wherever its figures appear: "real" for a
    # real cluster, or what stands in ("local stand-in: LSF's command set over Slurm, mock GPUs").
    provenance: str = PROVENANCE_NOT_STATED


@dataclass(frozen=True)
class StackConfig:
    stack: str
    workload: str  # as configured: a shipped workload's name or a path
    openshift: KubernetesTarget | None
    openshift_settings: OpenShiftSettings | None = None
    hpc: tuple[HpcEnvironmentConfig, ...] = ()
    # Every job name and label derives from it: bump it to run the workload afresh.
    run_id: str = "1"
    # AWS GPU instances (`atlas:aws`), the third environment; None when not configured.
    aws: AwsSettings | None = None
    # Backfill that yields (`atlas:backfill`, infra/nodes); None when not configured.
    backfill: BackfillSettings | None = None
    # A local clone or git bundle of the workload's repository (`atlas:workloadSource`), for
    # machines without network; infra/workload_source.py checks it holds the pinned commit.
    workload_source: Path | None = None
    # The definitions `workload` and `backfill.workload` name (infra/workload/load.py:locate_workload).
    workload_file: Path = Path("workloads/probe/workload.yaml")
    backfill_workload_file: Path | None = None
    # How many times a sweep's point may run (`atlas:sweep.max_attempts`; 1: never again).
    sweep_max_attempts: int = 1
