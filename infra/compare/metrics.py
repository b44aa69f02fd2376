"""Compute every metric from the collected records, into the Report dataclasses: the renderers only format.

Each number is a `Value` with its unit and its source; a value that could not be measured
carries `None` and the reason; values from KWOK-simulated nodes are flagged `simulated`;
cost parameters that are assumptions and scaling projections say so (`kind`).

This module builds the Report; each dimension is computed in its own module: step_metrics.py
(steps, elasticity), performance.py, economics.py, data_access.py, scalability.py,
comparability.py, sweeps.py (each swept step).
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence

from infra.compare.comparability import comparability
from infra.compare.costs import CostProfile, RateTable
from infra.compare.data_access import data_access
from infra.compare.economics import cost_parameters, economics
from infra.compare.performance import performance
from infra.compare.records import EnvironmentRecords, Missing
from infra.compare.report_model import MOCK_GPUS_UNPRICED, EnvironmentMetrics, Report, StepMetrics, Value
from infra.compare.runtimes import what_ran_where
from infra.compare.scalability import scalability
from infra.compare.step_metrics import elasticity, step_metrics
from infra.compare.sweeps import sweep_metrics


def environment_metrics(
    records: EnvironmentRecords, profiles: Mapping[str, CostProfile], rates: RateTable
) -> EnvironmentMetrics:
    if isinstance(records.steps, Missing):
        steps: tuple[StepMetrics, ...] = ()
        steps_reason = records.steps.reason
    else:
        steps = tuple(
            step_metrics(s, records.gpus if s.step == records.measured_step else None) for s in records.steps
        )
        steps_reason = ""
    perf = performance(records, steps, steps_reason)
    simulated = any(s.simulated for s in steps) or any(n.simulated for n in records.nodes)
    return EnvironmentMetrics(
        name=records.name,
        kind=records.kind,
        platform=records.platform,
        simulated=simulated,
        provenance=records.provenance,
        steps=steps,
        steps_reason=steps_reason,
        elasticity=elasticity(steps, steps_reason, records.measured_step),
        performance=perf,
        economics=economics(
            profiles.get(records.cost_profile), steps, perf.iterations, rates, records.cloud_rate, steps_reason,
            unpriced=MOCK_GPUS_UNPRICED if records.gpu_mock else "",
        ),
        data_access=data_access(records),
        scalability=scalability(records.gpus, perf.images_per_s),
        notes=records.notes,
        sweeps=tuple(sweep_metrics(record) for record in records.sweeps),
    )


def build_report(
    environments: Sequence[EnvironmentRecords],
    profiles: Mapping[str, CostProfile],
    rates: RateTable,
    run: Mapping[str, str],
    now: dt.datetime | None = None,
) -> Report:
    metrics = tuple(environment_metrics(e, profiles, rates) for e in environments)
    used = sorted({e.cost_profile for e in environments if e.cost_profile})
    per_hour = tuple(
        (
            name,
            Value(
                profiles[name].usd_per_gpu_hour(),
                "USD/GPU-h",
                f"on-premises cost model, profile {name!r}",
                "annual cost / GPU-hours a year",
                "computed",
            ),
        )
        for name in used
        if name in profiles
    )
    notes = [
        f"{m.name}: {m.steps_reason}; no figure of a run is given for it."
        for m in metrics
        if m.steps_reason.startswith("not executed")
    ]
    if any(m.simulated for m in metrics):
        notes.append(
            "Figures marked (simulated) come from KWOK-simulated nodes: no container ran there; the times "
            "are the API's and the simulator's, not a workload's."
        )
    stamp = (now or dt.datetime.now(dt.UTC)).isoformat(timespec="seconds").replace("+00:00", "Z")
    title = f"Atlas comparison: {run.get('workload', 'workload')} on {', '.join(m.name for m in metrics)}"
    return Report(
        title,
        stamp,
        dict(run),
        metrics,
        comparability(environments),
        cost_parameters(profiles, used),
        per_hour,
        rates,
        tuple(notes),
        what_ran_where(environments, run.get("stack", "")),
    )


def finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)
