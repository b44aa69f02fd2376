"""Economics: what a run cost, from its GPU-hours and the on-premises cost model or a dated cloud rate.

Also the cost model's parameters as the report lists them, each with where its value came from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from infra.compare.costs import CostProfile, RateTable
from infra.compare.report_model import CostParameter, Economics, StepMetrics, Value, missing


def economics(
    profile: CostProfile | None,
    steps: Sequence[StepMetrics],
    iterations: Value,
    rates: RateTable,
    cloud_rate: str = "",
    steps_reason: str = "",
    unpriced: str = "",
) -> Economics:
    """`unpriced`: why the GPUs are not priced (mock GPUs: no GPU behind them, nothing to pay for);
    the GPU-hours are still counted, every cost then says why it is not given."""
    gpu_seconds = 0.0
    counted = False
    for step in steps:
        gpus = step.gpus_allocated.value if step.gpus_allocated.value is not None else step.gpus_requested.value
        if gpus and step.duration.value is not None:
            gpu_seconds += gpus * step.duration.value
            counted = True
    source = "GPUs x step duration, from the step records"
    simulated = any(s.simulated for s in steps)
    gpu_hours = (
        Value(gpu_seconds / 3600, "GPU-h", source, "", "computed", simulated)
        if counted
        else missing("GPU-h", steps_reason or "not measured: no step with both GPUs and a duration")
    )

    def per_1000(cost: Value) -> Value:
        if cost.value is None or not iterations.value:
            return missing("USD", "not measured: needs the run's cost and its iteration count")
        return Value(
            cost.value / iterations.value * 1000,
            "USD",
            cost.source + "; iterations: " + iterations.source,
            "cost / iterations x 1,000",
            "computed",
            cost.simulated,
        )

    rented = next((r for r in rates.rates if r.name == cloud_rate), None) if cloud_rate else None
    if profile is None and rented is not None:
        # Rented capacity is priced by its dated rate, not by the on-premises model.
        rate = Value(
            rented.per_gpu_hour,
            "USD/GPU-h",
            f"{rates.path} ({rented.source}, read {rented.read_on}; table dated {rates.date})",
            rented.assumption or "",
            "assumption" if rented.assumption else "measured",
        )
        run_cost = (
            Value(rented.per_gpu_hour * gpu_hours.value, "USD", f"{rate.source} x GPU-h", "", rate.kind, simulated)
            if gpu_hours.value is not None
            else missing("USD", gpu_hours.note)
        )
    elif profile is None:
        reason = f"no rate {cloud_rate!r} in {rates.path}" if cloud_rate else "no cost profile for this environment"
        rate = missing("USD/GPU-h", reason)
        run_cost = missing("USD", rate.note)
    else:
        rate = Value(
            profile.usd_per_gpu_hour(),
            "USD/GPU-h",
            f"on-premises cost model, profile {profile.name!r}",
            "annual cost / GPU-hours a year",
            "computed",
        )
        run_cost = (
            Value(rate.value * gpu_hours.value, "USD", f"{rate.source} x GPU-h", "", "computed", simulated)
            if gpu_hours.value is not None and rate.value is not None
            else missing("USD", gpu_hours.note)
        )
    chargeback = []
    for item in rates.rates:
        source = f"{rates.path} ({item.source}, read {item.read_on}; table dated {rates.date})"
        cost = (
            Value(
                item.per_gpu_hour * gpu_hours.value,
                "USD",
                source,
                item.assumption or "",
                "assumption" if item.assumption else "computed",
                simulated,
            )
            if gpu_hours.value is not None
            else missing("USD", gpu_hours.note)
        )
        chargeback.append((item.name, cost, per_1000(cost)))
    if unpriced:
        reason = f"not priced: {unpriced}"
        run_cost = missing("USD", reason)
        chargeback = [(name, missing("USD", reason), missing("USD", reason)) for name, _, _ in chargeback]
    label = profile.name if profile else (f"cloud rate {cloud_rate}" if rented is not None else "")
    return Economics(label, rate, gpu_hours, run_cost, per_1000(run_cost), tuple(chargeback))


def cost_parameters(profiles: Mapping[str, CostProfile], used: Sequence[str]) -> tuple[CostParameter, ...]:
    result = []
    skip = {"name", "description", "assumptions", "overridden"}
    for name in used:
        profile = profiles.get(name)
        if profile is None:
            continue
        assumptions = dict(profile.assumptions)
        for key, value in vars(profile).items():
            if key in skip:
                continue
            origin = "overridden" if key in profile.overridden else assumptions.get(key, "the seed's cost table")
            result.append(CostParameter(name, key, value, origin))
    return tuple(result)
