"""What the collectors bring back: raw records, one dataclass per kind, no derived numbers.

Times are Unix seconds (float). A value a source did not give is None; a whole block a
source could not give is a `Missing` with the reason, never a zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

# A step's record is the schedulers' vocabulary (infra/job_records.py, no NumPy there); the
# collectors here import it with the rest of the records.
from infra.job_records import ElementRecord as ElementRecord
from infra.job_records import StepRecord as StepRecord
from infra.job_records import step_record as step_record
from infra.outputs import SifConversion
from infra.workload.model import Sweep

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Missing:
    """A record that could not be collected, and why (shown in the report as "not measured")."""

    reason: str


@dataclass(frozen=True)
class EventRecord:
    time: float | None
    kind: str  # Normal / Warning
    reason: str
    object: str
    message: str


@dataclass(frozen=True)
class NodeRecord:
    name: str
    simulated: bool
    gpu_product: str | None
    gpus_allocatable: int | None
    labels: tuple[tuple[str, str], ...]
    # Its GPUs are mock (a device plugin with no GPU behind it, label atlas.dev/gpu-mock).
    gpu_mock: bool = False
    # status.nodeInfo: what runs its containers (`containerd://2.0.1`) and its architecture (amd64).
    container_runtime: str = ""
    architecture: str = ""


@dataclass(frozen=True)
class StagingRecord:
    """Moving input data to where the steps read it."""

    name: str
    started_at: float | None
    finished_at: float | None
    bytes_moved: int | None
    simulated: bool
    source: str


# TelemetryColumns.not_measured's name for a missing cgroup peak (beside the blocks: cpu, memory, gpu, disk).
CGROUP_PEAK = "memory cgroup peak"


@dataclass(frozen=True)
class TelemetryColumns:
    """The sampler's samples for one step, column by column (NaN where not measured).

    Columnar on purpose: a million samples load as a dozen NumPy arrays, not a million objects.
    """

    step: str | None
    source: str
    argv: tuple[str, ...]
    start_t: float | None
    end_t: float | None
    exit_code: int | None
    interval_s: float | None
    t: FloatArray
    tree_cpu_percent: FloatArray  # % of one core
    host_cpu_percent: FloatArray  # % of all cores
    tree_rss_bytes: FloatArray
    host_memory_used_bytes: FloatArray
    host_memory_total_bytes: FloatArray
    gpu_count: FloatArray
    gpu_utilization_percent: FloatArray  # mean over the step's devices
    gpu_memory_used_bytes: FloatArray  # sum over devices
    gpu_memory_total_bytes: FloatArray
    tree_read_bytes: FloatArray  # cumulative, the step's processes
    host_read_bytes: FloatArray  # cumulative, the whole host
    cgroup_peak_bytes: FloatArray  # the memory cgroup's high-water mark (NaN: see not_measured's CGROUP_PEAK)
    not_measured: tuple[tuple[str, str], ...]  # (block, first reason seen)
    skipped_lines: int
    # Why the memory cgroup the peaks are of is the step's own ("v1 cgroup /slurm/.../job_77/... is Slurm
    # job 77's own"); "" where there are no peaks (not_measured's CGROUP_PEAK says why).
    memory_cgroup_why: str = ""

    @property
    def rows(self) -> int:
        return int(self.t.size)


@dataclass(frozen=True)
class TrainingLog:
    """BigGAN-format training logs: evaluations (`<exp>_log.jsonl`) and per-iteration losses."""

    source: str
    experiment: str
    eval_itr: tuple[int, ...]
    eval_stamp: tuple[float, ...]
    eval_is_mean: tuple[float | None, ...]
    eval_fid: tuple[float | None, ...]
    loss_itr: tuple[int, ...]  # G_loss.log
    g_loss: tuple[float, ...]
    batch_size: int | None  # from metalog.txt's config, else the step's argv
    iterations: int | None  # the last iteration logged
    # Where each iteration's end was timed (a console log with timestamps, e.g. a device run's):
    # (itr, Unix s). With them the speed is read per iteration rather than between evaluations.
    iteration_marks: tuple[tuple[int, float], ...] = ()
    marks_source: str = ""
    # Real images one iteration consumes (batch x D steps x D accumulations) where known.
    images_per_iteration: int | None = None
    images_basis: str = ""


# Where the records an environment was read from do not say what ran its steps (an imported run).
RUNTIME_NOT_RECORDED = "not recorded: the files this run was read from do not say what ran its steps"


@dataclass(frozen=True)
class RuntimeRecord:
    """What ran an environment's steps, as its stack outputs (and on Kubernetes the nodes that ran
    the step pods) say: the runtime, the image and its digest, the architecture; for Apptainer
    on an HPC site, the SIF and its conversion's record. Pure data: infra.compare.runtimes
    makes these and computes the report's table from them."""

    name: str  # bare | apptainer | containerd | cri-o | ...; "" where not read (`note` says why)
    version: str = ""
    image: str = ""  # the reference the steps ran (registry/repository@sha256:... or a tag)
    digest: str = ""  # sha256:<hex>; "" where not known (`digest_note` says why)
    digest_note: str = ""
    arch: str = ""  # as OCI names it (amd64, ppc64le); "" where not recorded (`arch_note`)
    arch_note: str = ""
    in_image: bool = False  # the steps ran in the image (not bare, not on simulated nodes)
    note: str = ""  # why the runtime was not read, or what it is besides its name
    source: str = ""
    site: str = ""  # an HPC side's login node (host:port): where its SIF cache is
    sif: str = ""
    conversion: SifConversion | None = None


# Where a workload's definition names no BigGAN-style training log (logs.experiment).
NO_TRAINING_LOG = "not measured (the workload writes no training log Atlas reads)"
NO_THROUGHPUT_LINE = "not measured (the workload declares no throughput line: report.throughput)"


@dataclass(frozen=True)
class ThroughputSpec:
    """A workload's own throughput line: the last match of `pattern` in `file` (relative to the
    run's logs folder), its group `value` a rate in `unit`."""

    file: str
    pattern: str
    unit: str


@dataclass(frozen=True)
class ReportContract:
    """What the stack's `atlas.report` output says the report measures (infra/workload/render.py).
    The defaults are what stacks from before it measured: BigGAN's `train` step and its log."""

    step: str = "train"
    training_log: bool = True
    throughput: ThroughputSpec | None = None
    # Each swept step's sweep (its points' values, its metric), from the workload's definition
    # (infra.compare.contract.with_sweep_definitions); `definition_note` says why none was loaded.
    sweeps: tuple[tuple[str, Sweep], ...] = ()
    definition_note: str = ""


DEFAULT_CONTRACT = ReportContract()


@dataclass(frozen=True)
class ThroughputReading:
    value: float
    unit: str
    source: str  # the file and where it was read
    line: str  # the line it was read from, as written


@dataclass(frozen=True)
class MetricReading:
    """A sweep's metric at one point: the number, where it was read (the file, the line), or
    None and why not."""

    point: int
    value: float | None
    source: str  # the file and line it was read from, or why it was not


@dataclass(frozen=True)
class SweepRecord:
    """One swept step on one side: every point's element record (its last attempt), the metric
    read at each point, and what could not be read. `definition`: the step's sweep as the
    workload's definition declares it (its points' values, its metric), where it was loaded."""

    step: str
    points: int
    elements: tuple[ElementRecord, ...]  # by point; a point no array ran has none
    arrays: tuple[str, ...]  # the scheduler objects read: array ids, the Indexed Job's name
    notes: tuple[str, ...]  # what could not be read, and why
    metric: tuple[MetricReading, ...] | Missing
    definition: Sweep | None = None


@dataclass(frozen=True)
class EnvironmentRecords:
    """Everything collected for one environment."""

    name: str
    kind: str  # kubernetes | hpc | import
    platform: str  # "Kubernetes (KWOK-simulated nodes)", "LSF over SSH", "Slurm over SSH", "seed logs"
    gpus: int | None
    gpu_product: str | None
    steps: tuple[StepRecord, ...] | Missing
    telemetry: dict[str, TelemetryColumns | Missing]  # by step
    training: TrainingLog | Missing
    staging: tuple[StagingRecord, ...] | Missing
    events: tuple[EventRecord, ...] = ()
    nodes: tuple[NodeRecord, ...] = ()
    notes: tuple[str, ...] = ()
    cost_profile: str = ""  # which on-premises profile of the cost model applies
    cloud_rate: str = ""  # the rates.yaml rate that prices rented capacity (aws-p3.8xlarge), if any
    run: dict[str, str] = field(default_factory=dict)  # stack, run id, workload
    # What the environment is, derived from what Atlas observed (infra/provenance.py): "real",
    # "local stand-in: ... (observed: ...)", "simulated nodes: ...". Shown beside its name wherever
    # its figures appear.
    provenance: str = ""
    # The GPUs the steps were given are mock (a node label, a scheduler's GPU type): GPU use is
    # "not measured (mock GPU)" and their GPU-hours are not priced.
    gpu_mock: bool = False
    # The step the report measures (the definition's report.step, else its last step).
    measured_step: str = "train"
    # The workload's own throughput line, where its definition declares one.
    throughput: ThroughputReading | Missing = field(default_factory=lambda: Missing(NO_THROUGHPUT_LINE))
    # Each swept step's records (infra/compare/sweeps.py reads them), in the workload's order.
    sweeps: tuple[SweepRecord, ...] = ()
    # What ran the steps, in which image (infra/compare/runtimes.py).
    runtime: RuntimeRecord = field(default_factory=lambda: RuntimeRecord("", note=RUNTIME_NOT_RECORDED))


def without_records(
    name: str,
    kind: str,
    platform: str,
    reason: str,
    notes: tuple[str, ...],
    gpus: int | None = None,
    gpu_product: str | None = None,
    cost_profile: str = "",
    cloud_rate: str = "",
    runtime: RuntimeRecord | None = None,
    provenance: str = "",
) -> EnvironmentRecords:
    """An environment none of whose records could be collected (unreachable, or nothing ran):
    every block `Missing(reason)`, with what the stack outputs still say about it (`runtime`,
    `provenance`: its label as the outputs show it)."""
    return EnvironmentRecords(
        name=name,
        kind=kind,
        platform=platform,
        gpus=gpus,
        gpu_product=gpu_product,
        steps=Missing(reason),
        telemetry={},
        training=Missing(reason),
        staging=Missing(reason),
        notes=notes,
        cost_profile=cost_profile,
        cloud_rate=cloud_rate,
        runtime=runtime if runtime is not None else RuntimeRecord("", note=RUNTIME_NOT_RECORDED),
        provenance=provenance,
    )
