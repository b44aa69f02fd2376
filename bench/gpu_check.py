"""GPU check: the sampler's utilization against loads whose busy time CUDA events measure.

The reference is not another NVML reader (nvidia-smi reads the same counters as the sampler,
so agreeing with it proves little): a load on the GPU runs kernels for a chosen share of each
cycle and times each busy stretch with CUDA events, and the truth for a sampler interval is
the share of that interval the GPU spent in those stretches. Phases cross busy fractions
(27, 55, 84 %) with cycle periods shorter (0.1 s) and longer (2.5 s) than the sampler's 1 s
interval, equal to it (1 s: a single instantaneous reading sees the same point of every cycle,
issue 17: on an H200, 0 % read for a 55 % load in 1 s cycles) and one that does not divide it
(0.7 s: each interval holds one or two busy stretches, so single intervals' truths differ and
only the phase's mean can be judged).

    python3 -m bench.gpu_check --out-dir DIR [--phase-seconds 12] [--interval 1]

It runs the load under the real sampler (`python3 -m infra.telemetry.sampler`, NVML), and
beside it reads NVML's instantaneous utilization once an interval, the method the sampler used
before, to show what the mean over NVML's sample buffer changes. For every sampler interval
wholly inside a phase (the first one of each phase left out) it compares the reading with the
truth; the goal is each phase's mean within 2 points of the truth. The JSON (`gpu-check.json`)
holds every interval; the command exits 1 when a phase misses the goal, 2 when the check could
not run.

Needs PyTorch with CUDA and nvidia-ml-py.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.provenance import run_record, write_result  # noqa: E402
from bench.stats import now_utc  # noqa: E402

GOAL_POINTS = 2.0
PERIODS_S = (0.1, 0.7, 1.0, 2.5)  # shorter than, not dividing, equal to and longer than a 1 s interval
BUSY_FRACTIONS = (0.27, 0.55, 0.84)
MATRIX = 8192  # one fp16 matmul of this size is a few milliseconds on a current GPU


@dataclass(frozen=True)
class Phase:
    name: str
    period_s: float
    busy_fraction: float
    start: float  # host time, s
    end: float


@dataclass(frozen=True)
class Interval:
    phase: str
    start: float
    end: float
    truth_percent: float
    reading_percent: float
    method: str
    nvml_samples: int


# -- pure parts -------------------------------------------------------------------------------


def cycle_starts(start: float, period: float, phase_seconds: float) -> list[float]:
    """When each cycle of a phase begins: whole cycles only, so a phase ends on a cycle's end."""
    count = math.floor(phase_seconds / period + 1e-9)
    return [start + k * period for k in range(count)]


def busy_share(start: float, end: float, busy: Sequence[tuple[float, float]]) -> float:
    """Share of [start, end] covered by the busy stretches (sorted, not overlapping)."""
    covered = sum(max(0.0, min(end, b) - max(start, a)) for a, b in busy)
    return covered / (end - start)


def intervals_in_phases(
    readings: Sequence[dict[str, Any]],
    phases: Sequence[Phase],
    busy: Sequence[tuple[float, float]],
    skip_first: int = 1,
) -> list[Interval]:
    """Each reading's interval (from the reading before it) wholly inside a phase, with its truth.

    A reading is {"t": host time, "utilization_percent", "method", "samples"}; the first
    `skip_first` intervals of a phase are left out (the load settling into its cycle).
    """
    out: list[Interval] = []
    seen: dict[str, int] = {}
    for previous, reading in itertools.pairwise(readings):
        start, end = float(previous["t"]), float(reading["t"])
        phase = next((p for p in phases if p.start <= start and end <= p.end), None)
        if phase is None or end <= start:
            continue
        seen[phase.name] = seen.get(phase.name, 0) + 1
        if seen[phase.name] <= skip_first:
            continue
        out.append(
            Interval(
                phase=phase.name,
                start=start,
                end=end,
                truth_percent=100.0 * busy_share(start, end, busy),
                reading_percent=float(reading["utilization_percent"]),
                method=str(reading.get("method", "")),
                nvml_samples=int(reading.get("samples", 0)),
            )
        )
    return out


def summarise(intervals: Sequence[Interval], goal_points: float = GOAL_POINTS) -> dict[str, Any]:
    """Per phase: mean reading against mean truth, and the spread of single intervals."""
    phases: dict[str, Any] = {}
    for name in dict.fromkeys(i.phase for i in intervals):
        rows = [i for i in intervals if i.phase == name]
        errors = sorted(abs(i.reading_percent - i.truth_percent) for i in rows)
        mean_reading = statistics.fmean(i.reading_percent for i in rows)
        mean_truth = statistics.fmean(i.truth_percent for i in rows)
        phases[name] = {
            "intervals": len(rows),
            "mean_reading_percent": round(mean_reading, 2),
            "mean_truth_percent": round(mean_truth, 2),
            "mean_error_points": round(mean_reading - mean_truth, 2),
            "interval_abs_error_median_points": round(statistics.median(errors), 2),
            "interval_abs_error_max_points": round(errors[-1], 2),
            "methods": sorted({i.method for i in rows}),
            "goal_met": abs(mean_reading - mean_truth) <= goal_points,
        }
    return phases


def shifted(result: dict[str, Any], lag_s: float) -> dict[str, Any]:
    """A recorded check read again with each interval's truth taken `lag_s` earlier: how much of a
    phase's error is NVML's samples trailing the host clock (its sample period) rather than the reading."""
    busy = [(float(a), float(b)) for a, b in result["busy_stretches"]]
    intervals = [
        Interval(**{**i, "truth_percent": 100.0 * busy_share(i["start"] - lag_s, i["end"] - lag_s, busy)})
        for i in result["sampler"]["intervals"]
    ]
    return summarise(intervals, float(result.get("goal_points", GOAL_POINTS)))


# -- the load (runs under the sampler) ---------------------------------------------------------


def run_load(out: Path, phase_seconds: float) -> int:
    """Busy/idle cycles on GPU 0, each busy stretch timed with CUDA events; writes out (JSON)."""
    import torch

    device = torch.device("cuda")
    a = torch.randn(MATRIX, MATRIX, device=device, dtype=torch.float16)
    b = torch.randn(MATRIX, MATRIX, device=device, dtype=torch.float16)
    begin, finish = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def busy_for(count: int) -> tuple[float, float]:
        begin.record()
        for _ in range(count):
            torch.mm(a, b)
        finish.record()
        finish.synchronize()
        done = time.time()  # the host wakes within microseconds of the last kernel's end
        elapsed = begin.elapsed_time(finish) / 1000.0
        return done - elapsed, done

    busy_for(20)  # cuBLAS picks its kernels
    stretch = busy_for(50)
    per_matmul_s = (stretch[1] - stretch[0]) / 50
    busy: list[tuple[float, float]] = []
    phases: list[dict[str, Any]] = []
    time.sleep(2.0)  # an idle gap before the first phase
    for period in PERIODS_S:
        for fraction in BUSY_FRACTIONS:
            count = max(1, round(fraction * period / per_matmul_s))
            name = f"{fraction:.0%} busy, {period:g} s cycles"
            start = time.time()
            for cycle_start in cycle_starts(start, period, phase_seconds):
                pause = cycle_start - time.time()
                if pause > 0:
                    time.sleep(pause)
                busy.append(busy_for(count))
            pause = start + len(cycle_starts(start, period, phase_seconds)) * period - time.time()
            if pause > 0:  # the last cycle's idle part belongs to the phase
                time.sleep(pause)
            phases.append(
                {"name": name, "period_s": period, "busy_fraction": fraction, "start": start, "end": time.time()}
            )
            print(f"gpu-check load: {name} done", flush=True)
            time.sleep(1.0)
    out.write_text(json.dumps({"per_matmul_s": per_matmul_s, "phases": phases, "busy": busy}))
    return 0


# -- the check ----------------------------------------------------------------------------------


def _instant_readings(stop: threading.Event, interval: float, into: list[dict[str, Any]]) -> None:
    """NVML's instantaneous utilization once an interval: the method the sampler used before."""
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    due = time.monotonic()
    while not stop.is_set():
        due += interval
        stop.wait(max(0.0, due - time.monotonic()))
        rate = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu
        into.append({"t": time.time(), "utilization_percent": float(rate), "method": "nvml-instant", "samples": 1})
    pynvml.nvmlShutdown()


def _sampler_readings(jsonl: Path) -> list[dict[str, Any]]:
    readings = []
    for line in jsonl.read_text().splitlines():
        record = json.loads(line)
        gpu = record.get("gpu") or {}
        if record.get("type") != "sample" or not gpu.get("measured"):
            continue
        device = gpu["devices"][0]
        readings.append(
            {
                "t": record["t"],
                "utilization_percent": device["utilization_percent"],
                "method": device.get("utilization_method", ""),
                "samples": device.get("utilization_samples", 0),
            }
        )
    return readings


def check(out_dir: Path, phase_seconds: float, interval: float) -> int:
    origin = run_record()
    out_dir.mkdir(parents=True, exist_ok=True)
    telemetry, load_out = out_dir / "gpu-check-telemetry.jsonl", out_dir / "gpu-check-load.json"
    telemetry.unlink(missing_ok=True)
    instant: list[dict[str, Any]] = []
    stop = threading.Event()
    poller = threading.Thread(target=_instant_readings, args=(stop, interval, instant), daemon=True)
    poller.start()
    started = time.monotonic()
    command = [
        sys.executable, "-m", "infra.telemetry.sampler", "--out", str(telemetry), "--interval", str(interval),
        "--gpu", "nvml", "--step", "gpu-check", "--",
        sys.executable, "-m", "bench.gpu_check", "load", "--out", str(load_out), "--phase-seconds", str(phase_seconds),
    ]  # fmt: skip
    print(f"gpu-check: {len(PERIODS_S) * len(BUSY_FRACTIONS)} phases of {phase_seconds:g} s under the sampler")
    code = subprocess.run(command, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}).returncode
    stop.set()
    poller.join(timeout=5)
    print(f"gpu-check: load exited {code} after {time.monotonic() - started:.0f} s")
    if code != 0 or not load_out.exists():
        return 2
    load = json.loads(load_out.read_text())
    phases = [Phase(**p) for p in load["phases"]]
    busy = [tuple(b) for b in load["busy"]]
    sampled = intervals_in_phases(_sampler_readings(telemetry), phases, busy)
    instantly = intervals_in_phases(instant, phases, busy)
    summary = summarise(sampled)
    import torch

    result = {
        "bench": "gpu_check",
        "date_utc": now_utc(),
        **origin,
        "gpu": torch.cuda.get_device_name(0),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "interval_s": interval,
        "phase_seconds": phase_seconds,
        "goal_points": GOAL_POINTS,
        "reference": "CUDA events around each busy stretch (torch.cuda.Event, elapsed_time)",
        "per_matmul_s": load["per_matmul_s"],
        "phases": [asdict(p) for p in phases],
        "sampler": {"summary": summary, "intervals": [asdict(i) for i in sampled]},
        "instant_nvml": {"summary": summarise(instantly), "intervals": [asdict(i) for i in instantly]},
        "busy_stretches": busy,
        "goal_met": bool(summary) and all(p["goal_met"] for p in summary.values()),
    }
    written = write_result(result, out_dir / "gpu-check.json", indent=1)
    print(f"\ngpu-check, {result['gpu']}, interval {interval:g} s (reading - truth, mean of a phase; goal ±2):")
    for name, body in summary.items():
        before = result["instant_nvml"]["summary"].get(name, {})
        print(
            f"  {name:24s} truth {body['mean_truth_percent']:5.1f} %  sampler {body['mean_reading_percent']:5.1f} % "
            f"({body['mean_error_points']:+.1f}; single intervals median |err| "
            f"{body['interval_abs_error_median_points']:.1f})  instant NVML {before.get('mean_reading_percent')} %"
            f"  {'ok' if body['goal_met'] else 'MISSED'}"
        )
    print(f"  wrote {written}")
    return 0 if result["goal_met"] else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command")
    load = sub.add_parser("load", help="the GPU load (run under the sampler by the check)")
    load.add_argument("--out", type=Path, required=True)
    load.add_argument("--phase-seconds", type=float, default=12.0)
    shift = sub.add_parser("shift", help="a recorded check's phases with the truth taken --lag seconds earlier")
    shift.add_argument("file", type=Path)
    shift.add_argument("--lag", type=float, default=0.15)
    parser.add_argument("--out-dir", type=Path, default=Path(os.environ.get("OUT", "bench-results")))
    parser.add_argument("--phase-seconds", type=float, default=12.0)
    parser.add_argument("--interval", type=float, default=1.0)
    args = parser.parse_args(argv)
    if args.command == "shift":
        recorded = json.loads(args.file.read_text())
        for name, now in shifted(recorded, args.lag).items():
            before = recorded["sampler"]["summary"][name]
            print(f"{name:24s} mean error {before['mean_error_points']:+.2f} -> {now['mean_error_points']:+.2f}; "
                  f"single intervals median |err| {before['interval_abs_error_median_points']:.2f} -> "
                  f"{now['interval_abs_error_median_points']:.2f} (truth {args.lag:g} s earlier)")
        return 0
    if args.command == "load":
        return run_load(args.out, args.phase_seconds)
    return check(args.out_dir, args.phase_seconds, args.interval)


if __name__ == "__main__":
    sys.exit(main())
