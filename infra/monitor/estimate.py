"""How long a job of the workload's shape would wait in an environment now.

Inputs are what the monitor already holds: the nodes' free GPUs, the jobs (or pods) pending
ahead and the GPUs they ask for, the running jobs' expected ends (start + time limit, where
the scheduler says), and the waits of jobs that started recently. Pure: tests give numbers.

The rules, in order (each estimate carries the one that applied as its `basis`):
1. a node has the GPUs free and nothing GPU-hungry is pending ahead: the job starts at the
   scheduler's own pace: the median of recent waits (0 s when none is known);
2. otherwise, where running jobs have time limits: when enough of them will have ended to
   free the job's GPUs after those pending ahead (their limits are upper bounds, so this is
   a pessimistic estimate);
3. otherwise the median of recent waits, if there are any;
4. otherwise: not estimable, and why.
Fragmentation across nodes is only checked for rule 1 (a node must hold all the job's GPUs).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from infra.monitor.model import NodeView, WaitEstimate
from infra.workload.model import Workload


@dataclass(frozen=True)
class JobShape:
    """The workload's largest step, as a scheduler sees it: GPUs on one node, CPUs, memory."""

    workload: str
    gpus: int
    cpus: int = 1
    memory_mib: int = 1024


@dataclass(frozen=True)
class RunningJob:
    expected_end: float | None
    gpus: int
    preemptible: bool = False  # backfill that yields: its GPUs are a real job's for the asking


def shape_of_workload(workload: Workload) -> JobShape:
    """The GPU step with the most GPUs per node (what waits longest), from a workload definition."""
    step = max(workload.steps, key=lambda s: (s.resources.gpus_per_node, s.resources.cpus_per_task))
    return JobShape(
        workload=workload.name,
        gpus=step.resources.gpus_per_node,
        cpus=step.resources.cpus_per_task,
        memory_mib=step.resources.memory_mib,
    )


def estimate_wait(
    environment: str,
    shape: JobShape,
    nodes: Sequence[NodeView],
    pending_gpus: Sequence[int | None],
    running: Sequence[RunningJob],
    recent_waits_s: Sequence[float],
    now: float,
    scope: str = "",
) -> WaitEstimate:
    """The estimate from `nodes`, which must be only the nodes the job may run on (`scope` says
    which and why, and is added to the basis)."""
    need = max(shape.gpus, 0)
    # GPUs held by backfill that yields are as good as free for a real job: it preempts them.
    yielding = sum(j.gpus for j in running if j.preemptible)
    running = [j for j in running if not j.preemptible]
    free_total = sum(n.gpus_free for n in nodes) + yielding
    ahead = [need if g is None else g for g in pending_gpus if g is None or g > 0]
    waits = tuple(sorted(w for w in recent_waits_s if w >= 0))
    median = statistics.median(waits) if waits else None
    latency = median if median is not None else 0.0
    usable = [n for n in nodes if n.gpus_total >= need and not n.state.lower().startswith(("down", "drain", "unavail"))]

    def result(seconds: float | None, basis: str) -> WaitEstimate:
        return WaitEstimate(
            environment, need, seconds, basis + (f"; {scope}" if scope else ""), free_total, len(ahead), waits,
            tuple(sorted(n.name for n in nodes)),
        )

    if not usable:
        where = "the step may run on" if scope else "here"
        return result(None, f"no node {where} has {need} GPUs: a job of this shape would never start")
    best = max(usable, key=lambda n: n.gpus_free)
    pace = f"median of {len(waits)} recent waits" if waits else "no recent start observed, so 0 s is assumed"
    if best.gpus_free >= need and not ahead:
        return result(latency, f"{best.gpus_free} GPUs free now on {best.name}, nothing pending ahead; {pace}")
    if yielding and free_total >= need and not ahead:
        return result(latency, f"{yielding} GPUs held by backfill that yields (preempted for this job); {pace}")
    wanted = need + sum(ahead)
    ends = sorted((j for j in running if j.expected_end is not None), key=lambda j: j.expected_end or 0.0)
    freed = free_total
    for count, job in enumerate(ends, start=1):
        freed += job.gpus
        if freed >= wanted:
            seconds = max(0.0, (job.expected_end or now) - now) + latency
            return result(
                seconds,
                f"{free_total} GPUs free, {len(ahead)} job(s) pending ahead asking {sum(ahead)}: enough GPUs "
                f"once {count} running job(s) reach their time limits (an upper bound)",
            )
    if waits:
        return result(
            median,
            f"{free_total} GPUs free, {len(ahead)} job(s) pending ahead; no time limits to project from: "
            f"median of {len(waits)} recent waits",
        )
    return result(
        None,
        f"{free_total} GPUs free, {len(ahead)} job(s) pending ahead, and neither time limits nor recent waits "
        "to estimate from",
    )
