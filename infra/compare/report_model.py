"""The computed report as dataclasses: every number a `Value` with its unit, source and kind.

infra.compare.metrics builds a `Report` from the collected records; charts, render and report
read it and only format. A value that could not be measured carries `None` and the reason;
values from KWOK-simulated nodes are flagged `simulated`; assumptions and projections say so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from infra.compare.costs import RateTable


@dataclass(frozen=True)
class Value:
    value: float | None
    unit: str
    source: str
    note: str = ""  # why not measured, or what an assumption / projection assumes
    kind: str = "measured"  # measured | computed | assumption | projection | not-measured
    simulated: bool = False

    @property
    def measured(self) -> bool:
        return self.value is not None


MOCK_GPU = "not measured: mock GPUs (no GPU behind them)"
# Why a run on mock GPUs has no cost: no GPU was used, so none is paid for (its GPU-hours still count).
MOCK_GPUS_UNPRICED = "the GPUs were mock (no GPU behind them), so no GPU-hour was used or paid for"


def missing(unit: str, reason: str, source: str = "") -> Value:
    return Value(None, unit, source, reason, "not-measured")


@dataclass(frozen=True)
class Series:
    name: str
    unit: str
    x: tuple[float, ...]  # seconds since the step started (or iterations, for losses)
    y: tuple[float, ...]
    x_unit: str
    source: str
    simulated: bool = False


@dataclass(frozen=True)
class StepMetrics:
    step: str
    job: str
    state: str
    exit_code: int | None
    requested_at: Value
    scheduled_at: Value
    started_at: Value
    finished_at: Value
    queue_wait: Value  # requested -> started
    duration: Value  # started -> finished
    gpus_requested: Value
    gpus_allocated: Value
    pending_reason: str
    node: str
    simulated: bool


@dataclass(frozen=True)
class Elasticity:
    request_to_gpus_running: Value
    gpu_step_queue_wait: Value
    time_to_add_gpus: Value
    total_queue_wait: Value
    pending_reasons: tuple[str, ...]
    # `scripts/nodes --estimate` before the run (infra/compare/estimates.py), beside the measured wait.
    estimated_gpu_step_wait: Value = field(
        default_factory=lambda: missing("s", "no estimate recorded: run `scripts/nodes -s STACK --estimate` first")
    )
    estimate_error: Value = field(default_factory=lambda: missing("s", "no estimate to compare with"))


@dataclass(frozen=True)
class Performance:
    wall_time: Value
    train_duration: Value
    iterations: Value
    iterations_per_s: Value
    images_per_s: Value
    cpu_tree_mean: Value
    cpu_host_mean: Value
    memory_rss_peak: Value
    memory_host_peak: Value
    gpu_utilization_mean: Value
    gpu_memory_peak: Value
    samples: Value
    series: tuple[Series, ...]
    loss: Series | None
    # The step's memory peak: its own cgroup's where the sampler recorded one (a Slurm or LSF job's,
    # a pod's: infra.telemetry.procfs.judge_memory_cgroup), else memory_rss_peak; memory_peak_basis
    # says which and whose, or why there was no peak, in words for the report.
    memory_peak: Value = field(default_factory=lambda: missing("bytes", "not measured"))
    memory_peak_basis: str = "not measured"
    # The step `train_duration` and the telemetry figures are of (report.step; BigGAN's `train`).
    measured_step: str = "train"
    # The workload's own throughput line (report.throughput), in the unit it declares.
    workload_throughput: Value = field(default_factory=lambda: missing("", "not measured"))


@dataclass(frozen=True)
class Economics:
    profile: str
    usd_per_gpu_hour: Value
    gpu_hours: Value
    cost_per_run: Value
    cost_per_1000_iterations: Value
    chargeback: tuple[tuple[str, Value, Value], ...]  # (rate name, per run, per 1,000 iterations)


@dataclass(frozen=True)
class DataAccess:
    staging_time: Value
    bytes_staged: Value
    bytes_read: Value
    read_throughput: Value


@dataclass(frozen=True)
class Scalability:
    measured: tuple[tuple[int, Value], ...]  # (GPUs, images/s)
    projection: tuple[tuple[int, Value], ...]


@dataclass(frozen=True)
class SweepMetrics:
    """One swept step on one side (infra/compare/sweeps.py): its elements by state, each element's
    run time and queue wait (median, p95: their `note` says over how many elements), the makespan
    (the first request to the last element's end) and the best point by the declared metric."""

    step: str
    points: int
    states: tuple[tuple[str, int], ...]  # (state, elements), in the order of infra.compare.sweeps.STATES
    run_time_median: Value
    run_time_p95: Value
    queue_wait_median: Value
    queue_wait_p95: Value
    makespan: Value
    best_point: Value  # the point's index (unit "point")
    best_metric: Value  # its metric's value
    best_values: str  # its values as the definition declares them (`lr=0.1, seed=1`), or why not known
    metric_read: str  # "5 of 6 points" and what the metric is, or why it was not read
    arrays: tuple[str, ...]  # the scheduler objects read
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class EnvironmentMetrics:
    name: str
    kind: str
    platform: str
    simulated: bool
    steps: tuple[StepMetrics, ...]
    steps_reason: str
    elasticity: Elasticity
    performance: Performance
    economics: Economics
    data_access: DataAccess
    scalability: Scalability
    notes: tuple[str, ...]
    # What the environment is where its name does not say (records.provenance): shown beside it.
    provenance: str = ""
    # Each swept step's figures (infra/compare/sweeps.py), in the workload's order.
    sweeps: tuple[SweepMetrics, ...] = ()

    @property
    def label(self) -> str:
        return f"{self.name} ({self.provenance})" if self.provenance else self.name


@dataclass(frozen=True)
class ArgumentDifference:
    step: str
    argument: str
    values: tuple[tuple[str, str | None], ...]  # (environment, value; None = absent)


@dataclass(frozen=True)
class Comparability:
    comparable: bool
    differences: tuple[ArgumentDifference, ...]
    unknown: tuple[str, ...]  # environments whose arguments no record gave


@dataclass(frozen=True)
class RuntimeRow:
    """One environment in the "what ran where" table (infra/compare/runtimes.py)."""

    environment: str
    runtime: str  # "Apptainer 1.4.0", "containerd 2.0.1", "bare", or "not read: why"
    image: str  # the reference, or "" (bare)
    digest: str  # sha256:<hex> in full; "" where not known
    digest_text: str  # the short form (sha256:0123456789ab), or why there is none
    arch: str  # amd64, ppc64le, or why not recorded
    in_image: bool
    source: str


@dataclass(frozen=True)
class SifConversionRow:
    """An image's conversion to a SIF, once per (site, digest) however many steps, environments
    and stacks ran it: apart from the steps' times."""

    site: str  # the login node (host:port): its SIF cache
    digest: str
    digest_text: str
    environments: tuple[str, ...]  # this report's environments that ran that SIF
    seconds: Value  # the conversion's wall time, or not recorded and why
    converted_at: str  # or "not recorded"
    by: str  # the stack whose `up` converted it, or "not recorded"
    origin: str  # "converted by this stack's `up`" | "found in the cache: ..."
    sif: str
    source: str


@dataclass(frozen=True)
class WhatRanWhere:
    """Each environment's runtime and image, whether the sides that ran in an image ran one
    digest (`same_image`: None where fewer than two sides of known digest ran in one), the line
    that says it, and each SIF conversion."""

    rows: tuple[RuntimeRow, ...] = ()
    same_image: bool | None = None
    digests: tuple[str, ...] = ()  # the lines saying which digests are equal, which differ, which ran bare
    conversions: tuple[SifConversionRow, ...] = ()


@dataclass(frozen=True)
class CostParameter:
    profile: str
    parameter: str
    value: float | str
    origin: str  # seed table / assumption: ... / overridden


@dataclass(frozen=True)
class Report:
    title: str
    generated_at: str
    run: Mapping[str, str]
    environments: tuple[EnvironmentMetrics, ...]
    comparability: Comparability
    cost_parameters: tuple[CostParameter, ...]
    cost_per_gpu_hour: tuple[tuple[str, Value], ...]
    rate_table: RateTable
    notes: tuple[str, ...] = field(default_factory=tuple)
    what_ran_where: WhatRanWhere = field(default_factory=WhatRanWhere)
