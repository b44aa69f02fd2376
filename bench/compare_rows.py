"""Benchmark: `compare` on 1,000,000 telemetry rows. Goal: at most 2 s and 500 MB (median).

One HPC environment (the LSF side of a recorded `local` run) whose training step's sampler
file holds --rows samples shaped like a real one (an H200 sample: CPU, memory, one GPU, disk,
network; about 700 bytes a line). Each run is a fresh process that does what scripts/compare
does after SSH: fetch the files (a local mirror stands in for SFTP), load the telemetry,
compute every metric, and write the report (Markdown, HTML, JSON, six PNG charts).

Two sides, ABBA order over --rounds rounds:
- columns: the sampler's binary column file beside its JSONL (infra/telemetry/columns.py), as
  the sampler writes them;
- jsonl-only: the same run without the column file, so the JSONL reader alone (what a run
  recorded before the column file existed costs). The paired ratio jsonl-only/columns says what
  the column file saves. There is no peer tool to race here (no other tool reads Atlas's
  telemetry): the figure is against its goal.

Memory is the peak resident set of the process plus the peak of its largest reader process
(telemetry files above 64 MiB are read in parallel byte ranges): an upper bound of what it held.

    flock /tmp/atlas-heavy.lock .venv/bin/python -m bench.compare_rows [--rows 1000000] [--rounds 10]
        [--workers N] [--out FILE]

Writes bench/results/compare-rows-<date>.json (or --out): date, machine, every run's phases.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.provenance import run_record, write_result  # noqa: E402
from bench.stats import RESULTS, abba_order, now_utc, paired_ratio  # noqa: E402

RECORDED = REPO / "tests" / "unit" / "data" / "compare"
SAMPLE = REPO / "tests" / "unit" / "data" / "sampler_h200.jsonl"
GOAL_S, GOAL_MB = 2.0, 500.0


def make_telemetry(path: Path, rows: int) -> None:
    """`rows` samples from a real sampler line, with time and CPU, memory and GPU values varying,
    and the column file the sampler writes beside them (one row per sample, with its line's offset)."""
    from infra.telemetry.columns import ColumnWriter, columns_path

    lines = SAMPLE.read_text().splitlines()
    start, sample = lines[0], json.loads(lines[3])
    writer = ColumnWriter.open(columns_path(str(path)), 0)
    with path.open("w") as f:
        offset = f.write(start + "\n")
        for i in range(rows):
            sample["t"] = 1796223990.0 + 5.0 * i
            sample["cpu"]["tree_percent"] = 90.0 + (i % 37)
            sample["memory"]["tree_rss_bytes"] = 469835776 + (i % 1000) * 4096
            sample["gpu"]["devices"][0]["utilization_percent"] = i % 101
            sample["disk"]["tree_read_bytes"] = i * 65536
            writer.append(sample, offset)
            offset += f.write(json.dumps(sample, separators=(",", ":")) + "\n")
        f.write(json.dumps({"type": "end", "t": 1796223990.0 + 5.0 * rows, "exit_code": 0}) + "\n")
    writer.close()


def mirror(home: Path, run_dir: str, telemetry: Path, with_columns: bool) -> None:
    base = home / run_dir
    (base / "telemetry").mkdir(parents=True)
    (base / "logs" / "probe-digits").mkdir(parents=True)
    (base / ".atlas").mkdir(parents=True)
    os.link(telemetry, base / "telemetry" / "train.jsonl")
    if with_columns:
        os.link(telemetry.with_suffix(".columns"), base / "telemetry" / "train.columns")
    shutil.copy(RECORDED / "lsf_probe-digits_log.jsonl", base / "logs" / "probe-digits_log.jsonl")
    shutil.copy(RECORDED / "lsf_G_loss.log", base / "logs" / "probe-digits" / "G_loss.log")
    shutil.copy(RECORDED / "lsf_metalog.txt", base / "logs" / "probe-digits" / "metalog.txt")
    (base / ".atlas" / "train.lsf").write_text("#!/bin/bash\n")


def child(home: Path, out: Path, workers: int | None) -> dict[str, float]:
    """One run, in this (fresh) process: collect, compute, write; phase times and peak memory."""
    began = time.perf_counter()
    from infra.compare import cost_files, hpc_collector, metrics, remote_files, report, telemetry
    from infra.hpc.remote import RemoteResult

    if workers:
        original = telemetry.load_sampler_jsonl
        telemetry.load_sampler_jsonl = lambda path, source: original(path, source, workers=workers)  # type: ignore[assignment,misc]
    from infra.outputs import HpcOutputs, read_environment

    imported = time.perf_counter()
    raw = json.loads((RECORDED / "stack_outputs.json").read_text())["environments"]["satori"]
    outputs = read_environment(HpcOutputs, raw, "satori")
    bjobs = (RECORDED / "bjobs.json").read_text()
    records = hpc_collector.collect_hpc(
        "satori",
        outputs,
        lambda command: RemoteResult(command, 0, bjobs, ""),
        remote_files.LocalFiles(home),
        out / "raw",
    )
    collected = time.perf_counter()
    built = metrics.build_report(
        [records], cost_files.load_cost_profiles(), cost_files.load_rate_table(), {"stack": "bench"}
    )
    computed = time.perf_counter()
    report.write_report(built, out)
    written = time.perf_counter()
    columns = records.telemetry["train"]
    return {
        "rows": float(getattr(columns, "rows", 0)),
        "total_s": written - began,
        "import_s": imported - began,
        "collect_and_load_s": collected - imported,
        "metrics_s": computed - collected,
        "render_s": written - computed,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "peak_reader_rss_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
    }


SIDES = ("columns", "jsonl-only")


def summarise(runs: list[dict[str, Any]], rounds: int) -> dict[str, Any]:
    """Per side the median of every phase, the memory bound, the goal's verdict; and the paired
    ratio jsonl-only/columns per round (pure: the unit tests feed it runs)."""
    sides: dict[str, Any] = {}
    for side in SIDES:
        mine = [r for r in runs if r["side"] == side]
        median = {
            key: round(statistics.median(r[key] for r in mine), 4) for key in mine[0] if key not in ("side", "round")
        }
        memory = median["peak_rss_mb"] + median["peak_reader_rss_mb"]
        sides[side] = {
            "median": median,
            "memory_bound_mb": round(memory, 1),
            "goal_met": median["total_s"] <= GOAL_S and memory <= GOAL_MB,
            "runs": len(mine),
        }
    by = {(r["side"], r["round"]): r["total_s"] for r in runs}
    ratio = paired_ratio([by[("jsonl-only", k)] for k in range(rounds)], [by[("columns", k)] for k in range(rounds)])
    return {"sides": sides, "jsonl_only_over_columns": ratio}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--workers", type=int, help="telemetry reader processes (default: CPUs, at most 4)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--child", nargs=2, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.workers)))
        return 0
    if args.rounds < 10:
        parser.error("--rounds: at least 10 (the project's rule for a ratio with an interval)")
    started = now_utc()
    origin = run_record()
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="atlas-bench-compare-") as tmp:
        work = Path(tmp)
        telemetry = work / "train.jsonl"
        print(f"bench: writing {args.rows:,} telemetry rows and their column file", flush=True)
        make_telemetry(telemetry, args.rows)
        outputs = json.loads((RECORDED / "stack_outputs.json").read_text())["environments"]["satori"]
        homes = {side: work / f"home-{side}" for side in SIDES}
        for side, home in homes.items():
            mirror(home, outputs["run_dir"], telemetry, with_columns=side == "columns")
        for number, order in enumerate(abba_order(SIDES, args.rounds)):
            for side in order:
                report = work / f"report-{number}-{side}"
                command = [sys.executable, "-m", "bench.compare_rows", "--child", str(homes[side]), str(report)]
                if args.workers:
                    command += ["--workers", str(args.workers)]
                proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=True)
                run = {"side": side, "round": number, **json.loads(proc.stdout.strip().splitlines()[-1])}
                runs.append(run)
                shutil.rmtree(report)
                print(
                    f"round {number + 1}/{args.rounds} {side:10} {run['total_s']:6.3f} s "
                    f"(load {run['collect_and_load_s']:.3f} s), {run['peak_rss_mb']:.0f} MB "
                    f"+ reader {run['peak_reader_rss_mb']:.0f} MB",
                    flush=True,
                )
    summary = summarise(runs, args.rounds)
    result = {
        "bench": "compare_rows",
        "date": started,
        "finished": now_utc(),
        **origin,
        "cpus_available": len(os.sched_getaffinity(0)),
        "provenance": "real: this machine; a recorded LSF run's files mirrored locally (no SSH), its training "
        "telemetry synthesised from a real H200 sampler line",
        "rows": args.rows,
        "rounds": args.rounds,
        "order": "ABBA over columns, jsonl-only",
        "goal": {"total_s": GOAL_S, "memory_mb": GOAL_MB},
        **summary,
        "samples": runs,
    }
    for side, s in summary["sides"].items():
        print(
            f"{side}: median {s['median']['total_s']:.3f} s, {s['memory_bound_mb']:.0f} MB; goal "
            f"{GOAL_S:g} s and {GOAL_MB:g} MB {'met' if s['goal_met'] else 'NOT met'}"
        )
    ratio = summary["jsonl_only_over_columns"]
    print(f"jsonl-only/columns {ratio['median']:.2f} (95 % CI {ratio['ci95'][0]:.2f} to {ratio['ci95'][1]:.2f})")
    out = args.out or RESULTS / f"compare-rows-{started[:10]}.json"
    out = write_result(result, out, indent=1)
    print(f"bench: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
