"""Median time of `ssh host bsub` and `ssh host sbatch` round trips against the local Satori.

Each round trip is one run of the real OpenSSH client (new connection, key login, pinned
host key) that submits a trivial job through a login shell, as the project's drivers do.
Uses the running local environment (`scripts/localenv up`), or starts one with --up.

    .venv/bin/python bench/ssh_roundtrip.py [--runs 20] [--up]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from localenv import satori
from localenv.layout import default_layout


def time_round_trips(info: dict[str, object], remote: str, expect: str, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        result = subprocess.run(
            satori.ssh_client_argv(info, remote), capture_output=True, text=True, timeout=60, check=False
        )
        times.append(time.perf_counter() - start)
        if result.returncode != 0 or expect not in result.stdout:
            raise SystemExit(f"round trip failed ({result.returncode}): {result.stdout}{result.stderr}")
    return times


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--up", action="store_true", help="start the local Satori first if it is not running")
    args = parser.parse_args()
    layout = default_layout()
    info = satori.up(layout) if args.up else satori.status(layout)
    if not info["ssh"]["running"]:
        print("the local Satori is not running: `scripts/localenv up`, or pass --up", file=sys.stderr)
        return 1
    ssh = info["ssh"]
    cases = {
        "ssh host bsub": ("echo true | bsub -o /dev/null", "is submitted to"),
        "ssh host sbatch": ("sbatch --parsable -o /dev/null --wrap true", ""),
    }
    for name, (remote, expect) in cases.items():
        times = time_round_trips(ssh, remote, expect, args.runs)
        print(
            f"{name:<16} median {statistics.median(times) * 1000:7.1f} ms  "
            f"(min {min(times) * 1000:.1f}, max {max(times) * 1000:.1f}, n={len(times)})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
