"""What the monitor reads one environment through, whatever its kind: a source that gives a view
of it now.

Each kind has its source (kube_view.py: watches; hpc_view.py: rate-limited polls over SSH;
aws_view.py: the instances the outputs name), made by the kind's module in `infra.kinds`; the
`Monitor` (build.py) only asks each source for its view. What every view shares lives here:
a step's row from its record (`step_view`), and when a node's GPUs went idle (`IdleTracker`).
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

from infra.compare.records import StepRecord
from infra.hpc.scheduler import Phase
from infra.monitor.estimate import JobShape
from infra.monitor.model import IDLE_PERCENT, EnvironmentView, LiveReading, StepView
from infra.monitor.reasons import ENDED, NOT_STARTED, telemetry_cells


@dataclass
class IdleTracker:
    """When each node's allocated GPUs were first seen below `idle_percent` (what use shows, not
    what requests say), kept across snapshots."""

    idle_percent: float = IDLE_PERCENT
    # (environment, node) -> when its GPUs were first seen below the idle threshold
    since: dict[tuple[str, str], float] = field(default_factory=dict)

    def track(self, env: str, node: str, util: float | None, allocated: int, now: float) -> float | None:
        key = (env, node)
        if util is None or not allocated or util >= self.idle_percent:
            self.since.pop(key, None)
            return None
        return self.since.setdefault(key, now)


@dataclass
class ViewContext:
    """What every source's view is computed with, besides its own reads."""

    shape: JobShape | None  # the workload's largest step, for the wait estimate
    idle: IdleTracker = field(default_factory=IdleTracker)
    # The step whose training log gives it/s, and whether the workload writes one (the stack's
    # `atlas.report` output: infra.compare.contract).
    measured_step: str = "train"
    training_log: bool = True


class EnvironmentSource(ABC):
    """One environment of the stack as the monitor reads it."""

    name: str

    def start(self, watch: bool) -> None:  # noqa: B027 (a source with nothing to start keeps this)
        """Begin reading: follow watches (`watch`), or read once for a single snapshot."""

    @abstractmethod
    def view(self, now: float, context: ViewContext) -> EnvironmentView:
        """The environment now; never a request of its own sooner than the source's interval."""

    def close(self) -> None:  # noqa: B027 (a source holding nothing keeps this)
        """Stop watches and threads."""


class ErrorSource(EnvironmentSource):
    """An environment the monitor cannot read (no credentials for it): its view says why."""

    def __init__(self, name: str, kind: str, platform: str, error: str) -> None:
        self.name, self.kind, self.platform, self.error = name, kind, platform, error

    def view(self, now: float, context: ViewContext) -> EnvironmentView:
        return error_view(self.name, self.kind, self.platform, self.error)


def error_view(name: str, kind: str, platform: str, error: str) -> EnvironmentView:
    return EnvironmentView(
        name=name, kind=kind, platform=platform, steps=(), nodes=(), polled_at=None, source="", error=error
    )


def finite(values: Sequence[float]) -> list[float]:
    return [v for v in values if not math.isnan(v)]


def step_view(record: StepRecord, phase: Phase, now: float, live: LiveReading | None = None) -> StepView:
    """One step's row: its times from the record, its last telemetry and rate where the source
    read any, and why each live cell is empty where it did not (infra.monitor.reasons)."""
    live = live or LiveReading()
    started = record.scheduled_at if record.scheduled_at is not None else record.started_at
    run_from = record.started_at if record.started_at is not None else record.scheduled_at
    elapsed = None
    if run_from is not None:
        elapsed = max(0.0, (record.finished_at if record.finished_at is not None else now) - run_from)
    wait = None
    if record.requested_at is not None:
        if started is not None:
            wait = max(0.0, started - record.requested_at)
        elif not phase.finished:
            wait = max(0.0, now - record.requested_at)
    cpu, memory, gpu, reasons = telemetry_cells(phase, live)
    rate = live.iterations_per_s if phase is Phase.RUNNING else None
    if rate is None and not reasons.iterations_per_s:
        reasons = dataclasses.replace(reasons, iterations_per_s=_phase_reason(phase) or "not read")
    return StepView(
        name=record.step,
        job=record.job,
        phase=phase.value,
        native_state=record.state,
        node=record.node,
        requested_at=record.requested_at,
        started_at=run_from,
        finished_at=record.finished_at,
        elapsed_s=elapsed,
        queue_wait_s=wait,
        reason=record.pending_reason,
        gpus=record.gpus_allocated if record.gpus_allocated is not None else record.gpus_requested,
        iterations_per_s=rate,
        cpu_percent=cpu,
        memory_bytes=memory,
        gpu_util_percent=gpu,
        reasons=reasons,
    )


def _phase_reason(phase: Phase) -> str:
    return NOT_STARTED if phase is Phase.PENDING else ENDED if phase.finished else ""
