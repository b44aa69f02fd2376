"""A 50-job sweep through Atlas's SSH + scheduler layer against 50 sequential `ssh host sbatch` calls.

Both sides submit the same staged job script to the local Satori, in the same run,
alternating rounds:
- atlas: infra/hpc's pooled paramiko connection (one login for the whole sweep), the
  scheduler's submit command per job, then ONE batched status query for all jobs (the
  status board); the script upload (SFTP, sha256-checked) is inside the timing;
- ssh: the real OpenSSH client, one `ssh host "bash -lc 'cd dir && sbatch script'"` per job
  (new connection, key login, pinned host key each time), as scripts and Pulumi's command
  provider do; no status query at all (in its favour).

Reports the median sweep time of each side over the rounds, the ratio, and how many SSH
connections each side opened.

    .venv/bin/python bench/hpc_sweep.py [--jobs 50] [--rounds 3] [--scheduler slurm|lsf] [--up]
        [--state-dir DIR --port-base N]   (default: the running `scripts/localenv` environment)
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from infra.hpc import polling, ssh
from infra.hpc.scheduler import JobSpec, render_job_script, scheduler_for
from infra.localenv import satori
from infra.localenv.layout import Layout, Ports, default_layout

RUN_DIR = "atlas-bench/sweep"


def endpoint(info: dict[str, Any]) -> ssh.SshEndpoint:
    known_hosts = Path(info["known_hosts_file"])
    return ssh.SshEndpoint(
        host=info["host"],
        port=int(info["port"]),
        user=info["user"],
        known_hosts=known_hosts.read_text(),
        known_hosts_source=f"file {known_hosts}",
        private_key=Path(info["key_file"]).read_text(),
    )


def sweep_atlas(info: dict[str, Any], scheduler_name: str, script: str, jobs: int) -> tuple[float, list[str], int]:
    ssh.close_all()
    polling.reset_boards()
    opened_before = sum(ssh.CONNECTIONS_OPENED.values())
    sched = scheduler_for(scheduler_name)
    script_path = f".atlas/jobs/sweep{sched.script_suffix}"
    start = time.perf_counter()
    conn = ssh.connection(endpoint(info))
    ssh.make_directories(conn, [RUN_DIR, f"{RUN_DIR}/.atlas/jobs", f"{RUN_DIR}/logs"])
    ssh.upload_bytes(conn, script.encode(), f"{RUN_DIR}/{script_path}")
    ids = []
    for _ in range(jobs):
        result = ssh.run_remote(conn, sched.submit_command(RUN_DIR, script_path, []), check=False)
        ids.append(sched.parse_submission(result))
    board = polling.board_for(conn.endpoint.pool_key, 1.0)
    states = board.states(sched, lambda c: ssh.run_remote(conn, c, check=False, safe_to_retry=True), ids)
    elapsed = time.perf_counter() - start
    if any(s is None for s in states.values()):
        raise SystemExit(f"atlas sweep: some jobs unknown to the scheduler: {states}")
    return elapsed, ids, sum(ssh.CONNECTIONS_OPENED.values()) - opened_before


def sweep_ssh(info: dict[str, Any], scheduler_name: str, jobs: int) -> tuple[float, list[str], int]:
    sched = scheduler_for(scheduler_name)
    command = sched.submit_command(RUN_DIR, f".atlas/jobs/sweep{sched.script_suffix}", [])
    ids = []
    start = time.perf_counter()
    for _ in range(jobs):
        argv = satori.ssh_client_argv(info, command)
        result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        ids.append(sched.parse_submission(ssh.RemoteResult(command, result.returncode, result.stdout, result.stderr)))
    return time.perf_counter() - start, ids, jobs


def cancel_all(info: dict[str, Any]) -> None:
    conn = ssh.connection(endpoint(info))
    ssh.run_remote(conn, 'scancel --user "$USER" || true', safe_to_retry=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--scheduler", choices=("slurm", "lsf"), default="slurm")
    parser.add_argument("--up", action="store_true", help="start the local Satori first if it is not running")
    parser.add_argument("--state-dir", type=Path, help="a local environment's state dir (with --port-base)")
    parser.add_argument("--port-base", type=int)
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    layout: Layout = (
        Layout(state_dir=args.state_dir, ports=Ports(args.port_base))
        if args.state_dir and args.port_base
        else default_layout()
    )
    status = satori.up(layout) if args.up else satori.status(layout)
    info = status["ssh"]
    if not info["running"]:
        print("the local Satori is not running: `scripts/localenv up`, or pass --up", file=sys.stderr)
        return 1
    spec = JobSpec(job_name="atlas-bench-sweep", step="sweep", workdir=RUN_DIR, log_dir="logs", command=("true",))
    script = render_job_script(scheduler_for(args.scheduler), spec)
    # Stage once, untimed, so the ssh side finds the script too.
    sweep_atlas(info, args.scheduler, script, 0)
    times: dict[str, list[float]] = {"atlas": [], "ssh": []}
    connections: dict[str, list[int]] = {"atlas": [], "ssh": []}
    for _ in range(args.rounds):
        for side in ("ssh", "atlas"):
            if side == "atlas":
                elapsed, ids, opened = sweep_atlas(info, args.scheduler, script, args.jobs)
            else:
                elapsed, ids, opened = sweep_ssh(info, args.scheduler, args.jobs)
            if len(set(ids)) != args.jobs:
                raise SystemExit(f"{side}: expected {args.jobs} distinct job ids, got {len(set(ids))}")
            times[side].append(elapsed)
            connections[side].append(opened)
            cancel_all(info)
    medians = {side: statistics.median(values) for side, values in times.items()}
    ratio = medians["ssh"] / medians["atlas"]
    result = {
        "scheduler": args.scheduler,
        "jobs": args.jobs,
        "rounds": args.rounds,
        "median_s": medians,
        "per_job_median_ms": {side: 1000 * m / args.jobs for side, m in medians.items()},
        "all_s": times,
        "ssh_connections_per_sweep": {side: max(c) for side, c in connections.items()},
        "atlas_faster_by": ratio,
    }
    for side in ("ssh", "atlas"):
        print(
            f"{side:<6} median {medians[side]:7.2f} s for {args.jobs} jobs "
            f"({1000 * medians[side] / args.jobs:6.1f} ms/job), "
            f"{max(connections[side])} SSH connection(s) per sweep; rounds: "
            + ", ".join(f"{t:.2f}" for t in times[side])
        )
    print(f"atlas is {ratio:.2f}x faster (goal >= 2x, one connection per host)")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
