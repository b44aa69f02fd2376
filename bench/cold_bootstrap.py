"""Benchmark: `scripts/bootstrap` on a machine with nothing cached, by phase.

A copy of the repository (no .venv) with every cache pointed at empty folders: the toolchain
(`ATLAS_CACHE`), Go's modules and builds (`GOMODCACHE`, `GOCACHE`) and pip's (`PIP_CACHE_DIR`).
So everything is downloaded and compiled as on a fresh machine; only Go, Python and the
Debian archive are the machine's own. Then a second run of the same copy (warm: stamps only).

    .venv/bin/python -m bench.cold_bootstrap
    .venv/bin/python -m bench.cold_bootstrap --record LOG --commit SHA
        (a bootstrap run by hand on a fresh machine, every cache empty: its printed log)

Writes bench/results/cold-bootstrap-<date>.json: each phase's seconds (the bootstrap's own
`--timings`), the total wall time, and the load average before and after (run it on an idle
machine: the figure is only as good as the quiet around it). Goal: <= 20 minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.provenance import Commit, run_record, write_result
from bench.stats import RESULTS, now_utc
from infra.toolchain.pins import REPO_ROOT


def copy_repository(dest: Path) -> None:
    listing = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO_ROOT,
                             capture_output=True, check=True).stdout.decode()
    for name in filter(None, listing.split("\0")):
        source = REPO_ROOT / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)


# The bootstrap's last line: "bootstrap  32m29s done; toolchain in DIR (venv 66s, pulumi fetch 113s, ..., total 1950s)".
DONE_LINE = re.compile(r"^bootstrap +\S+ done; toolchain in (\S+) \((.*)\)$", re.M)
PHASE = re.compile(r"([\w.-]+(?: fetch| compile)?) (\d+)s")
# Its first: "bootstrap   0m00s go version go1.26.8 linux/amd64".
GO_LINE = re.compile(r"^bootstrap +\S+ (go version .*)$", re.M)


def parse_log(log: str) -> dict[str, float]:
    """Each phase's seconds from a bootstrap's printed log (its last line), `total` among them."""
    done = DONE_LINE.search(log)
    if done is None:
        raise ValueError("no `done; toolchain in ...` line: the bootstrap did not finish (or this is not its log)")
    phases = {name: float(seconds) for name, seconds in PHASE.findall(done.group(2))}
    if "total" not in phases:
        raise ValueError(f"the bootstrap's last line has no total: {done.group(0)!r}")
    return phases


def record(log_path: Path, commit: str) -> int:
    """A bootstrap run by hand on a fresh machine (a new session's: nothing in any cache)."""
    log = log_path.read_text()
    phases = parse_log(log)
    go = GO_LINE.search(log)
    result = {
        "bench": "cold_bootstrap",
        "date": now_utc(),
        **run_record(commit=Commit(commit, False, (), "the checkout the bootstrap ran in (clean: git status)")),
        "what": "scripts/bootstrap (as the log shows: --with apptainer where an apptainer step is in it) on a fresh "
                "machine, every cache empty; recorded from its printed log",
        "go": go.group(1) if go else "not recorded: no `go version` line in the log",
        "load_average_before": "not measured: a bootstrap run by hand, its log has no load average",
        "cold_total_s": phases["total"],
        "phases_s": phases,
        "warm_rerun_s": "not measured: a bootstrap run by hand",
        "goal_s": 1200,
    }
    out = write_result(result, RESULTS / f"cold-bootstrap-{dt.date.today().isoformat()}.json")
    print(f"bench: {phases['total']:.0f} s cold; wrote {out.relative_to(REPO_ROOT)}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--record", type=Path, help="the printed log of a bootstrap run by hand on a fresh machine")
    parser.add_argument("--commit", default="HEAD", help="with --record: the commit it ran on")
    args = parser.parse_args()
    if args.record:
        commit = subprocess.run(["git", "rev-parse", args.commit], cwd=REPO_ROOT, capture_output=True, text=True,
                                check=True).stdout.strip()
        return record(args.record, commit)
    return measure()


def measure() -> int:
    origin = run_record()  # the copy below takes the working tree as it is now, uncommitted changes included
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="atlas-cold-") as tmp:
        root = Path(tmp)
        clone = root / "atlas"
        copy_repository(clone)
        env = {**os.environ, "ATLAS_CACHE": str(root / "cache"), "GOMODCACHE": str(root / "gomod"),
               "GOCACHE": str(root / "gocache"), "PIP_CACHE_DIR": str(root / "pip")}
        timings = root / "timings.json"
        print(f"bench: cold bootstrap in {clone} (load average before: {load_before[0]:.2f})", flush=True)
        start = time.monotonic()
        subprocess.run([str(clone / "scripts" / "bootstrap"), "--timings", str(timings)], env=env, check=True)
        cold_s = time.monotonic() - start
        phases = json.loads(timings.read_text())
        start = time.monotonic()
        subprocess.run([str(clone / "scripts" / "bootstrap")], env=env, check=True, capture_output=True)
        warm_s = time.monotonic() - start
        sizes = {name: _du(root / name) for name in ("cache", "gomod", "gocache")}
        # Go's module cache is read-only by design: make it removable.
        subprocess.run(["chmod", "-R", "u+w", str(root / "gomod")], check=False)
    result = {
        "bench": "cold_bootstrap",
        "date": now_utc(),
        **origin,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "cold_total_s": round(cold_s, 1),
        "phases_s": phases,
        "warm_rerun_s": round(warm_s, 2),
        "disk_bytes": sizes,
        "goal_s": 1200,
    }
    out = write_result(result, RESULTS / f"cold-bootstrap-{dt.date.today().isoformat()}.json")
    print(json.dumps({k: v for k, v in result.items() if k != "phases_s"}, indent=2))
    print(f"bench: wrote {out.relative_to(REPO_ROOT)}")
    return 0


def _du(path: Path) -> int:
    out = subprocess.run(["du", "-sb", str(path)], capture_output=True, text=True, check=False).stdout
    return int(out.split()[0]) if out else 0


if __name__ == "__main__":
    sys.exit(main())
