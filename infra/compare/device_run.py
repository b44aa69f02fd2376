"""A run of the workload on a lent GPU machine (bench/biggan_h200.py), read back as one environment.

The driver leaves one folder (unpacked from its tarball): `atlas-run.json` (the machine, the
source, the data and weights used, and per step the argv, start, end, exit code and the
sampler's own CPU time), the sampler's `telemetry/<step>.jsonl`, BigGAN's own logs
(`logs/<exp>_log.jsonl`, `logs/<exp>/G_loss.log`, `metalog.txt`) and each step's console output
in CRI format (`logs/<step>.console.log`, every line timestamped as it arrived). Everything here
reads those files with Atlas's parsers (and `infra.compare.device_records`); nothing is measured anew.

`scripts/compare --import <folder>` recognises such a folder by its `atlas-run.json`.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

from infra.compare.device_records import (
    FORMAT,
    MANIFEST,
    device_notes,
    device_provenance,
    device_step_record,
    sampler_cost,
    train_speed,
)
from infra.compare.iteration_timing import parse_timing, profile_kernel_seconds, timing_report
from infra.compare.records import EnvironmentRecords, Missing, TelemetryColumns, TrainingLog
from infra.compare.telemetry import load_sampler_telemetry
from infra.compare.training import training_log_from_text
from infra.telemetry.columns import columns_path
from infra.telemetry.parsers import ParseError
from infra.telemetry.parsers.console_log import biggan_iterations, parse_cri_log
from infra.workload.model import Workload


def is_device_run(folder: Path) -> bool:
    return (folder / MANIFEST).is_file()


def load_manifest(folder: Path) -> dict[str, Any]:
    manifest = json.loads((folder / MANIFEST).read_text())
    if manifest.get("format") != FORMAT:
        raise ValueError(f"{folder / MANIFEST}: format {manifest.get('format')!r}, expected {FORMAT!r}")
    return dict(manifest)


def _read(path: Path) -> str | None:
    # Bytes, decoded: read_text's universal newlines would turn a progress bar's "\r" into a line break.
    return path.read_bytes().decode("utf-8", errors="replace") if path.is_file() else None


def import_device_run(folder: Path, name: str, workload: Workload | None = None) -> EnvironmentRecords:
    manifest = load_manifest(folder)
    host = str(manifest.get("machine", {}).get("hostname", "device"))
    run_id = str(manifest.get("run_id", ""))
    telemetry: dict[str, TelemetryColumns | Missing] = {}
    costs: dict[str, dict[str, Any]] = {}
    steps = []
    workload_interval = float(manifest.get("workload_interval_s") or 5.0)
    for step in manifest.get("steps", []):
        jsonl = folder / "telemetry" / f"{step['step']}.jsonl"
        if jsonl.is_file():
            costs[step["step"]] = sampler_cost(_read(jsonl) or "", step.get("sampler_cpu", {}), workload_interval)
            columns_file = Path(columns_path(str(jsonl)))
            telemetry[step["step"]] = load_sampler_telemetry(
                jsonl, f"the sampler's telemetry/{step['step']}.jsonl on {host}", columns_file
            )
        else:
            telemetry[step["step"]] = Missing(f"not measured: no telemetry/{step['step']}.jsonl in {folder}")
        steps.append(device_step_record(step, telemetry[step["step"]], host, run_id))

    experiment = str(manifest.get("experiment", ""))
    logs = folder / "logs"
    train = next((s for s in manifest.get("steps", []) if s["step"] == "train"), None)
    evaluations = _read(logs / f"{experiment}_log.jsonl")
    metalog = _read(logs / experiment / "metalog.txt")
    console = _read(logs / "train.console.log")
    speed = None
    training: TrainingLog | Missing
    if evaluations is None and console is None:
        training = Missing(f"not measured: no {experiment}_log.jsonl nor train console log in {folder}")
    else:
        try:
            training = training_log_from_text(
                f"logs/{experiment}_log.jsonl, {experiment}/G_loss.log and metalog.txt from {host}",
                experiment,
                evaluations or "",
                _read(logs / experiment / "G_loss.log"),
                metalog,
                tuple(train["argv"]) if train else None,
            )
            if console is not None and train is not None:
                speed = train_speed(console, metalog, train["argv"], f"logs/train.console.log from {host}")
                training = replace(
                    training,
                    iteration_marks=tuple((m.itr, m.t) for m in biggan_iterations(parse_cri_log(console))),
                    images_per_iteration=speed.images_per_iteration,
                    images_basis=speed.images_basis,
                    marks_source=speed.source + " (CRI timestamps: when each `itr: N` line arrived)",
                )
        except ParseError as error:
            training = Missing(f"not measured: BigGAN's logs from {host} do not parse ({error})")
    machine = manifest.get("machine", {})
    gpu_names = machine.get("gpus", [])
    product = gpu_names[0].split(",")[0].strip() if gpu_names else None
    gpus = train.get("gpus") if train else None
    return EnvironmentRecords(
        name=name,
        kind="device",
        platform=f"{product} x{gpus}, run on the device machine" if product else "no GPU recorded, run on the "
        "device machine",
        provenance=device_provenance(machine, str(folder)),
        gpus=gpus,
        gpu_product=product,
        steps=tuple(steps),
        telemetry=telemetry,
        training=training,
        staging=Missing("not applicable: the driver made the data on the machine (see notes)"),
        notes=device_notes(manifest, workload, speed, costs),
        cost_profile="",
        run={
            "workload": str(manifest.get("workload")),
            "run_id": run_id,
            "environment": str(manifest.get("environment")),
        },
    )


def run_provenance(manifest: dict[str, Any]) -> dict[str, Any]:
    """The commit, machine and command line the driver recorded on the device machine
    (bench/provenance.py's keys); a manifest from before it records only the machine."""
    recorded = "commit" in manifest
    return {
        "commit": manifest.get("commit"),
        "tree_dirty": manifest.get("tree_dirty"),
        "changed_paths": manifest.get("changed_paths", []),
        "commit_source": manifest.get("commit_source")
        if recorded
        else f"not recorded: the driver's {MANIFEST} has no commit (a run from before bench/provenance.py)",
        "machine": manifest.get("machine"),
        "command_line": manifest.get("command_line"),
    }


def bench_result(folder: Path, workload: Workload | None = None) -> dict[str, Any]:
    """The benchmark's raw JSON: images/s of the train step, GPU use, step times, the sampler's cost."""
    manifest = load_manifest(folder)
    records = import_device_run(folder, str(manifest.get("environment")), workload)
    steps = []
    for record in records.steps if not isinstance(records.steps, Missing) else ():
        columns = records.telemetry.get(record.step)
        entry: dict[str, Any] = {
            "step": record.step,
            "state": record.state,
            "exit_code": record.exit_code,
            "duration_s": (record.finished_at - record.started_at)
            if record.finished_at is not None and record.started_at is not None
            else None,
        }
        if isinstance(columns, TelemetryColumns) and columns.rows:
            util = [float(v) for v in columns.gpu_utilization_percent if v == v]
            memory = [float(v) for v in columns.gpu_memory_used_bytes if v == v]
            entry.update(
                samples=columns.rows,
                gpu_utilization_percent_mean=statistics.fmean(util) if util else None,
                gpu_utilization_percent_samples=util,
                gpu_memory_used_bytes_peak=max(memory) if memory else None,
                not_measured=dict(columns.not_measured),
            )
        raw = next(s for s in manifest["steps"] if s["step"] == record.step)
        cpu = raw.get("sampler_cpu", {})
        if cpu.get("own_s") is not None and cpu.get("wall_s"):
            entry["sampler"] = {
                **cpu,
                "percent_of_a_core": 100 * (cpu["own_s"] + cpu["children_s"]) / cpu["wall_s"],
                "interval_s": manifest.get("sampler_interval_s"),
            }
        jsonl = _read(folder / "telemetry" / f"{record.step}.jsonl")
        if jsonl is not None:
            entry.setdefault("sampler", {}).update(
                sampler_cost(jsonl, cpu, float(manifest.get("workload_interval_s") or 5.0))
            )
        steps.append(entry)
    training = records.training
    speed: dict[str, Any] = {}
    if isinstance(training, TrainingLog) and training.iteration_marks:
        console = _read(folder / "logs" / "train.console.log") or ""
        metalog = _read(folder / "logs" / training.experiment / "metalog.txt")
        argv = next(s["argv"] for s in manifest["steps"] if s["step"] == "train")
        measured = train_speed(console, metalog, argv, "logs/train.console.log")
        start = measured.from_start
        speed = {
            "images_per_iteration": measured.images_per_iteration,
            "images_basis": measured.images_basis,
            "iterations_logged": measured.rate.iterations,
            # Overall: from the start of training (train.py's line before its epoch loop) to the last
            # logged iteration; the first epoch's wait for its data and the first iterations count.
            "overall_window_start": f"train.py's {start.start_line!r} line" if start else None,
            "overall_window_start_t": start.start_t if start else None,
            "overall_window_s": start.window_s if start else None,
            "overall_iterations": start.iterations if start else None,
            "overall_it_per_s": start.it_per_s if start else None,
            "overall_images_per_s": measured.overall_images_per_s,
            "first_iteration_after_start_s": start.first_iteration_after_s if start else None,
            # Between the first and last logged iteration: what the time before the first `itr:` line hides.
            "logged_window_s": measured.rate.window_s,
            "logged_it_per_s": measured.rate.overall_it_per_s,
            "logged_window_images_per_s": measured.logged_window_images_per_s,
            "steady_median_s_per_iteration": measured.rate.steady_median_s,
            "steady_intervals": measured.rate.steady_intervals,
            "steady_images_per_s": measured.steady_images_per_s,
            "left_out_iterations": list(measured.rate.skipped),
            "slow_intervals_over_5x_median": [[itr, seconds] for itr, seconds in measured.rate.slow],
            "iteration_marks": [[itr, t] for itr, t in training.iteration_marks],
        }
    return {
        "bench": "bench/biggan_h200.py (BigGAN-PyTorch's three steps at the workload's "
        f"{manifest.get('environment')} scale)",
        **run_provenance(manifest),
        "run_id": manifest.get("run_id"),
        "environment": manifest.get("environment"),
        "source": manifest.get("source"),
        "sampler_goal_percent_of_a_core": 1.0,
        "train_speed": speed,
        "data_files": manifest.get("data_files"),
        "data": manifest.get("data"),
        **iteration_records(folder, manifest, records, speed.get("images_per_iteration")),
        "steps": steps,
        "notes": list(records.notes),
    }


def iteration_records(
    folder: Path, manifest: dict[str, Any], records: EnvironmentRecords, images: int | None
) -> dict[str, Any]:
    """The patch's per-iteration timing (reason 7) against the sampler's GPU utilization, and the
    profile torch.profiler wrote where the run asked for one; empty for a run from before them."""
    experiment = str(manifest.get("experiment", ""))
    text = _read(folder / "logs" / experiment / "timing.jsonl")
    if text is None:
        return {}
    columns = records.telemetry.get("train")
    samples = (
        list(zip(columns.t.tolist(), columns.gpu_utilization_percent.tolist(), strict=True))
        if isinstance(columns, TelemetryColumns)
        else []
    )
    result: dict[str, Any] = {"iteration_timing": timing_report(parse_timing(text), images, samples)}
    profile = _read(folder / "logs" / experiment / "profile.json")
    if profile is not None:
        summary = json.loads(profile)
        kernels = profile_kernel_seconds(_read(folder / "logs" / experiment / "profile.txt") or "")
        result["profile"] = {
            "source": f"logs/{experiment}/profile.json and profile.txt (torch.profiler, reason 7)",
            "iters_env": manifest.get("profile_iters"),
            **summary,
            # profile.txt's own total; profile.json's gpu_self_time_s counted user annotations too
            # in runs before the patch left them out (2026-12-05: DDP.forward's 2.29 s).
            "gpu_kernel_time_s": kernels,
            "gpu_kernel_busy_percent": 100 * kernels / summary["wall_s"] if kernels and summary.get("wall_s") else None,
        }
    return result
