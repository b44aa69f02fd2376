"""How two environments run a workload's steps differently: the rows of the comparison report (pure)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from infra.workload.model import InputOverride, Step, Workload
from infra.workload.options import option_values
from infra.workload.render import render_step


@dataclass(frozen=True)
class StepDifference:
    """One way two environments run a step differently; `None` means absent on that side."""

    step: str
    kind: str  # "arg", "resources", "env" or "data"
    key: str
    value_a: str | None
    value_b: str | None
    reason: str  # the overrides' reasons, joined


def _show_option(values: tuple[str, ...] | None) -> str | None:
    if values is None:
        return None
    return " ".join(values) if values else "(flag)"


def step_differences(
    workload: Workload, environment_a: str, environment_b: str
) -> tuple[StepDifference, ...]:
    """Every difference between two environments' rendered steps, in step order, for the report."""
    differences: list[StepDifference] = []
    for step in workload.steps:
        a = render_step(workload, step.name, environment_a)
        b = render_step(workload, step.name, environment_b)
        reason = "; ".join(
            f"{r.environment}: {r.override_reason}" for r in (a, b) if r.override_reason is not None
        )
        if a.argv[: len(step.command)] != b.argv[: len(step.command)]:
            differences.append(
                StepDifference(step.name, "arg", "(command)", shlex.join(a.argv), shlex.join(b.argv), reason)
            )
        options_a = option_values(a.argv[len(step.command) :])
        options_b = option_values(b.argv[len(step.command) :])
        for option in list(options_a) + [o for o in options_b if o not in options_a]:
            value_a, value_b = options_a.get(option), options_b.get(option)
            if value_a != value_b:
                differences.append(
                    StepDifference(
                        step.name,
                        "arg",
                        option or "(positional)",
                        _show_option(value_a),
                        _show_option(value_b),
                        reason,
                    )
                )
        for field in ("nodes", "gpus_per_node", "cpus_per_task", "memory_bytes", "walltime_seconds"):
            value_a, value_b = getattr(a.resources, field), getattr(b.resources, field)
            if value_a != value_b:
                differences.append(
                    StepDifference(step.name, "resources", field, str(value_a), str(value_b), reason)
                )
        env_a, env_b = dict(a.env), dict(b.env)
        for name in sorted(set(env_a) | set(env_b)):
            if env_a.get(name) != env_b.get(name):
                differences.append(
                    StepDifference(step.name, "env", name, env_a.get(name), env_b.get(name), reason)
                )
        data_a, data_b = _data_of(workload, environment_a, step), _data_of(workload, environment_b, step)
        for name in step.inputs:
            if data_a.get(name) != data_b.get(name):
                shown_a, shown_b = _show_data(workload, name, data_a), _show_data(workload, name, data_b)
                differences.append(StepDifference(step.name, "data", name, shown_a, shown_b, reason))
    return tuple(differences)


def _data_of(workload: Workload, environment: str, step: Step) -> dict[str, InputOverride]:
    override = workload.override(environment, step.name)
    return dict(override.data) if override is not None else {}


def _show_data(workload: Workload, name: str, data: dict[str, InputOverride]) -> str:
    if name in data:
        return f"{data[name].images} images made by {data[name].made_by}"
    path = next((d for d in workload.data if d.name == name), None)
    return f"{path.path} as defined ({path.description})" if path is not None else "as defined"

