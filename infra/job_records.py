"""What a scheduler says of a workload's jobs and its nodes, in one vocabulary for every environment.

A step's lifecycle (`StepRecord`, built by `step_record`), a node's GPUs (`HpcNode`) and a job in
a queue (`QueueJob`): the schedulers of infra/hpc read their own output into these, and the report
(infra/compare) and the monitor (infra/monitor, infra/nodes) read only these. Plain frozen
dataclasses, no NumPy: the stack program and the HPC side import this module.

Times are Unix seconds (float). A value a source did not give is None (or empty), never a zero.
"""

from __future__ import annotations

from dataclasses import dataclass


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
