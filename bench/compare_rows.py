"""Benchmark: `compare` on 1,000,000 telemetry rows. Goal: at most 2 s and 500 MB (median of 5).

One HPC environment (the LSF side of a recorded `local` run) whose training step's sampler
file holds --rows samples shaped like a real one (an H200 sample: CPU, memory, one GPU, disk,
network; about 700 bytes a line). Each run is a fresh process that does what scripts/compare
does after SSH: fetch the files (a local mirror stands in for SFTP), load the telemetry,
compute every metric, and write the report (Markdown, HTML, JSON, six PNG charts).

The sampler writes a binary column file beside its JSONL (infra/telemetry/columns.py); the
bench writes both, as the sampler would. `--jsonl-only` leaves the column file out, to measure
the JSONL reader alone (what a run recorded before the column file existed costs).

Memory is the peak resident set of the process plus the peak of its largest reader process
(telemetry files above 64 MiB are read in parallel byte ranges): an upper bound of what it held.

    python3 -m bench.compare_rows [--rows 1000000] [--runs 5] [--workers N] [--jsonl-only] [--json out.json]
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

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
    from infra.compare import costs, hpc_collector, metrics, report, telemetry
    from infra.hpc.ssh import RemoteResult

    if workers:
        original = telemetry.load_sampler_jsonl
        telemetry.load_sampler_jsonl = lambda path, source: original(path, source, workers=workers)  # type: ignore[assignment]
    imported = time.perf_counter()
    outputs = json.loads((RECORDED / "stack_outputs.json").read_text())["environments"]["satori"]
    bjobs = (RECORDED / "bjobs.json").read_text()
    records = hpc_collector.collect_hpc(
        "satori", outputs, lambda command: RemoteResult(command, 0, bjobs, ""), hpc_collector.LocalFiles(home),
        out / "raw",
    )
    collected = time.perf_counter()
    built = metrics.build_report([records], costs.load_cost_profiles(), costs.load_rate_table(), {"stack": "bench"})
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--workers", type=int, help="telemetry reader processes (default: CPUs, at most 4)")
    parser.add_argument("--jsonl-only", action="store_true", help="no column file: the JSONL reader alone")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", nargs=2, type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.workers)))
        return 0
    with tempfile.TemporaryDirectory(prefix="atlas-bench-compare-") as tmp:
        work = Path(tmp)
        telemetry = work / "train.jsonl"
        make_telemetry(telemetry, args.rows)
        outputs = json.loads((RECORDED / "stack_outputs.json").read_text())["environments"]["satori"]
        home = work / "home"
        mirror(home, outputs["run_dir"], telemetry, with_columns=not args.jsonl_only)
        runs = []
        for i in range(args.runs):
            command = [sys.executable, "-m", "bench.compare_rows", "--child", str(home), str(work / f"report-{i}")]
            if args.workers:
                command += ["--workers", str(args.workers)]
            proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=True)
            runs.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            shutil.rmtree(work / f"report-{i}")
    median = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    memory = median["peak_rss_mb"] + median["peak_reader_rss_mb"]
    source = "JSONL only" if args.jsonl_only else "JSONL + column file"
    print(f"compare on {int(median['rows']):,} telemetry rows ({source}, {args.runs} runs, "
          f"{len(os.sched_getaffinity(0))} CPUs available):")
    for key in ("total_s", "import_s", "collect_and_load_s", "metrics_s", "render_s"):
        print(f"  {key:<20} median {median[key]:7.3f} s   (runs: {', '.join(f'{r[key]:.3f}' for r in runs)})")
    reader = median["peak_reader_rss_mb"]
    print(f"  peak RSS             median {median['peak_rss_mb']:7.1f} MB + reader {reader:.1f} MB = {memory:.1f} MB")
    verdict = "met" if median["total_s"] <= GOAL_S and memory <= GOAL_MB else "NOT met"
    print(f"goal {GOAL_S:g} s and {GOAL_MB:g} MB: {verdict}")
    if args.json:
        args.json.write_text(json.dumps({"runs": runs, "median": median, "goal_met": verdict == "met"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
