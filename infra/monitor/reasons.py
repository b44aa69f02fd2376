"""Why a step's live cell (it/s, CPU, memory, GPU use) is empty, in the same words on every side.

A source reads what it can (the sampler's last lines, the training log's last records) and says
why where it read nothing; these pure functions turn that, and the step's phase, into a reason
per cell. Every view then shows `- (<reason>)`, never a bare dash: "- (sampler not started yet)"
is not "- (the pod has no telemetry volume)", and neither is 0.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from infra.hpc.scheduler import Phase
from infra.monitor.model import CellReasons, LiveReading, LogTail, StepTelemetry

NOT_STARTED = "not started"
ENDED = "step ended"  # its whole record is the report's (scripts/compare)
UNKNOWN_STATE = "state unknown"
SAMPLER_NOT_STARTED = "sampler not started yet"
SAMPLER_EMPTY = "sampler has written no sample yet"
SIMULATED = "simulated node: no container ran"
SWEPT = "a sweep: one file per point, see its elements"
MOCK_GPU = "mock GPU: no device behind it"
NO_TRAINING_LOG = "the workload writes no training log"
NO_LOG_RECORDS = "no training-log records yet"
ONE_LOG_RECORD = "one training-log record so far: a rate needs two"
STALE_LOG = "the training log's last record is older than this step"


def not_the_logging_step(measured_step: str) -> str:
    return f"the step prints no iteration lines (the training log is {measured_step}'s)"


def iteration_rate(
    step: str,
    phase: Phase,
    started_at: float | None,
    log: LogTail | None,
    measured_step: str,
    training_log: bool,
    swept: bool = False,
) -> tuple[float | None, str]:
    """The step's iterations per second from the log's tail, or why there is none. The training
    log is the measured step's (the workload's `report.step`): no other step's rate is read from it."""
    if phase is Phase.PENDING:
        return None, NOT_STARTED
    if phase.finished:
        return None, ENDED
    if phase is not Phase.RUNNING:
        return None, UNKNOWN_STATE if phase is Phase.UNKNOWN else f"step {phase.value}"
    if not training_log:
        return None, NO_TRAINING_LOG
    if step != measured_step:
        return None, not_the_logging_step(measured_step)
    if swept:
        return None, SWEPT
    if log is None:
        return None, "training log not read"
    if log.unread:
        return None, log.unread
    if log.records == 0:
        return None, NO_LOG_RECORDS
    if log.stamp is not None and started_at is not None and log.stamp < started_at:
        return None, STALE_LOG
    if log.iterations_per_s is None:
        return None, ONE_LOG_RECORD if log.records == 1 else "the last two records have the same time"
    return log.iterations_per_s, ""


def _last(values: Sequence[float]) -> float | None:
    found = [v for v in values if not math.isnan(v)]
    return found[-1] if found else None


def telemetry_cells(
    phase: Phase, live: LiveReading
) -> tuple[float | None, float | None, float | None, CellReasons]:
    """CPU %, resident bytes and GPU use % from the sampler's last readings, and why each is
    empty: the phase first (a step not running has no live use), then what the source said, then
    what the sampler itself recorded as not measured."""
    if phase is Phase.PENDING:
        why = NOT_STARTED
    elif phase.finished and live.telemetry is None:
        why = ENDED
    elif phase is Phase.UNKNOWN and live.telemetry is None:
        why = UNKNOWN_STATE
    else:
        why = "" if live.telemetry is not None else (live.telemetry_reason or "telemetry not read")
    telemetry: StepTelemetry | None = live.telemetry if not why else None
    if telemetry is None or not telemetry.t:
        why = why or SAMPLER_EMPTY
        return None, None, None, CellReasons(live.iterations_reason, why, why, why)
    not_measured = dict(telemetry.not_measured)
    cpu, memory = _last(telemetry.cpu_percent), _last(telemetry.rss_bytes)
    gpu = None if live.gpu_mock else _last(telemetry.gpu_util_percent)
    if live.gpu_mock:
        gpu_why = MOCK_GPU
    elif gpu is None:
        gpu_why = f"not measured: {not_measured.get('gpu') or 'no GPU reading in the samples'}"
    else:
        gpu_why = ""
    return cpu, memory, gpu, CellReasons(
        live.iterations_reason,
        "" if cpu is not None else f"not measured: {not_measured.get('cpu') or 'no CPU reading in the samples'}",
        "" if memory is not None else f"not measured: {not_measured.get('memory') or 'no RSS reading in the samples'}",
        gpu_why,
    )
