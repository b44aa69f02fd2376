"""Benchmark: a second `scripts/bootstrap` (everything built: stamps only), and the disk the build holds.

Each run is the repository's own `scripts/bootstrap` in a fresh process, timed from spawn to exit,
--runs times one after the other; it must answer "up to date" (a run that rebuilds anything is
an error, not a sample). There is no peer to race: this is the fixed cost of the command every
script runs first. Then the disk the build holds, by `du` (bytes, no rounding):

- the toolchain's `bin/` with its links followed (the binaries a run uses),
- every built step under the toolchain cache (`steps/`: what `bin/` links into, every pin built),
- Go's module cache and build cache (`go env GOMODCACHE GOCACHE`), shared with any other Go work
  on the machine,
- the project's `.venv`.

    flock /tmp/atlas-heavy.lock .venv/bin/python -m bench.warm_bootstrap [--runs 12] [--out FILE]

Writes bench/results/warm-bootstrap-<date>.json (or --out) with every run's seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bench.provenance import run_record, write_result
from bench.stats import RESULTS, now_utc
from infra.toolchain.pins import REPO_ROOT, cache_root, load_pins, toolchain_dir

UP_TO_DATE = "up to date"


@dataclass(frozen=True)
class Run:
    seconds: float
    returncode: int
    up_to_date: bool


def parse_du(output: str) -> int | None:
    """Bytes from `du -s` output ("12345\\t/path"); None when du printed nothing usable (pure, tested)."""
    first = output.strip().split("\n")[0].split("\t")[0].strip() if output.strip() else ""
    return int(first) if first.isdigit() else None


def du_bytes(path: Path, follow_links: bool = False) -> dict[str, object]:
    """Bytes under path, or None with the reason (a reading not taken is never 0)."""
    if not path.exists():
        return {"path": str(path), "bytes": None, "reason": "not measured: the folder does not exist"}
    argv = ["du", "-sb", *(["-L"] if follow_links else []), str(path)]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    size = parse_du(proc.stdout)
    if size is None:
        return {"path": str(path), "bytes": None, "reason": f"not measured: du exit {proc.returncode}"}
    # du exits 1 when some files vanish mid-walk (Go's build cache is trimmed by other builds):
    # the sum is then a slight undercount, and the file says so.
    return {"path": str(path), "bytes": size, **({"du_exit": proc.returncode} if proc.returncode else {})}


def go_env(name: str) -> Path | None:
    proc = subprocess.run(["go", "env", name], capture_output=True, text=True, check=False)
    return Path(proc.stdout.strip()) if proc.returncode == 0 and proc.stdout.strip() else None


def time_bootstrap() -> Run:
    start = time.perf_counter()
    proc = subprocess.run([str(REPO_ROOT / "scripts" / "bootstrap")], capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    return Run(round(seconds, 4), proc.returncode, UP_TO_DATE in proc.stdout + proc.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=12)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    started = now_utc()
    origin = run_record()
    load_before = os.getloadavg()
    runs: list[Run] = []
    for i in range(args.runs):
        run = time_bootstrap()
        if run.returncode != 0 or not run.up_to_date:
            raise SystemExit(f"bootstrap run {i + 1} was not stamps-only (exit {run.returncode}): build first")
        runs.append(run)
        print(f"bench: second bootstrap #{i + 1}/{args.runs}: {run.seconds:.3f} s", flush=True)
    print("bench: du of the toolchain, Go's caches and .venv (Go's build cache takes a while)", flush=True)
    bin_dir = toolchain_dir(load_pins()) / "bin"
    mod, build = go_env("GOMODCACHE"), go_env("GOCACHE")
    missing = {"path": None, "bytes": None, "reason": "not measured: `go env` gave no folder"}
    disk = {
        "toolchain_bin_links_followed": du_bytes(bin_dir, follow_links=True),
        "toolchain_steps": du_bytes(cache_root() / "toolchain" / "steps"),
        "go_module_cache": du_bytes(mod) if mod else missing,
        "go_build_cache": du_bytes(build) if build else missing,
        "venv": du_bytes(REPO_ROOT / ".venv"),
    }
    seconds = [r.seconds for r in runs]
    result = {
        "bench": "warm_bootstrap",
        "date": started,
        "finished": now_utc(),
        **origin,
        "provenance": "real: this machine's built toolchain and caches",
        "load_average_before": [round(x, 2) for x in load_before],
        "runs": args.runs,
        "median_s": round(statistics.median(seconds), 4),
        "samples": [asdict(r) for r in runs],
        "disk": disk,
    }
    out = args.out or RESULTS / f"warm-bootstrap-{started[:10]}.json"
    out = write_result(result, out, indent=1)
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}, indent=1))
    print(f"bench: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
