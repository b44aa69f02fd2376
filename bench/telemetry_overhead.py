"""Benchmark: what the telemetry sampler costs a busy step, measured from outside. Goal: at most 1 % of a core.

The workload is bench/dataloader_tree.py: a PyTorch-like tree of 2 ranks ("GPUs") with 8 busy
data loader workers each, 19 processes, a fixed amount of NumPy work that keeps every core of this
machine busy (the realistic worst case for the sampler: it has to win a core from the step to
take a sample, and whatever it takes, the step loses). Three sides, in ABBA order (ABC CBA) over
--rounds rounds after one warm-up round:

- bare: the workload alone (the baseline: what a user without Atlas runs);
- sampler-5s: the workload under `python3 -m infra.telemetry.sampler --interval 5` (the default);
- sampler-1s: the same at --interval 1.

Read from outside, for every run, once the top process has exited and before it is reaped
(waitid WNOWAIT, so the zombie's /proc files still hold its totals):
- the sampler's own CPU from exec to exit, interpreter start-up included: /proc/<pid>/stat
  utime+stime (clock ticks), and /proc/<pid>/schedstat (nanoseconds on a CPU) as a finer check;
- the CPU of helper children it ran (nvidia-smi, where NVML is missing): everything it reaped
  (os.wait4's rusage, microseconds) less its own CPU less the workload's, which the workload's
  launcher reports itself (getrusage of itself and its reaped tree, then os._exit);
- wall times: the run's, from spawn to exit, and the workload's own (its launcher's clock).

Per side: the paired ratio of the workload's wall time with the sampler over without (does the
sampler slow the step down?), with its 95 % bootstrap interval; the sampler's CPU as a share of one
core over the run. From the sampler's JSONL: its start-up CPU (up to its first sample) and CPU per
sample (its own CPU between its first and last sample), to project a long step's share (per-sample
CPU / interval), where start-up is spread thin.

Every run lasts long enough for --min-samples samples at the longest interval (5 s): the warm-up's
bare run sets the batches per rank (--batches overrides), so the per-sample cost rests on many
samples in every run, not on the few runs that happened to take two. Only runs that took that many
count towards it; the file says how many runs and sample intervals it rests on.

    python3 -m bench.telemetry_overhead [--rounds 10] [--min-samples 8] [--batches N] \
        [--json FILE]   (default: bench/results/telemetry-overhead-<date>.json, never overwritten)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.provenance import run_record, write_result  # noqa: E402
from bench.stats import RESULTS, abba_order, bootstrap_ci, now_utc, paired_ratio  # noqa: E402
from infra.telemetry.parsers.sampler_jsonl import parse_sampler_jsonl  # noqa: E402

GOAL_PERCENT_OF_A_CORE = 1.0
MIN_SAMPLES = 8  # per run, at the longest interval: the per-sample cost rests on these
WARMUP_BATCHES = 1500  # the warm-up round's length, from which the timed runs' length is set
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
SIDES = ("bare", "sampler-5s", "sampler-1s")
INTERVALS = {"sampler-5s": 5.0, "sampler-1s": 1.0}
# One thread per process, as PyTorch's DataLoader sets in its workers: the cores are shared by processes.
THREADS_ONE = {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}


@dataclass(frozen=True)
class ZombieStat:
    """A process's totals read after it exited and before it was reaped."""

    utime_ticks: int
    stime_ticks: int
    cutime_ticks: int  # children it reaped
    cstime_ticks: int
    on_cpu_ns: int  # schedstat's first field: time on a CPU, the finest reading the kernel gives


def parse_stat_and_schedstat(stat: str, schedstat: str) -> ZombieStat:
    """utime, stime, cutime, cstime (fields 14-17 of /proc/<pid>/stat) and the schedstat CPU time (pure)."""
    fields = stat[stat.rindex(")") + 2 :].split()  # fields[0] is field 3 (state)
    return ZombieStat(int(fields[11]), int(fields[12]), int(fields[13]), int(fields[14]), int(schedstat.split()[0]))


@dataclass(frozen=True)
class Run:
    side: str
    round: int
    wall_s: float  # spawn to exit, seen from here
    workload_wall_s: float  # the workload's launcher, start to end, its own clock
    workload_cpu_s: float  # the whole workload tree (launcher's getrusage of itself and its children)
    workload_processes: int
    total_cpu_s: float  # os.wait4 rusage of the top process: itself and everything it reaped
    sampler_self_cpu_s: float | None  # /proc/<pid>/stat utime+stime, exec to exit (None: bare)
    sampler_self_on_cpu_s: float | None  # /proc/<pid>/schedstat
    sampler_helpers_cpu_s: float | None  # total - sampler's own - workload
    sampler_percent_of_a_core: float | None  # (own + helpers) / wall_s
    samples: int | None
    startup_cpu_s: float | None  # the sampler's getrusage at its first sample, less one sample's cost
    cpu_per_sample_ms: float | None  # between its first and last sample
    cpu_between_samples_s: float | None = None  # its own CPU from its first sample to its last


def _workload_command(batches: int, report: Path) -> list[str]:
    return [sys.executable, "-m", "bench.dataloader_tree", "--ranks", "2", "--workers", "8",
            "--batches", str(batches), "--report", str(report)]  # fmt: skip


def run_once(side: str, round_number: int, batches: int, folder: Path) -> Run:
    report = folder / f"{side}-{round_number}.workload.json"
    telemetry = folder / f"{side}-{round_number}.jsonl"
    command = _workload_command(batches, report)
    if side != "bare":
        command = [sys.executable, "-m", "infra.telemetry.sampler", "--out", str(telemetry),
                   "--interval", str(INTERVALS[side]), "--step", "bench", "--", *command]  # fmt: skip
    env = {**os.environ, **THREADS_ONE, "PYTHONPATH": str(REPO)}
    started = time.monotonic()
    process = subprocess.Popen(command, cwd=REPO, env=env)
    # Wait for the exit without reaping: the zombie's /proc/<pid> files still hold its totals.
    os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)
    wall_s = time.monotonic() - started
    stat = parse_stat_and_schedstat(
        Path(f"/proc/{process.pid}/stat").read_text(), Path(f"/proc/{process.pid}/schedstat").read_text()
    )
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise RuntimeError(f"{side} round {round_number}: exit code {process.returncode}")
    workload = json.loads(report.read_text())
    total = usage.ru_utime + usage.ru_stime
    result: dict[str, Any] = {
        "side": side,
        "round": round_number,
        "wall_s": round(wall_s, 4),
        "workload_wall_s": round(workload["end"] - workload["start"], 4),
        "workload_cpu_s": round(workload["cpu_s"], 4),
        "workload_processes": workload["processes"],
        "total_cpu_s": round(total, 4),
        "sampler_self_cpu_s": None,
        "sampler_self_on_cpu_s": None,
        "sampler_helpers_cpu_s": None,
        "sampler_percent_of_a_core": None,
        "samples": None,
        "startup_cpu_s": None,
        "cpu_per_sample_ms": None,
        "cpu_between_samples_s": None,
    }
    if side != "bare":
        own = (stat.utime_ticks + stat.stime_ticks) / CLOCK_TICKS
        on_cpu = stat.on_cpu_ns / 1e9
        helpers = total - on_cpu - workload["cpu_s"]
        samples = parse_sampler_jsonl(telemetry.read_text()).samples
        cpu = [s.sampler_cpu_s for s in samples if s.sampler_cpu_s is not None]
        per_sample = (cpu[-1] - cpu[0]) / (len(cpu) - 1) if len(cpu) >= 2 else None
        result.update(
            sampler_self_cpu_s=round(own, 4),
            sampler_self_on_cpu_s=round(on_cpu, 6),
            sampler_helpers_cpu_s=round(helpers, 4),
            sampler_percent_of_a_core=round(100 * (own + max(helpers, 0.0)) / wall_s, 4),
            samples=len(samples),
            startup_cpu_s=round(cpu[0] - (per_sample or 0.0), 4) if cpu else None,
            cpu_per_sample_ms=round(1000 * per_sample, 3) if per_sample is not None else None,
            cpu_between_samples_s=round(cpu[-1] - cpu[0], 6) if len(cpu) >= 2 else None,
        )
    return Run(**result)


def batches_for(warmup_wall_s: float, warmup_batches: int, min_samples: int, margin: float = 1.2) -> int:
    """Batches per rank for a run that lasts `min_samples` of the longest interval, with a margin:
    the workload's pace (batches a second) read off the warm-up's bare run."""
    seconds = (min_samples + 1) * max(INTERVALS.values()) * margin
    return max(warmup_batches, math.ceil(warmup_batches * seconds / warmup_wall_s))


def _median_ci(values: list[float]) -> dict[str, Any]:
    low, high = bootstrap_ci(values)
    return {"median": round(statistics.median(values), 4), "ci95": [round(low, 4), round(high, 4)], "n": len(values)}


def per_sample_cost(runs: list[Run], min_samples: int) -> dict[str, Any]:
    """The sampler's CPU per sample from the runs that took at least `min_samples` samples: the median
    of their per-run figures with its interval, and the pooled figure (all their CPU between first and
    last sample over all their sample intervals); runs with fewer are counted, not used."""
    counted = [r for r in runs if (r.samples or 0) >= min_samples and r.cpu_between_samples_s is not None]
    result: dict[str, Any] = {
        "min_samples": min_samples,
        "runs_counted": len(counted),
        "runs_with_fewer_samples": len(runs) - len(counted),
    }
    if not counted:
        return {**result, "per_run_ms": None, "pooled_ms": None, "sample_intervals": 0,
                "reason": f"not measured: no run took {min_samples} samples"}  # fmt: skip
    intervals = sum((r.samples or 0) - 1 for r in counted)
    cpu = sum(r.cpu_between_samples_s or 0.0 for r in counted)
    return {
        **result,
        "per_run_ms": _median_ci([r.cpu_per_sample_ms for r in counted if r.cpu_per_sample_ms is not None]),
        "pooled_ms": round(1000 * cpu / intervals, 3),
        "sample_intervals": intervals,
    }


def summarise(runs: list[Run], rounds: int, min_samples: int = MIN_SAMPLES) -> dict[str, Any]:
    """Per sampler side: paired wall-time ratios against bare in the same round, the sampler's CPU share."""
    by = {(r.side, r.round): r for r in runs}
    summary: dict[str, Any] = {}
    for side in INTERVALS:
        pairs = [(by[(side, k)], by[("bare", k)]) for k in range(rounds)]
        mine = [a for a, _ in pairs]
        startup = [a.startup_cpu_s for a in mine if a.startup_cpu_s is not None]
        cost = per_sample_cost(mine, min_samples)
        per_sample_median = cost["per_run_ms"]["median"] if cost["per_run_ms"] else None
        summary[side] = {
            "interval_s": INTERVALS[side],
            "workload_wall_ratio": paired_ratio(
                [a.workload_wall_s for a in mine], [b.workload_wall_s for _, b in pairs]
            ),
            "end_to_end_wall_ratio": paired_ratio([a.wall_s for a in mine], [b.wall_s for _, b in pairs]),
            "workload_cpu_ratio": paired_ratio([a.workload_cpu_s for a in mine], [b.workload_cpu_s for _, b in pairs]),
            "sampler_percent_of_a_core": _median_ci([a.sampler_percent_of_a_core or 0.0 for a in mine]),
            "sampler_self_cpu_s": _median_ci([a.sampler_self_cpu_s or 0.0 for a in mine]),
            "sampler_helpers_cpu_s": _median_ci([a.sampler_helpers_cpu_s or 0.0 for a in mine]),
            "startup_cpu_s": _median_ci(startup) if startup else None,
            "samples_per_run": _median_ci([float(a.samples or 0) for a in mine]),
            "cpu_per_sample": cost,
            "cpu_per_sample_ms": cost["per_run_ms"],
            # A projection, not a measurement: a step long enough that start-up no longer counts.
            "long_step_percent_of_a_core": (
                round(100 * per_sample_median / 1000 / INTERVALS[side], 4) if per_sample_median else None
            ),
        }
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--min-samples", type=int, default=MIN_SAMPLES,
                        help="samples every run takes at the longest interval (sets the run's length)")
    parser.add_argument("--batches", type=int, help="batches per rank (default: set from the warm-up's bare run)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.rounds < 10:
        parser.error("--rounds: at least 10 (the project's rule for a ratio with an interval)")
    started = now_utc()
    origin = run_record()
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="atlas-overhead-") as tmp:
        folder = Path(tmp)
        # Warm-up (page cache, imports; not counted), bare first: its pace sets the timed runs' length.
        warmup = [run_once(side, -1, WARMUP_BATCHES, folder) for side in SIDES]
        batches = args.batches or batches_for(warmup[0].workload_wall_s, WARMUP_BATCHES, args.min_samples)
        print(f"warm-up bare run {warmup[0].workload_wall_s:.1f} s for {WARMUP_BATCHES} batches: {batches} batches "
              f"a rank for {args.min_samples} samples at {max(INTERVALS.values()):g} s", flush=True)
        for number, order in enumerate(abba_order(SIDES, args.rounds)):
            for side in order:
                run = run_once(side, number, batches, folder)
                runs.append(run)
                share = f"{run.sampler_percent_of_a_core:.3f} % of a core" if run.sampler_percent_of_a_core else ""
                print(
                    f"round {number + 1}/{args.rounds} {side:11} workload {run.workload_wall_s:6.2f} s {share}",
                    flush=True,
                )
    summary = summarise(runs, args.rounds, args.min_samples)
    result = {
        "bench": "telemetry_overhead",
        "date": started,
        "finished": now_utc(),
        **origin,
        "source": "real: this machine, the sampler around a real busy process tree (no GPU: --gpu auto finds none)",
        "workload": {
            "command": " ".join(_workload_command(batches, Path("REPORT"))[1:]),
            "batches_per_rank": batches,
            "batches_set_by": "--batches" if args.batches else
            f"the warm-up's bare run: {args.min_samples} samples at {max(INTERVALS.values()):g} s, with a margin",
            "processes": runs[0].workload_processes,
            "note": "every core busy: the realistic worst case for a sampler that must win a core to take a sample",
        },
        "rounds": args.rounds,
        "order": "ABBA (ABC CBA) over bare, sampler-5s, sampler-1s, after one warm-up round of each",
        "goal_percent_of_a_core": GOAL_PERCENT_OF_A_CORE,
        "clock_ticks_per_s": CLOCK_TICKS,
        "summary": summary,
        "runs": [asdict(r) for r in runs],
    }
    for side, s in summary.items():
        ratio = s["workload_wall_ratio"]
        print(
            f"{side}: workload wall x{ratio['median']:.4f} [{ratio['ci95'][0]:.4f}, {ratio['ci95'][1]:.4f}] vs bare; "
            f"sampler {s['sampler_percent_of_a_core']['median']:.3f} % of a core over the run "
            f"(start-up {s['startup_cpu_s']['median'] if s['startup_cpu_s'] else 'n/a'} s, "
            f"{s['cpu_per_sample_ms']['median'] if s['cpu_per_sample_ms'] else 'n/a'} ms a sample over "
            f"{s['cpu_per_sample']['sample_intervals']} intervals in {s['cpu_per_sample']['runs_counted']} runs: "
            f"{s['long_step_percent_of_a_core']} % on a long step, projected); goal <= {GOAL_PERCENT_OF_A_CORE} %"
        )
    out = write_result(result, args.json or RESULTS / f"telemetry-overhead-{started[:10]}.json", indent=1)
    print(f"bench: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
