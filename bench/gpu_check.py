"""GPU check: do the sampler's GPU readings agree with nvidia-smi's own?

Runs the probe's training on the GPU (PyTorch, CUDA) under the sampler at a 1 s interval
while `nvidia-smi --query-gpu=timestamp,index,utilization.gpu,memory.used,memory.total
--format=csv -l 1` records beside it, pairs each sampler reading with nvidia-smi's nearest
row in time (same GPU, at most 0.5 s apart), and reports the differences:

- utilization: sampler minus nvidia-smi, in percentage points (goal: within 2);
- memory used: (sampler - nvidia-smi) / nvidia-smi, in % (goal: within 1 %).

Two phases: `heavy` (wide MLPs, large batches: the GPU busy all the time) and `light`
(small MLPs: launch-bound, so utilization moves within a second and two readers taken at
different instants disagree more; that spread is timing, not measurement error).

    python3 bench/gpu_check.py --out-dir results/ [--heavy-seconds 60 --light-seconds 30]

Needs PyTorch with CUDA, numpy, h5py, scikit-learn and nvidia-ml-py (the sampler falls back
to nvidia-smi without it, and says so in the JSON).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from infra.telemetry.parsers import NvidiaSmiRow, parse_nvidia_smi_csv, parse_sampler_jsonl  # noqa: E402

SMI_QUERY = "timestamp,index,utilization.gpu,memory.used,memory.total"
PHASES = {
    # name: (width, depth, batch size)
    # The digits are 1797 images: a batch of 1024 is one batch per epoch.
    "heavy": (8192, 4, 1024),
    "light": (512, 2, 256),
}
UTILIZATION_GOAL_POINTS = 2.0
MEMORY_GOAL_PERCENT = 1.0
MAX_PAIR_GAP_S = 0.5


def _run(command: list[str], cwd: Path, env: dict[str, str], check: bool = True) -> int:
    print("+", " ".join(command), flush=True)
    return subprocess.run(command, cwd=cwd, env=env, check=check).returncode


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def pair_readings(
    samples_jsonl: str, smi_rows: tuple[NvidiaSmiRow, ...], max_gap_s: float = MAX_PAIR_GAP_S
) -> list[dict[str, Any]]:
    """Each sampler GPU reading with nvidia-smi's nearest row for the same GPU (pure)."""
    by_index: dict[int, list[tuple[float, NvidiaSmiRow]]] = {}
    for row in smi_rows:
        if row.timestamp is not None:
            # nvidia-smi prints local wall-clock time; this runs on the same machine.
            by_index.setdefault(row.index or 0, []).append((row.timestamp.timestamp(), row))
    pairs = []
    for sample in parse_sampler_jsonl(samples_jsonl).samples:
        for device in sample.gpus or ():
            candidates = by_index.get(device.index, [])
            if not candidates:
                continue
            t_smi, row = min(candidates, key=lambda c: abs(c[0] - sample.t))
            if abs(t_smi - sample.t) > max_gap_s:
                continue
            pair: dict[str, Any] = {
                "t": sample.t,
                "gap_s": round(sample.t - t_smi, 3),
                "index": device.index,
                "sampler_utilization_percent": device.utilization_percent,
                "smi_utilization_percent": row.utilization_gpu_percent,
                "sampler_memory_used_bytes": device.memory_used_bytes,
                "smi_memory_used_bytes": row.memory_used_bytes,
                "sampler_memory_total_bytes": device.memory_total_bytes,
                "smi_memory_total_bytes": row.memory_total_bytes,
            }
            if device.utilization_percent is not None and row.utilization_gpu_percent is not None:
                pair["utilization_diff_points"] = device.utilization_percent - row.utilization_gpu_percent
            if device.memory_used_bytes is not None and row.memory_used_bytes:
                pair["memory_diff_percent"] = (
                    100 * (device.memory_used_bytes - row.memory_used_bytes) / row.memory_used_bytes
                )
            pairs.append(pair)
    return pairs


def summarise(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    util = [abs(p["utilization_diff_points"]) for p in pairs if "utilization_diff_points" in p]
    memory = [abs(p["memory_diff_percent"]) for p in pairs if "memory_diff_percent" in p]
    summary: dict[str, Any] = {"pairs": len(pairs)}
    if util:
        summary["utilization"] = {
            "median_abs_diff_points": statistics.median(util),
            "p95_abs_diff_points": _percentile(util, 0.95),
            "max_abs_diff_points": max(util),
            "share_within_goal": sum(u <= UTILIZATION_GOAL_POINTS for u in util) / len(util),
            "sampler_mean_percent": statistics.fmean(p["sampler_utilization_percent"] for p in pairs),
            "smi_mean_percent": statistics.fmean(p["smi_utilization_percent"] for p in pairs),
            "goal_points": UTILIZATION_GOAL_POINTS,
            "goal_met_by_median": statistics.median(util) <= UTILIZATION_GOAL_POINTS,
        }
    if memory:
        summary["memory_used"] = {
            "median_abs_diff_percent": statistics.median(memory),
            "p95_abs_diff_percent": _percentile(memory, 0.95),
            "max_abs_diff_percent": max(memory),
            "share_within_goal": sum(m <= MEMORY_GOAL_PERCENT for m in memory) / len(memory),
            "sampler_mean_bytes": statistics.fmean(p["sampler_memory_used_bytes"] for p in pairs),
            "smi_mean_bytes": statistics.fmean(p["smi_memory_used_bytes"] for p in pairs),
            "goal_percent": MEMORY_GOAL_PERCENT,
            "goal_met_by_median": statistics.median(memory) <= MEMORY_GOAL_PERCENT,
        }
    summary["median_abs_gap_s"] = statistics.median(abs(p["gap_s"]) for p in pairs) if pairs else None
    return summary


def _record_phases(
    args: argparse.Namespace, work: Path, env: dict[str, str], probe: list[str], phase_files: dict[str, Path]
) -> None:
    time.sleep(3)  # an idle baseline before the first phase
    durations = {"heavy": args.heavy_seconds, "light": args.light_seconds}
    for phase, (width, depth, batch) in PHASES.items():
        if durations[phase] <= 0:
            continue
        telemetry = args.out_dir / f"telemetry-{phase}.jsonl"
        telemetry.unlink(missing_ok=True)
        phase_files[phase] = telemetry
        _run(
            [
                args.python, "-m", "infra.telemetry.sampler", "--out", str(telemetry), "--interval", "1",
                "--step", f"train-{phase}", "--",
                *probe, "train", "--backend", "torch", "--device", "cuda",
                "--width", str(width), "--depth", str(depth), "--batch_size", str(batch),
                "--total_iters", "1000000000", "--time_limit", str(durations[phase]),
                "--test_every", "1000000000", "--log_every", "1000",
                "--experiment_name", f"gpu-check-{phase}", "--logs_root", str(work / "logs"),
            ],
            work,
            env,
            check=False,  # a failed phase is reported in the JSON, and nvidia-smi still stops
        )  # fmt: skip
        time.sleep(2)


def _gpu_identity() -> dict[str, str]:
    out = subprocess.run(
        ["nvidia-smi", "--query-gpu=index,name,driver_version,memory.total", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    first = [p.strip() for p in out.splitlines()[0].split(",")]
    return {"gpus": out, "name": first[1], "driver": first[2], "memory_total": first[3]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out-dir", type=Path, default=Path(os.environ.get("OUT", "bench-results")))
    parser.add_argument("--heavy-seconds", type=float, default=60)
    parser.add_argument("--light-seconds", type=float, default=30)
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="atlas-gpu-check-"))
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    probe = [args.python, "-m", "workloads.probe"]
    _run([*probe, "make-hdf5"], work, env)
    _run([*probe, "inception-moments"], work, env)

    smi_csv = args.out_dir / "nvidia_smi.csv"
    with smi_csv.open("w") as smi_out:
        smi = subprocess.Popen(
            ["nvidia-smi", f"--query-gpu={SMI_QUERY}", "--format=csv", "-l", "1"],
            stdout=smi_out,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        phase_files: dict[str, Path] = {}
        try:
            _record_phases(args, work, env, probe, phase_files)
        finally:
            smi.terminate()
            smi.wait(timeout=10)

    smi_rows = parse_nvidia_smi_csv(smi_csv.read_text())
    import torch

    result: dict[str, Any] = {
        "date_utc": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        **_gpu_identity(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "smi_query": SMI_QUERY,
        "sampler_interval_s": 1,
        "phases": {},
    }
    all_pairs: list[dict[str, Any]] = []
    for phase, path in phase_files.items():
        text = path.read_text()
        run = parse_sampler_jsonl(text)
        pairs = pair_readings(text, smi_rows)
        all_pairs += pairs
        width, depth, batch = PHASES[phase]
        result["phases"][phase] = {
            "config": {"width": width, "depth": depth, "batch_size": batch},
            "sampler_exit_code": run.exit_code,
            "samples": len(run.samples),
            "gpu_measured_samples": sum(s.gpus is not None for s in run.samples),
            "gpu_not_measured_reasons": sorted({s.gpu_reason for s in run.samples if s.gpu_reason}),
            "summary": summarise(pairs),
            "pairs": pairs,
        }
    result["overall"] = summarise(all_pairs)
    (args.out_dir / "gpu_check.json").write_text(json.dumps(result, indent=2))
    shutil.rmtree(work, ignore_errors=True)

    print(f"\nGPU check, {result['date_utc']}, {result['name']} (driver {result['driver']}), torch {result['torch']}")
    for phase, body in result["phases"].items():
        s = body["summary"]
        u, m = s.get("utilization", {}), s.get("memory_used", {})
        print(
            f"  {phase:5s}: {s['pairs']} pairs (median gap {s['median_abs_gap_s']} s); utilization "
            f"|diff| median {u.get('median_abs_diff_points')} p95 {u.get('p95_abs_diff_points')} points "
            f"(sampler mean {u.get('sampler_mean_percent', 0):.1f} %, "
            f"nvidia-smi {u.get('smi_mean_percent', 0):.1f} %); "
            f"memory used |diff| median {m.get('median_abs_diff_percent', float('nan')):.4f} % "
            f"p95 {m.get('p95_abs_diff_percent', float('nan')):.4f} %"
        )
    overall = result["overall"]
    print(
        f"  goals: utilization within {UTILIZATION_GOAL_POINTS} points by median: "
        f"{overall.get('utilization', {}).get('goal_met_by_median')}; memory within {MEMORY_GOAL_PERCENT} %: "
        f"{overall.get('memory_used', {}).get('goal_met_by_median')}"
    )
    print(f"  wrote {args.out_dir / 'gpu_check.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
