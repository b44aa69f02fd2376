"""Each step's times and GPUs from its record, and elasticity: how long the run waited for its GPUs.

A time the source did not give is `None` with the reason; a wait is computed only from two
recorded times.
"""

from __future__ import annotations

from collections.abc import Sequence

from infra.compare.records import StepRecord
from infra.compare.report_model import Elasticity, StepMetrics, Value, missing


def _at(epoch: float | None, source: str, simulated: bool, what: str) -> Value:
    if epoch is None:
        return missing("Unix s", f"not recorded: the source gave no {what}", source)
    return Value(epoch, "Unix s", source, simulated=simulated)


def _between(a: float | None, b: float | None, source: str, simulated: bool, what: str) -> Value:
    if a is None or b is None:
        return missing(
            "s", f"not measured: {what} needs both times, the source gave {'neither' if a is b else 'one'}", source
        )
    return Value(b - a, "s", source, kind="computed", simulated=simulated)


def step_metrics(record: StepRecord, asked_gpus: int | None) -> StepMetrics:
    source, simulated = record.source, record.simulated
    if record.gpus_requested is not None:
        requested = Value(float(record.gpus_requested), "GPUs", source, simulated=simulated)
    elif asked_gpus is not None:
        requested = Value(
            float(asked_gpus),
            "GPUs",
            "stack outputs (`gpus`: what Atlas asked the scheduler for)",
            "the scheduler's record does not show GPUs",
            kind="computed",
        )
    else:
        requested = missing("GPUs", "not recorded by the scheduler", source)
    allocated = (
        Value(float(record.gpus_allocated), "GPUs", source, simulated=simulated)
        if record.gpus_allocated is not None
        else missing("GPUs", "not recorded: the scheduler's record shows no GPU allocation (no gres/TRES)", source)
    )
    return StepMetrics(
        step=record.step,
        job=record.job,
        state=record.state,
        exit_code=record.exit_code,
        requested_at=_at(record.requested_at, source, simulated, "request time"),
        scheduled_at=_at(record.scheduled_at, source, simulated, "scheduling time"),
        started_at=_at(record.started_at, source, simulated, "start time"),
        finished_at=_at(record.finished_at, source, simulated, "finish time"),
        queue_wait=_between(record.requested_at, record.started_at, source, simulated, "queue wait"),
        duration=_between(record.started_at, record.finished_at, source, simulated, "duration"),
        gpus_requested=requested,
        gpus_allocated=allocated,
        pending_reason=record.pending_reason,
        node=record.node,
        simulated=simulated,
    )


def gpu_step(steps: Sequence[StepMetrics], measured_step: str = "train") -> StepMetrics | None:
    """The step whose GPUs the run waited for: the first that asked for any, else the measured step."""
    return next((s for s in steps if (s.gpus_requested.value or 0) > 0), None) or next(
        (s for s in steps if s.step == measured_step), None
    )


def elasticity(steps: Sequence[StepMetrics], reason: str, measured_step: str = "train") -> Elasticity:
    if not steps:
        nothing = missing("s", reason)
        return Elasticity(nothing, nothing, nothing, nothing, ())
    gpu = gpu_step(steps, measured_step)
    first = min((s.requested_at.value for s in steps if s.requested_at.value is not None), default=None)
    simulated = any(s.simulated for s in steps)
    if gpu is None:
        request_to_gpus = missing("s", "no step asked for GPUs")
        add = missing("s", "no step asked for GPUs")
        gpu_wait = missing("s", "no step asked for GPUs")
    else:
        request_to_gpus = _between(
            first, gpu.started_at.value, gpu.started_at.source, simulated, "request to GPUs running"
        )
        gpu_wait = gpu.queue_wait
        # GPUs were wanted once the GPU step could run: its request, or the end of the step before it
        # (the schedulers hold a dependent job until then), whichever came later.
        index = list(steps).index(gpu)
        before = steps[index - 1].finished_at.value if index > 0 else None
        wanted = (
            max(v for v in (gpu.requested_at.value, before) if v is not None)
            if (gpu.requested_at.value is not None or before is not None)
            else None
        )
        add = _between(
            wanted,
            gpu.started_at.value,
            gpu.started_at.source,
            simulated,
            "time to add GPUs (GPU step eligible to started)",
        )
        if add.value is not None and add.value < 0:
            add = Value(
                0.0,
                "s",
                add.source,
                "started before the previous step's recorded end (1 s clock)",
                "computed",
                simulated,
            )
    waits = [s.queue_wait.value for s in steps if s.queue_wait.value is not None]
    total = (
        Value(
            float(sum(waits)),
            "s",
            steps[0].queue_wait.source,
            "sum over steps; includes waiting on the step before (dependencies)",
            "computed",
            simulated,
        )
        if waits
        else missing("s", "no queue waits")
    )
    reasons = tuple(sorted({f"{s.step}: {s.pending_reason}" for s in steps if s.pending_reason}))
    return Elasticity(request_to_gpus, gpu_wait, add, total, reasons)
