"""Benchmark: a fresh clone's full `.ci/run` on a machine with nothing cached, by phase.

`git clone` of this repository's HEAD into a temporary folder, every cache pointed at empty
folders (the toolchain and images: `ATLAS_CACHE`; Go: `GOMODCACHE`, `GOCACHE`; pip:
`PIP_CACHE_DIR`; the rest of `XDG_CACHE_HOME`), then `.ci/run` as CI runs it. Only Go, Python
and, where already installed, the Debian packages the scripts install are the machine's own: apt's
history (/var/log/apt/history.log) says which of those the run installed itself. The bootstrap's
phases come from its own `--timings` (ATLAS_BOOTSTRAP_TIMINGS); `scripts/test`'s own progress
lines give when lint, type check and pytest began.

    .venv/bin/python -m bench.cold_ci              (about an hour on 2 cores; run it on an idle machine)
    .venv/bin/python -m bench.cold_ci --record LOG --timings FILE --commit SHA
                                                   (a run made by hand the same way: its log and timings)
    .venv/bin/python -m bench.cold_ci --record LOG --commit SHA --warm
                                                   (a fresh clone's .ci/run on this machine's warm caches)

Writes bench/results/cold-ci-<date>.json (warm-ci-<date>.json with --warm). Goals: bootstrap <= 20 min,
the whole run <= 60 min.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.provenance import Commit, run_record, write_result
from bench.stats import RESULTS, now_utc
from infra.toolchain.pins import REPO_ROOT

# `scripts/test`'s progress lines: "test <seconds>s <what>".
TEST_LINE = re.compile(r"^test (\d+)s (.+)$", re.M)
PYTEST_SUMMARY = re.compile(r"=+ (.*(?:passed|failed).*) in ([\d.]+)s")
# A run's own first and last lines: `start <UTC>` and `end <UTC> rc=N elapsed=Ns`.
START_LINE = re.compile(r"^start (\S+)", re.M)
END_LINE = re.compile(r"^end (\S+) rc=(\d+) elapsed=(\d+)s", re.M)
# apt's own record of what it installed: /var/log/apt/history.log, one block per apt-get run.
APT_HISTORY = Path("/var/log/apt/history.log")
APT_BLOCK = re.compile(r"^Start-Date: (\S+)\s+(\S+)\n(.*?)^End-Date:", re.M | re.S)
APT_INSTALLED = re.compile(r"([\w.+-]+):\w+ \(([^)]*)\)")


def apt_installs(history: str, start: str, end: str) -> dict[str, Any]:
    """What apt installed between two UTC times (apt writes local time; CI machines run in UTC)."""
    asked: list[str] = []
    total = 0
    for day, clock, body in APT_BLOCK.findall(history):
        if not start[:19] <= f"{day}T{clock}" <= end[:19]:  # ISO to the second, zone left off
            continue
        for line in body.splitlines():
            if line.startswith("Install: "):
                for package, version in APT_INSTALLED.findall(line):
                    total += 1
                    if "automatic" not in version:
                        asked.append(package)
    return {"asked_for": sorted(asked), "packages_with_dependencies": total}


def summarise(log: str, phases: dict[str, float], total_s: float, returncode: int, commit: str,
              apt: dict[str, Any] | None = None) -> dict[str, Any]:
    marks = {what: int(seconds) for seconds, what in TEST_LINE.findall(log)}
    bootstrap_s = next((s for what, s in marks.items() if what.startswith("ruff")), None)
    pytest_start = next((s for what, s in marks.items() if what.startswith("pytest")), None)
    summary = PYTEST_SUMMARY.findall(log)
    return {
        "bench": "cold_ci",
        "date": now_utc(),
        # The clone's checkout: a fresh clone of that commit, so nothing uncommitted in it.
        **run_record(commit=Commit(commit, False, (), "the fresh clone's checkout (git clone, git checkout)")),
        "what": "git clone, every cache empty, then .ci/run (scripts/test: bootstrap, ruff, mypy, pytest)",
        "started": started[1] if (started := START_LINE.search(log)) else None,
        # The Debian packages the scripts install with apt-get (Slurm, OpenSSH, buildah, runc,
        # chromium, ...): installed by the run (from apt's history), or already on the machine.
        "apt_installed_by_run": apt if apt is not None else "not recorded: apt's history not read",
        "returncode": returncode,
        "total_s": round(total_s, 1),
        # scripts/test's own marks: seconds since it started, when each part began.
        "marks_s": marks,
        "bootstrap_s": bootstrap_s,
        "bootstrap_phases_s": phases,
        "pytest_s": float(summary[-1][1]) if summary else None,
        "pytest_result": summary[-1][0] if summary else "not reached",
        "pytest_started_at_s": pytest_start,
        "goals_s": {"bootstrap": 1200, "total": 3600},
    }


def run_cold(commit: str) -> tuple[str, dict[str, float], float, int]:
    with tempfile.TemporaryDirectory(prefix="atlas-cold-ci-") as tmp:
        root = Path(tmp)
        clone = root / "atlas"
        subprocess.run(["git", "clone", "-q", str(REPO_ROOT), str(clone)], check=True)
        subprocess.run(["git", "checkout", "-q", commit], cwd=clone, check=True)
        timings = root / "timings.json"
        env = {**os.environ, "ATLAS_CACHE": str(root / "cache"), "GOMODCACHE": str(root / "gomod"),
               "GOCACHE": str(root / "gocache"), "PIP_CACHE_DIR": str(root / "pip"),
               "XDG_CACHE_HOME": str(root / "xdg"), "ATLAS_BOOTSTRAP_TIMINGS": str(timings)}
        env.pop("VIRTUAL_ENV", None)
        print(f"bench: .ci/run in a fresh clone at {clone}, every cache empty", flush=True)
        start = time.monotonic()
        proc = subprocess.Popen([str(clone / ".ci" / "run")], cwd=clone, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        lines = [f"start {now_utc()}\n"]
        for line in proc.stdout:
            print(line, end="", flush=True)
            lines.append(line)
        code = proc.wait()
        total = time.monotonic() - start
        phases = json.loads(timings.read_text()) if timings.exists() else {}
        lines.append(f"end {now_utc()} rc={code} elapsed={round(total)}s\n")
        subprocess.run(["chmod", "-R", "u+w", str(root / "gomod")], check=False)  # Go's cache is read-only
    return "".join(lines), phases, total, code


def _apt_during(log: str, history: Path) -> dict[str, Any] | None:
    start, end = START_LINE.search(log), END_LINE.search(log)
    if start is None or end is None or not history.exists():
        return None
    return apt_installs(history.read_text(), start[1], end[1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--record", type=Path, help="the log of a run made by hand (its last line: `end ... rc=N "
                                                    "elapsed=Ns`)")
    parser.add_argument("--timings", type=Path, help="with --record: the bootstrap's timings file")
    parser.add_argument("--commit", default="HEAD")
    parser.add_argument("--warm", action="store_true", help="with --record: the clone ran on the machine's warm caches")
    parser.add_argument("--apt-history", type=Path, default=APT_HISTORY,
                        help="apt's history log, read for what the run installed (default %(default)s)")
    args = parser.parse_args()
    if args.warm and not args.record:
        parser.error("--warm records a run made by hand: give --record LOG")
    commit = subprocess.run(["git", "rev-parse", args.commit], cwd=REPO_ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    if args.record:
        log = args.record.read_text()
        end = END_LINE.search(log)
        if end is None:
            raise SystemExit(f"{args.record}: no `end ... rc=N elapsed=Ns` line: the run has not finished")
        phases = json.loads(args.timings.read_text()) if args.timings else {}
        result = summarise(log, phases, float(end[3]), int(end[2]), commit, _apt_during(log, args.apt_history))
        if args.warm:
            result["bench"] = "warm_ci"
            result["what"] = ("git clone, then .ci/run on this machine's warm caches (toolchain, Go modules and "
                              "builds, pip): what a developer's second clone costs")
    else:
        log, phases, total, code = run_cold(commit)
        result = summarise(log, phases, total, code, commit, _apt_during(log, args.apt_history))
    kind = "warm-ci" if result["bench"] == "warm_ci" else "cold-ci"
    out = write_result(result, RESULTS / f"{kind}-{result['date'][:10]}.json")
    print(json.dumps({k: v for k, v in result.items() if k != "bootstrap_phases_s"}, indent=2))
    print(f"bench: wrote {out.relative_to(REPO_ROOT)}")
    return 0 if result["returncode"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
