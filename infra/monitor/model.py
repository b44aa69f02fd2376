"""The monitor's model: what one HPC poll read, and the snapshot built from it (plain frozen dataclasses).

Every renderer reads the same snapshot, so every view shows the same numbers.

A value a source could not give is None, and the reason sits beside it (`*_note`), never a
zero: "GPU use: not measured (simulated node)" is not "GPU use: 0 %".
"""

from __future__ import annotations

from dataclasses import dataclass, field

from infra.hpc.target import PROVENANCE_NOT_STATED

# What one poll reads is the schedulers' vocabulary (infra/job_records.py); the monitor's own
# modules import it from here with the rest of the model.
from infra.job_records import HpcNode as HpcNode
from infra.job_records import QueueJob as QueueJob
from infra.job_records import StepRecord as StepRecord

# What a node or environment is, as every output labels it (issue 17: nothing defaults to "real";
# issue 34: derived from what Atlas observes, infra/provenance.py).
from infra.provenance import REAL as REAL

# GPU use below this (percent) counts as idle: the monitor tracks since when, scripts/nodes reports it.
IDLE_PERCENT = 5.0


@dataclass(frozen=True)
class CellReasons:
    """Why each of a step's live cells is empty ("" where it holds a reading): every view shows
    `- (<reason>)`, never a bare dash."""

    iterations_per_s: str = ""
    cpu_percent: str = ""
    memory_bytes: str = ""
    gpu_util_percent: str = ""


@dataclass(frozen=True)
class LogTail:
    """The last records of the workload's training log (BigGAN's `<experiment>_log.jsonl`), as
    read: the rate between the last two, or why there is none."""

    iterations_per_s: float | None = None
    stamp: float | None = None  # the last record's `_stamp` (Unix s)
    records: int = 0  # records read (a rate needs two)
    unread: str = ""  # why the log could not be read at all ("" where it was)


@dataclass(frozen=True)
class LiveReading:
    """What a source read of one running step's own use, and why where it read nothing."""

    telemetry: StepTelemetry | None = None
    telemetry_reason: str = ""  # why `telemetry` is None
    iterations_per_s: float | None = None
    iterations_reason: str = ""  # why `iterations_per_s` is None
    gpu_mock: bool = False  # the step's GPUs are mock: no device reading is its own


@dataclass(frozen=True)
class StepView:
    """One workload step's job as its scheduler and its telemetry show it now."""

    name: str
    job: str  # Job name (Kubernetes) or scheduler job id
    phase: str  # pending | running | succeeded | failed | cancelled | unknown (infra.hpc.scheduler.Phase)
    native_state: str  # Active, Complete, PEND, RUNNING, ...
    node: str
    requested_at: float | None
    started_at: float | None
    finished_at: float | None
    elapsed_s: float | None  # since it started (to its finish, or to the snapshot)
    queue_wait_s: float | None  # request to start; for a pending job, so far
    reason: str  # why it is pending or what ended it
    gpus: int | None
    iterations_per_s: float | None = None
    cpu_percent: float | None = None  # % of one core, the step's process tree
    memory_bytes: float | None = None  # resident, the step's process tree
    gpu_util_percent: float | None = None  # mean over the step's devices
    reasons: CellReasons = field(default_factory=CellReasons)  # why a live cell is empty


@dataclass(frozen=True)
class NodeView:
    """One node's GPUs: how many, how many allocated, and how busy, where that is readable."""

    name: str
    state: str
    gpus_total: int
    gpus_allocated: int
    gpu_util_percent: float | None  # mean over the node's GPUs; None: not readable
    util_source: str  # where the utilisation came from, or why there is none
    simulated: bool = False
    workloads: tuple[str, ...] = ()  # pods / jobs holding GPUs on it
    idle_since: float | None = None  # allocated GPUs below the idle threshold since (Unix s)
    site: str = ""  # the API server or login host: two environments on one cluster share nodes
    provenance: str = PROVENANCE_NOT_STATED  # infra/provenance.py's label: real, local stand-in: ..., ...

    @property
    def gpus_free(self) -> int:
        return max(0, self.gpus_total - self.gpus_allocated)


@dataclass(frozen=True)
class WaitEstimate:
    """How long a job of the workload's shape would wait here now, and from what."""

    environment: str
    gpus: int  # GPUs per node the job asks for
    seconds: float | None  # None: cannot be estimated (basis says why)
    basis: str
    free_gpus: int
    pending_ahead: int  # pending jobs (or pods) asking for GPUs
    recent_waits_s: tuple[float, ...] = ()
    counted_nodes: tuple[str, ...] = ()  # the nodes whose GPUs were counted (those the job may run on)


@dataclass(frozen=True)
class SweepView:
    """One swept step's elements by state now (the report's words: succeeded, failed, killed or
    cancelled, running, pending, unknown), and where they were read."""

    step: str
    points: int
    states: tuple[tuple[str, int], ...]
    source: str
    note: str = ""  # what could not be read, and why
    phase: str = "unknown"  # the sweep as one phase (infra.hpc.arrays.summary): its step's row shows it


@dataclass(frozen=True)
class EnvironmentView:
    name: str
    kind: str  # kubernetes | hpc
    platform: str  # "Kubernetes API (watch)", "LSF over SSH", ...
    steps: tuple[StepView, ...]
    nodes: tuple[NodeView, ...]
    polled_at: float | None  # when the scheduler (or the watch cache) last answered
    source: str  # the commands / API paths the view came from
    error: str = ""  # the environment could not be read: why
    estimate: WaitEstimate | None = None
    notes: tuple[str, ...] = ()
    provenance: str = PROVENANCE_NOT_STATED
    sweeps: tuple[SweepView, ...] = ()


@dataclass(frozen=True)
class Snapshot:
    taken_at: float
    stack: str
    workload: str
    run_id: str
    interval_s: float
    environments: tuple[EnvironmentView, ...]


@dataclass(frozen=True)
class StepTelemetry:
    """The last samples of one step's sampler file (columns as the comparison loads them)."""

    t: tuple[float, ...]
    cpu_percent: tuple[float, ...]
    rss_bytes: tuple[float, ...]
    gpu_util_percent: tuple[float, ...]  # NaN where not measured
    not_measured: tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class HpcPoll:
    """One poll's answer for one environment."""

    at: float
    steps: tuple[StepRecord, ...]
    nodes: tuple[HpcNode, ...]
    telemetry: dict[str, StepTelemetry]
    log: LogTail
    commands: tuple[str, ...]
    node_error: str = ""
    queue: tuple[QueueJob, ...] = ()
    queue_error: str = ""
    sweeps: tuple[SweepView, ...] = ()
    telemetry_missing: dict[str, str] = field(default_factory=dict)  # running step -> why no readings
