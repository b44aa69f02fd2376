"""A workload's steps as one environment runs them (pure).

One definition serves every environment: the Kubernetes side renders each step into a Job
container's `args` (list form, so the image's entrypoint still runs first), the HPC side
into one line of a job script (`shlex`-quoted). Both call `render_step`, so both run the
same arguments unless the definition's `overrides` say otherwise, and every override shows
up in `differences.step_differences`, which the comparison report prints.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from infra.workload.model import Resources, StepOverride, Workload
from infra.workload.options import split_options


def _apply_args(args: tuple[str, ...], override: StepOverride) -> tuple[str, ...]:
    removed = set(override.remove_args)
    pending = dict(override.set_args)
    result: list[str] = []
    for use in split_options(args):
        if use.option in removed:
            continue
        if use.option and use.option in dict(override.set_args):
            # A set option takes the place of its first occurrence; later repeats go.
            if use.option in pending:
                result.extend((use.option, *pending.pop(use.option)))
            continue
        result.extend(use.tokens)
    for option, values in pending.items():
        result.extend((option, *values))
    return tuple(result)


@dataclass(frozen=True)
class RenderedStep:
    """One step as one environment runs it."""

    environment: str
    name: str
    argv: tuple[str, ...]
    resources: Resources
    env: tuple[tuple[str, str], ...]
    override_reason: str | None  # None: exactly as defined


def render_step(workload: Workload, step_name: str, environment: str) -> RenderedStep:
    step = workload.step(step_name)
    override = workload.override(environment, step_name)
    if override is None:
        return RenderedStep(environment, step.name, step.command + step.args, step.resources, step.env, None)
    env = tuple(sorted({**dict(step.env), **dict(override.env)}.items()))
    return RenderedStep(
        environment,
        step.name,
        step.command + _apply_args(step.args, override),
        override.resources or step.resources,
        env,
        override.reason,
    )


def render_steps(workload: Workload, environment: str) -> tuple[RenderedStep, ...]:
    return tuple(render_step(workload, step.name, environment) for step in workload.steps)


def requested_gpus(workload: Workload, environment: str) -> int:
    """The GPUs the workload asks for in `environment`: its largest step's total (the steps run
    one after another, so that is the most it holds at once). Every kind's outputs report this
    one figure as `gpus_requested`; what a node or instance has is a field of its own."""
    return max((s.resources.total_gpus for s in render_steps(workload, environment)), default=0)


def kubernetes_args(rendered: RenderedStep) -> list[str]:
    """The Job container's `args` (not `command`, which would replace the image's entrypoint)."""
    return list(rendered.argv)


def hpc_command_line(rendered: RenderedStep) -> str:
    """One line of a job script: every token quoted, so the shell expands nothing in it."""
    return shlex.join(rendered.argv)


def hpc_env_lines(rendered: RenderedStep) -> list[str]:
    return [f"export {name}={shlex.quote(value)}" for name, value in rendered.env]


def with_sampler(
    argv: Sequence[str], out: str, interval_seconds: float, python: str = "python3"
) -> tuple[str, ...]:
    """Wrap a step's argv in the telemetry sampler, which runs it as its child."""
    return (
        python,
        "-m",
        "infra.telemetry.sampler",
        "--out",
        out,
        "--interval",
        f"{interval_seconds:g}",
        "--",
        *argv,
    )


def entrypoint_sampled(argv: Sequence[str], out: str, interval_seconds: float, step: str) -> tuple[str, ...]:
    """A step's argv as Atlas's entrypoint takes it in an image Atlas did not build
    (infra/telemetry/entrypoint.sh): `--sample OUT INTERVAL STEP -- argv`; the entrypoint runs the
    sampler under the image's python3, or the argv alone where there is none."""
    return ("--sample", out, f"{interval_seconds:g}", step, "--", *argv)


def telemetry_file(workload: Workload, step: str) -> str:
    """Where a step's sampler writes, relative to the run's directory: `<telemetry>/<step>.jsonl`
    (the same on every side; the report reads it there)."""
    return f"{workload.telemetry.root}/{step}.jsonl"


def sampled_argv(
    workload: Workload,
    rendered: RenderedStep,
    interval_seconds: float | None = None,
    *,
    program: Sequence[str] | None = None,
    telemetry_out: str | None = None,
) -> tuple[str, ...]:
    """A step's argv wrapped by the sampler as a Job's container runs it (infra/openshift/manifests/step_jobs.py):
    `python3 -m infra.telemetry.sampler --out <telemetry>/<step>.jsonl --interval N --step <step> -- argv`.
    `program` and `telemetry_out` replace the step's argv and file (a swept step's Indexed Job)."""
    interval = workload.telemetry.interval_seconds if interval_seconds is None else interval_seconds
    out = telemetry_out or telemetry_file(workload, rendered.name)
    argv = list(with_sampler(rendered.argv if program is None else program, out, interval))
    separator = argv.index("--")
    argv[separator:separator] = ["--step", rendered.name]
    return tuple(argv)


def report_output(workload: Workload) -> dict[str, object]:
    """What the comparison report needs from the definition, as the stack's `atlas.report` output:
    the measured step, whether a BigGAN-style training log is written, the throughput line."""
    throughput = workload.report.throughput if workload.report is not None else None
    return {
        "step": workload.measured_step,
        "training_log": workload.logs.experiment is not None,
        "throughput": (
            {
                # Relative to the run's logs folder: each side reads it there (SFTP, the monitor).
                "file": str(PurePosixPath(throughput.file).relative_to(workload.logs.root)),
                "pattern": throughput.pattern,
                "unit": throughput.unit,
            }
            if throughput is not None
            else None
        ),
    }
