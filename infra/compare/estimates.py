"""Queue-wait estimates made before a run (`scripts/nodes --estimate`), beside the measured wait.

The measured wait it is compared with is the GPU step's time from eligible to running (its
dependencies done): the estimate is for a job that could start at once.

The estimate file (`.state/estimates/<stack>.json`, infra/cli/nodes.py) holds one estimate per
environment and when it was made. Put beside the GPU step's measured queue wait, the report
shows how far off it was. An estimate made after the GPU step was requested is no forecast,
and says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from infra.compare.report_model import EnvironmentMetrics, Value, missing
from infra.compare.step_metrics import gpu_step
from infra.timeparse import iso_text


def with_estimates(
    environments: Sequence[EnvironmentMetrics], record: Mapping[str, Any] | None, run: Mapping[str, str]
) -> tuple[EnvironmentMetrics, ...]:
    """Each environment's elasticity with the estimate made for it, and the estimate's error."""
    if not record:
        return tuple(environments)
    if run.get("stack") and record.get("stack") and record["stack"] != run["stack"]:
        reason = f"the estimate file is for stack {record['stack']!r}, this report for {run['stack']!r}"
        return tuple(_set(e, missing("s", reason), missing("s", reason)) for e in environments)
    taken_at = float(record.get("taken_at") or 0.0)
    source = f"scripts/nodes --estimate at {iso_text(taken_at)}" if taken_at else "scripts/nodes --estimate"
    result = []
    for env in environments:
        estimate = (record.get("environments") or {}).get(env.name)
        if not isinstance(estimate, Mapping):
            result.append(
                _set(
                    env,
                    missing("s", "no estimate was made for this environment"),
                    missing("s", "no estimate to compare with"),
                )
            )
            continue
        seconds = estimate.get("seconds")
        basis = str(estimate.get("basis", ""))
        if seconds is None:
            reason = f"not estimable then: {basis}"
            result.append(_set(env, missing("s", reason, source), missing("s", reason)))
            continue
        gpu = gpu_step(env.steps)
        requested = gpu.requested_at.value if gpu is not None else None
        forecast = requested is None or taken_at <= requested
        note = (
            basis
            if forecast
            else f"made {taken_at - (requested or 0):.0f} s after the step was requested: not a forecast. {basis}"
        )
        estimated = Value(float(seconds), "s", source, note, "projection", env.simulated)
        # The estimate is for a job that could start now: compare it with the GPU step's wait from the
        # moment it could start (its dependencies done), not from its submission.
        measured = env.elasticity.time_to_add_gpus
        if measured.value is None:
            error = missing("s", f"no measured wait: {measured.note}")
        elif measured.simulated:
            # A simulator's wait says nothing of how good the estimate is: no error is scored against it.
            error = missing("s", "not measured: the GPU step's wait was simulated (KWOK), not a scheduler's")
        else:
            error = Value(
                float(seconds) - measured.value,
                "s",
                f"{source}; measured: {measured.source}",
                "positive: the estimate was too long" + ("" if forecast else "; not a forecast"),
                "computed",
                env.simulated or measured.simulated,
            )
        result.append(_set(env, estimated, error))
    return tuple(result)


def _set(env: EnvironmentMetrics, estimated: Value, error: Value) -> EnvironmentMetrics:
    return dataclasses.replace(
        env,
        elasticity=dataclasses.replace(env.elasticity, estimated_gpu_step_wait=estimated, estimate_error=error),
    )
