"""What a scheduler says of a workload's jobs and its nodes, in one vocabulary for every environment.

A step's lifecycle (`StepRecord`, built by `step_record`), a sweep's element's (`ElementRecord`), a
node's GPUs (`HpcNode`) and a job in a queue (`QueueJob`): the schedulers of infra/hpc read their
own output into these, and the report (infra/compare) and the monitor (infra/monitor, infra/nodes)
read only these. Plain frozen dataclasses, no NumPy: the stack program and the HPC side import this module.

Times are Unix seconds (float). A value a source did not give is None (or empty), never a zero.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

from infra.provenance import Fact, mock_gpu_fact


@dataclass(frozen=True)
class StepRecord:
    """One workload step's lifecycle as the environment's own scheduler recorded it.

    `requested_at`: Job created (Kubernetes) / job submitted (LSF, Slurm).
    `scheduled_at`: the pod's PodScheduled condition / the job dispatched to a host.
    `started_at`: the container started / the job started.
    `finished_at`: the container finished / the job finished.
    """

    step: str
    job: str  # Job name or scheduler job id
    state: str  # the native state: Complete, Failed, DONE, EXIT, COMPLETED, ...
    requested_at: float | None
    scheduled_at: float | None
    started_at: float | None
    finished_at: float | None
    exit_code: int | None
    pending_reason: str
    gpus_requested: int | None
    gpus_allocated: int | None
    node: str
    simulated: bool  # ran on a KWOK node: no container ran, times are the simulator's
    argv: tuple[str, ...] | None  # the step's own command line where the record carries it
    source: str  # which API or command these times came from


def step_record(
    step: str,
    job: str,
    state: str,
    source: str,
    *,
    requested_at: float | None = None,
    scheduled_at: float | None = None,
    started_at: float | None = None,
    finished_at: float | None = None,
    exit_code: int | None = None,
    pending_reason: str = "",
    gpus_requested: int | None = None,
    gpus_allocated: int | None = None,
    node: str = "",
    simulated: bool = False,
    argv: tuple[str, ...] | None = None,
) -> StepRecord:
    """A StepRecord from what its source gave; what the source did not give stays None (or empty):
    every collector (LSF, Slurm, Kubernetes, a device run) builds its records here."""
    lifecycle = (requested_at, scheduled_at, started_at, finished_at, exit_code, pending_reason)
    placement = (gpus_requested, gpus_allocated, node, simulated)
    return StepRecord(step, job, state, *lifecycle, *placement, argv, source)  # in field order


@dataclass(frozen=True)
class ElementRecord:
    """One element of a sweep (an array's element, an Indexed Job's index) mapped to its point:
    its last attempt's lifecycle as the scheduler recorded it. `phase` is the scheduler-neutral
    state (infra.hpc.scheduler.Phase's value: pending, running, succeeded, failed, cancelled,
    unknown); a cancelled element was killed (by its owner, an admin, or Atlas's destroy).

    `requested_at`: the array submitted / the Indexed Job created. `started_at`, `finished_at`: the
    element's (the container's) start and end."""

    point: int  # the sweep's point (0-based), through the array's offset or its retry's points
    job: str  # how the scheduler names the element: `123_4` (Slurm), `123[5]` (LSF), the pod
    state: str  # the native state
    phase: str
    requested_at: float | None
    started_at: float | None
    finished_at: float | None
    exit_code: int | None
    node: str
    source: str  # which command or API these times came from
    simulated: bool = False
    attempt: int = 1  # 1: the point's first array; n: its (n-1)-th retry
    array: str = ""  # the array's id, the Indexed Job's name
    index: int = -1  # the element's index as the scheduler counts it (LSF from 1), the completion index


@dataclass(frozen=True)
class HpcNode:
    """One node of a batch cluster as its scheduler lists it: its GPUs, how many are allocated and
    how busy they are, where the scheduler says (`util_source` names where, or why not)."""

    name: str
    state: str
    gpus_total: int
    gpus_allocated: int
    gpu_util_percent: float | None
    util_source: str
    cpus: str = ""
    # The GPU types the scheduler lists for the node (Slurm's GRES types, LSF's gpu_model) and
    # what it calls them: a type named mock (infra.provenance) says the node's GPUs are mock.
    gpu_types: tuple[str, ...] = ()
    gpu_type_source: str = ""

    @property
    def gpu_fact(self) -> Fact | None:
        """The node's mock GPUs, as its scheduler names them (None: real or not named)."""
        return mock_gpu_fact(self.gpu_types, self.gpu_type_source or "GPU type")


def mock_gpu_nodes(nodes: Iterable[HpcNode], ran_on: Collection[str] = ()) -> Fact | None:
    """The mock GPUs of the nodes the steps ran on (`ran_on`; every node where none is named)."""
    chosen = [n for n in nodes if not ran_on or n.name in ran_on]
    types = [t for n in chosen for t in n.gpu_types]
    where = next((n.gpu_type_source for n in chosen if n.gpu_type_source), "GPU type")
    return mock_gpu_fact(types, where)


@dataclass(frozen=True)
class QueueJob:
    """A job in the scheduler's queue (any user's): what the wait estimate reads."""

    job_id: str
    state: str  # pending | running | finished
    submitted_at: float | None
    started_at: float | None
    expected_end: float | None  # start + time limit, where the scheduler says
    gpus: int | None  # None: the listing does not say
    preemptible: bool = False  # in a backfill queue: a real job pushes it aside, it is not ahead of one
