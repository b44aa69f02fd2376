"""A device run's records from the files its driver left (bench/biggan_h200.py): the train
step's speed, the sampler's own cost, the step records and the notes a reader needs. Pure: the
files' text and the manifest in (`infra.compare.device_run` reads the folder), records out.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from infra.compare.records import Missing, StepRecord, TelemetryColumns, step_record
from infra.provenance import DEVICE_RUN, REAL, Fact, label
from infra.telemetry.parsers.biggan_logs import parse_metalog
from infra.telemetry.parsers.console_log import (
    IterationRate,
    RateFromStart,
    biggan_iterations,
    biggan_training_start,
    iteration_rate,
    parse_cri_log,
    rate_from_start,
)
from infra.telemetry.parsers.sampler_jsonl import parse_sampler_jsonl
from infra.workload.differences import step_differences
from infra.workload.model import Workload
from infra.workload.options import last_values

MANIFEST = "atlas-run.json"
FORMAT = "atlas-device-run/1"


def _config_number(config: str, key: str) -> int | None:
    """An int from metalog.txt's printed config dict (`'batch_size': 64`)."""
    marker = f"'{key}': "
    start = config.find(marker)
    if start < 0:
        return None
    digits = ""
    for char in config[start + len(marker) :]:
        if not char.isdigit():
            break
        digits += char
    return int(digits) if digits else None


def images_per_iteration(metalog: str | None) -> tuple[int | None, str]:
    """Real images one G iteration consumes: batch_size x num_D_steps x num_D_accumulations (main.py
    feeds D that many per loader batch), from the config main.py printed into metalog.txt."""
    if not metalog:
        return None, "no metalog.txt"
    config = parse_metalog(metalog).get("config", "")
    parts = {k: _config_number(config, k) for k in ("batch_size", "num_D_steps", "num_D_accumulations")}
    if any(v is None for v in parts.values()):
        return None, f"metalog.txt's config lacks {', '.join(k for k, v in parts.items() if v is None)}"
    batch, steps, accumulations = parts["batch_size"], parts["num_D_steps"], parts["num_D_accumulations"]
    assert batch is not None and steps is not None and accumulations is not None
    basis = f"batch_size {batch} x num_D_steps {steps} x num_D_accumulations {accumulations}"
    return batch * steps * accumulations, basis


def _every(argv: tuple[str, ...] | list[str]) -> tuple[int, ...]:
    """--save_every and --test_every of a train argv: iterations after which main.py pauses."""
    options = last_values(argv)
    return tuple(int(options[name][0]) for name in ("--save_every", "--test_every") if options.get(name))


@dataclass(frozen=True)
class TrainSpeed:
    rate: IterationRate
    images_per_iteration: int | None
    images_basis: str
    source: str
    # From train.py's "Beginning training" line: None where the log has no such line.
    from_start: RateFromStart | None = None

    @property
    def overall_images_per_s(self) -> float | None:
        """From the start of training to the last logged iteration, every pause included."""
        if self.from_start is None or self.images_per_iteration is None:
            return None
        return self.from_start.it_per_s * self.images_per_iteration

    @property
    def logged_window_images_per_s(self) -> float | None:
        """From the first logged iteration to the last: the time before the first `itr:` line left out."""
        if self.rate.overall_it_per_s is None or self.images_per_iteration is None:
            return None
        return self.rate.overall_it_per_s * self.images_per_iteration

    @property
    def steady_images_per_s(self) -> float | None:
        if not self.rate.steady_median_s or self.images_per_iteration is None:
            return None
        return self.images_per_iteration / self.rate.steady_median_s


def train_speed(console: str, metalog: str | None, argv: tuple[str, ...] | list[str], source: str) -> TrainSpeed:
    """The train step's speed from its timestamped console lines (`itr: N, ...`) and metalog.txt."""
    lines = parse_cri_log(console)
    marks = biggan_iterations(lines)
    rate = iteration_rate(marks, every=_every(argv))
    per_iteration, basis = images_per_iteration(metalog)
    return TrainSpeed(rate, per_iteration, basis, source, rate_from_start(biggan_training_start(lines), marks))


def sampler_cost(jsonl: str, wall: Mapping[str, Any], workload_interval_s: float) -> dict[str, Any]:
    """The sampler's cost per sample, from the CPU time it writes into every sample (its own, since it
    started): the difference between its first and last sample leaves start-up out, so a sample's cost
    can be scaled to another interval. `wall` is the driver's /proc reading (start-up and children in)."""
    samples = [s for s in parse_sampler_jsonl(jsonl).samples if s.sampler_cpu_s is not None]
    result: dict[str, Any] = {}
    if len(samples) >= 3 and samples[-1].t > samples[0].t:
        first, last = samples[0], samples[-1]
        assert first.sampler_cpu_s is not None and last.sampler_cpu_s is not None
        per_sample_s = (last.sampler_cpu_s - first.sampler_cpu_s) / (len(samples) - 1)
        interval_s = (last.t - first.t) / (len(samples) - 1)
        result = {
            "samples": len(samples),
            "per_sample_ms": 1000 * per_sample_s,
            "mean_interval_s": interval_s,
            "start_up_s": first.sampler_cpu_s - per_sample_s,
            "percent_of_a_core_at_workload_interval": 100 * per_sample_s / workload_interval_s,
            "workload_interval_s": workload_interval_s,
        }
    if wall.get("own_s") is not None and wall.get("wall_s"):
        result["percent_of_a_core_measured"] = 100 * (wall["own_s"] + wall["children_s"]) / wall["wall_s"]
    return result


def device_step_record(
    step: Mapping[str, Any], telemetry: TelemetryColumns | Missing, host: str, run_id: str
) -> StepRecord:
    """One step of the manifest, its times bounded by the sampler's start and end records where written."""
    started = telemetry.start_t if isinstance(telemetry, TelemetryColumns) else None
    finished = telemetry.end_t if isinstance(telemetry, TelemetryColumns) else None
    code = step.get("exit_code")
    state = "Stopped (the driver's time limit)" if step.get("stopped_by_deadline") else (
        "Succeeded" if code == 0 else "Failed"
    )
    return step_record(
        str(step["step"]),
        f"{run_id}/{step['step']}",
        state,
        f"bench/biggan_h200.py's {MANIFEST} and the sampler's start/end records on {host}",
        requested_at=step.get("started_at"),
        scheduled_at=step.get("started_at"),
        # The sampler's start and end records: when the step's own process started and was reaped.
        started_at=started if started is not None else step.get("started_at"),
        finished_at=finished if finished is not None else step.get("finished_at"),
        exit_code=code,
        pending_reason="",
        gpus_requested=step.get("gpus"),
        gpus_allocated=step.get("gpus"),
        node=host,
        simulated=False,
        argv=tuple(step.get("argv", ())),
    )


def device_provenance(machine: Mapping[str, Any], where: str) -> str:
    """What an imported device run is, from its manifest (infra.provenance): a run by the bench's
    driver, not in any environment Atlas builds (no scheduler, no cluster), on the GPUs nvidia-smi
    named on that machine; where it named none, it says so, never "real"."""
    host = machine.get("hostname") or "an unnamed machine"
    gpus = ", ".join(machine.get("gpus") or [])
    what = f"imported from {where}, run by bench/biggan_h200.py on {host}, no scheduler or cluster; "
    what += f"GPUs as nvidia-smi named them: {gpus}" if gpus else "no GPU recorded (nvidia-smi named none)"
    return label(REAL, [Fact(DEVICE_RUN, f"{DEVICE_RUN}: {what}")])


def device_notes(
    manifest: Mapping[str, Any],
    workload: Workload | None,
    speed: TrainSpeed | None,
    costs: Mapping[str, Mapping[str, Any]] | None = None,
) -> tuple[str, ...]:
    """What a reader must know to read this run's numbers: where it ran, what was real, what differs."""
    machine = manifest.get("machine", {})
    gpus = ", ".join(machine.get("gpus", [])) or "not recorded"
    packages = machine.get("packages", {})
    notes = [
        f"Run on the device machine {machine.get('hostname')} (GPUs as nvidia-smi named them: {gpus}; "
        f"{machine.get('cpus')} CPUs): "
        f"BigGAN-PyTorch's own code under PyTorch {packages.get('torch')} (CUDA {packages.get('cuda')}), "
        "each step wrapped by Atlas's entrypoint and sampler as a Job's container runs it.",
        f"Source: {manifest['source'].get('repository')} at {manifest['source'].get('commit')} from "
        f"{manifest['source'].get('origin')}, with {manifest['source'].get('patch', 'no patch')} applied.",
    ]
    weights = manifest.get("inception_weights", {})
    if weights.get("real"):
        notes.append(f"Inception weights: the real file ({weights.get('sha256')}).")
    else:
        notes.append(
            f"IS and FID: not meaningful (weights: {weights.get('weights', 'unknown')}, sha256 "
            f"{weights.get('sha256')}): the real inception_v3_google-1a9a5a14.pth cannot be downloaded here. "
            "They are not reported as scores."
        )
    for name, data in (manifest.get("data") or {}).items():
        notes.append(
            f"Data {name}: {data.get('images')} images of {data.get('size_px')} px in {data.get('classes')} classes, "
            f"made at run time from {data.get('source')} (scikit-learn {data.get('scikit_learn')})."
        )
    if manifest.get("sampler_interval_s") != manifest.get("workload_interval_s"):
        notes.append(
            f"Sampler interval {manifest.get('sampler_interval_s'):g} s (the workload says "
            f"{manifest.get('workload_interval_s'):g} s): the preparation steps last seconds."
        )
    if workload is not None:
        for d in step_differences(workload, "(the definition)", str(manifest.get("environment"))):
            full = d.value_a if d.value_a is not None else "(absent)"
            here = d.value_b if d.value_b is not None else "(absent)"
            notes.append(f"Differs from the full run: {d.step} {d.kind} {d.key}: {full} -> {here}.")
        notes.append(
            "Differs from the seed's run: one GPU with --multiprocessing-distributed and world size 1 (main.py "
            "spawns one worker per visible GPU); the seed's 2-GPU run had two workers, each half the batch."
        )
    if speed is not None and speed.steady_images_per_s is not None:
        notes.append(
            f"Train step, steady state: median {speed.rate.steady_median_s:.4f} s per iteration over "
            f"{speed.rate.steady_intervals} intervals (first 10 iterations and those ending a save or an "
            f"evaluation left out) = {speed.steady_images_per_s:,.0f} images/s ({speed.images_basis} per iteration)."
        )
    if speed is not None and speed.overall_images_per_s is not None and speed.from_start is not None:
        start = speed.from_start
        notes.append(
            f"Train step, overall: {start.it_per_s:.3f} it/s = {speed.overall_images_per_s:,.0f} images/s over "
            f"{start.iterations} iterations in {start.window_s:.1f} s, from the start of training (train.py's "
            f"{start.start_line!r} line) to the last logged iteration, every pause included; the first `itr:` "
            f"line came {start.first_iteration_after_s:.1f} s after the start."
        )
    elif speed is not None and speed.images_per_iteration is not None:
        notes.append("Train step, overall from the start of training: not measured (no 'Beginning training' line).")
    if speed is not None and speed.logged_window_images_per_s is not None and speed.rate.overall_it_per_s is not None:
        notes.append(
            f"Train step between its first and last logged iteration: {speed.rate.overall_it_per_s:.3f} it/s = "
            f"{speed.logged_window_images_per_s:,.0f} images/s ({speed.rate.window_s:.0f} s; the time before the "
            "first `itr:` line not included)."
        )
    if speed is not None and speed.rate.slow:
        slow = speed.rate.slow
        notes.append(
            f"Train step pauses the median hides: {len(slow)} intervals over 5x the median, "
            f"{sum(s for _, s in slow) / len(slow):.1f} s on average, ending iterations "
            f"{', '.join(str(i) for i, _ in slow)}; together {sum(s for _, s in slow):.0f} s of the "
            f"{speed.rate.window_s:.0f} s between the first and last logged iteration."
        )
    for step in manifest.get("steps", []):
        cpu = step.get("sampler_cpu", {})
        if cpu.get("own_s") is not None and cpu.get("wall_s"):
            share = 100 * (cpu["own_s"] + cpu["children_s"]) / cpu["wall_s"]
            cost = (costs or {}).get(step["step"], {})
            scaled = (
                f"; {cost['per_sample_ms']:.1f} ms a sample (its own CPU between first and last sample), so "
                f"{cost['percent_of_a_core_at_workload_interval']:.3f} % at the workload's "
                f"{cost['workload_interval_s']:g} s interval (goal: at most 1 %)"
                if cost.get("per_sample_ms") is not None
                else ""
            )
            notes.append(
                f"Sampler cost during {step['step']}: {cpu['own_s'] + cpu['children_s']:.2f} CPU-s over "
                f"{cpu['wall_s']:.0f} s = {share:.3f} % of one core at the {manifest.get('sampler_interval_s'):g} s "
                f"interval used here, start-up and reaped children included{scaled} ({cpu['source']})."
            )
    return tuple(notes)
