"""A 50-job sweep through Atlas's SSH + scheduler layer against what a competent user would do.

Every side submits the same staged job script to the local Satori (real OpenSSH server, real
Slurm; LSF's command set is the stand-in over it), in the same run, ABBA order (each round's
order is the reverse of the last), and `--rounds` rounds:
- atlas: infra/hpc's pooled paramiko connection (one login for the sweep), the scheduler's
  submit command per job (its own exec channel, `bash -lc`), then ONE batched status query for
  all jobs (the status board). The script upload (SFTP, sha256-checked) is inside the timing.
- ssh-mux: the OpenSSH client per job over one ControlMaster connection (ControlPersist), the
  way an experienced user scripts a sweep; the master's login is inside the timing.
- array: one job array in one `ssh` call (`sbatch --array=1-N`, `bsub -J "name[1-N]"`): the
  scheduler's own answer to a sweep of identical jobs.
- submitit (Slurm only): the Python peer researchers sweep with. One `ssh` call runs
  bench/submitit_sweep.py on the login node with the login user's python: `executor.map_array` over
  the N parameter sets, which submitit submits as one Slurm job array (one `sbatch`); each task
  runs the same staged script, `bash .atlas/jobs/sweep.sbatch <i>`, through submitit's `srun python
  -m submitit.core._submit`. Python's start, `import submitit` and the pickling are inside the
  timing, as they are in the researcher's. Untimed, before the rounds: submitit is installed into
  a venv in the login user's home from bench/requirements-login-node.txt (pinned, hashed), and one
  2-job map_array is run to completion, so a side whose jobs could not run is never timed. For
  LSF the side is recorded as not measured: submitit has no LSF executor.
- ssh-fresh: one new `ssh` connection per job (no multiplexing), as naive scripts and Pulumi's
  command provider do. Kept to show what the pooled connection saves, not as the bar.
No baseline queries status afterwards (in its favour).

SSH logins are counted by the server: the "Accepted publickey" lines sshd logs during a sweep.
The JSON holds every round, per-job medians and, for each baseline, the paired ratio
baseline/atlas per round with a 95 % bootstrap interval (above 1: Atlas faster).

`--profile` times where one Atlas submission's milliseconds go: a bare exec channel, the same
under `bash -lc`, Atlas's run_remote of `true`, and of a real submission, against the OpenSSH
client over a ControlMaster connection.

    .venv/bin/python -m bench.hpc_sweep [--jobs 50] [--rounds 10] [--scheduler slurm|lsf] [--up]
        [--profile] [--state-dir DIR --port-base N]   (default: the running `scripts/localenv`)
        [--out FILE]   (default: bench/results/hpc-sweep-<scheduler>-<date>.json)

The JSON records the arguments it ran with (`args`), the sides measured (`sides`) and those not,
with the reason (`not_measured`).
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.provenance import run_record, write_result
from bench.stats import RESULTS, abba_order, now_utc, paired_ratio
from infra.hpc import polling, ssh
from infra.hpc.job_script import render_job_script
from infra.hpc.registry import scheduler_for
from infra.hpc.scheduler import JobSpec, Scheduler
from infra.toolchain.pins import REPO_ROOT
from localenv import satori
from localenv.layout import Layout, Ports, default_layout

RUN_DIR = "atlas-bench/sweep"
JOB_NAME = "atlas-bench-sweep"
SIDES = ("atlas", "ssh-mux", "array", "submitit", "ssh-fresh")
# Sides a scheduler cannot have, with the reason the JSON and the report give.
NOT_MEASURED: dict[str, dict[str, str]] = {"slurm": {}, "lsf": {"submitit": "submitit has no LSF executor"}}
SUBMITIT_REQUIREMENTS = REPO_ROOT / "bench" / "requirements-login-node.txt"
SUBMITIT_DRIVER = REPO_ROOT / "bench" / "submitit_sweep.py"
# The login user's venv for submitit, under their home (kept between runs: a researcher's is too).
SUBMITIT_VENV = ".venvs/atlas-bench-submitit"
SUBMITIT_CHECK_JOBS = 2


def sides_for(scheduler: str) -> tuple[str, ...]:
    return tuple(side for side in SIDES if side not in NOT_MEASURED[scheduler])


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


def script_path(sched: Scheduler) -> str:
    return f".atlas/jobs/sweep{sched.script_suffix}"


# Where the Atlas side's seconds go, per sweep (the last sweep's; run_sweeps keeps each round's).
ATLAS_PHASES = ("login and staging", "submissions", "status query")
atlas_phase_s: dict[str, float] = {}


def sweep_atlas(info: dict[str, Any], sched: Scheduler, script: str, jobs: int) -> list[str]:
    started = time.perf_counter()
    ssh.close_all()
    polling.reset_boards()
    conn = ssh.connection(endpoint(info))
    ssh.make_directories(conn, [RUN_DIR, f"{RUN_DIR}/.atlas/jobs", f"{RUN_DIR}/logs"])
    ssh.upload_bytes(conn, script.encode(), f"{RUN_DIR}/{script_path(sched)}")
    staged = time.perf_counter()
    ids = []
    for _ in range(jobs):
        result = ssh.run_remote(conn, sched.submit_command(RUN_DIR, script_path(sched), []), check=False)
        ids.append(sched.parse_submission(result))
    submitted = time.perf_counter()
    board = polling.board_for(conn.endpoint.pool_key, 1.0)
    states = board.states(sched, lambda c: ssh.run_remote(conn, c, check=False, safe_to_retry=True), ids)
    if any(s is None for s in states.values()):
        raise SystemExit(f"atlas sweep: some jobs unknown to the scheduler: {states}")
    marks = (started, staged, submitted, time.perf_counter())
    atlas_phase_s.update({phase: marks[i + 1] - marks[i] for i, phase in enumerate(ATLAS_PHASES)})
    return ids


def openssh(argv: list[str], command: str) -> ssh.RemoteResult:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    return ssh.RemoteResult(command, result.returncode, result.stdout, result.stderr)


def mux_argv(info: dict[str, Any], control_path: Path, command: str) -> list[str]:
    base = satori.ssh_client_argv(info, command)
    options = ["-o", "ControlMaster=auto", "-o", f"ControlPath={control_path}", "-o", "ControlPersist=60"]
    return [base[0], *options, *base[1:]]


def sweep_mux(info: dict[str, Any], sched: Scheduler, jobs: int, control_path: Path) -> list[str]:
    command = sched.submit_command(RUN_DIR, script_path(sched), [])
    return [sched.parse_submission(openssh(mux_argv(info, control_path, command), command)) for _ in range(jobs)]


def close_mux(info: dict[str, Any], control_path: Path) -> None:
    argv = mux_argv(info, control_path, "true")
    subprocess.run([argv[0], "-O", "exit", *argv[1:-1]], capture_output=True, timeout=30, check=False)


def sweep_fresh(info: dict[str, Any], sched: Scheduler, jobs: int) -> list[str]:
    command = sched.submit_command(RUN_DIR, script_path(sched), [])
    return [sched.parse_submission(openssh(satori.ssh_client_argv(info, command), command)) for _ in range(jobs)]


def array_command(scheduler: str, jobs: int) -> str:
    path = shlex.quote(f".atlas/jobs/sweep{scheduler_for(scheduler).script_suffix}")
    if scheduler == "slurm":
        return f"cd -- {RUN_DIR} && sbatch --parsable --array=1-{jobs} {path}"
    return f"cd -- {RUN_DIR} && bsub -J {shlex.quote(f'{JOB_NAME}[1-{jobs}]')} < {path}"


def sweep_array(info: dict[str, Any], scheduler: str, jobs: int) -> list[str]:
    command = array_command(scheduler, jobs)
    array_id = scheduler_for(scheduler).parse_submission(openssh(satori.ssh_client_argv(info, command), command))
    return [f"{array_id}[{i}]" for i in range(1, jobs + 1)]


def submitit_setup_command(requirements_sha256: str) -> str:
    """Shell text, run as the login user: (re)create the submitit venv unless it was built from
    these exact requirements (a stamp holds their sha256), then print submitit's version and the
    venv's python version. pip checks every file against the requirements' hashes."""
    venv = f'"$HOME"/{SUBMITIT_VENV}'
    stamp = f"{venv}/.atlas-requirements-sha256"
    requirements = shlex.quote(f"{RUN_DIR}/{SUBMITIT_REQUIREMENTS.name}")
    sha = shlex.quote(requirements_sha256)
    probe = "import submitit, sys; print(submitit.__version__, sys.version.split()[0])"
    return (
        "set -e; "
        f'if [ "$(cat {stamp} 2>/dev/null)" != {sha} ]; then '
        f"rm -rf {venv}; {satori.SYSTEM_PYTHON} -m venv {venv}; "
        f"{venv}/bin/python -m pip install --disable-pip-version-check -q --require-hashes -r {requirements}; "
        f"echo {sha} > {stamp}; fi; "
        f"{venv}/bin/python -c {shlex.quote(probe)}"
    )


def submitit_command(sched: Scheduler, jobs: int, wait: bool = False) -> str:
    """Shell text for the login node: the researcher's sweep script, from the sweep's directory."""
    argv = [f"--jobs={jobs}", f"--script={script_path(sched)}", f"--name={JOB_NAME}", *(["--wait"] if wait else [])]
    return f'cd -- {RUN_DIR} && "$HOME"/{SUBMITIT_VENV}/bin/python {SUBMITIT_DRIVER.name} ' + " ".join(
        shlex.quote(a) for a in argv
    )


def parse_submitit_ids(stdout: str) -> list[str]:
    """The job ids bench/submitit_sweep.py prints, one a line: `<array id>_<task index>`."""
    return [line.strip() for line in stdout.splitlines() if re.fullmatch(r"\d+_\d+", line.strip())]


def prepare_submitit(info: dict[str, Any], sched: Scheduler, jobs: int) -> dict[str, Any]:
    """Untimed: install submitit for the login user, stage the sweep script, and run one small
    map_array to completion, so the timed side is known to submit jobs that run."""
    conn = ssh.connection(endpoint(info))
    requirements = SUBMITIT_REQUIREMENTS.read_bytes()
    ssh.upload_bytes(conn, requirements, f"{RUN_DIR}/{SUBMITIT_REQUIREMENTS.name}")
    ssh.upload_bytes(conn, SUBMITIT_DRIVER.read_bytes(), f"{RUN_DIR}/{SUBMITIT_DRIVER.name}")
    # Job folders of earlier runs (pickles, logs): the timed sweeps start from an empty one.
    ssh.run_remote(conn, f"rm -rf -- {RUN_DIR}/submitit")
    setup = ssh.run_remote(conn, submitit_setup_command(hashlib.sha256(requirements).hexdigest()), timeout=600)
    version, python = setup.stdout.strip().splitlines()[-1].split()  # the probe's line comes last
    check = ssh.run_remote(conn, submitit_command(sched, SUBMITIT_CHECK_JOBS, wait=True), timeout=300)
    ids = parse_submitit_ids(check.stdout)
    done = [line.split()[1] for line in check.stdout.splitlines() if line.startswith("ok ")]
    if len(ids) != SUBMITIT_CHECK_JOBS or done != ids:
        raise SystemExit(f"submitit check: expected {SUBMITIT_CHECK_JOBS} jobs to run, got:\n{check.stdout}")
    cancel_all(info)
    return {
        "version": version,
        "python": f"{python} ({SUBMITIT_VENV} in the login user's home, from {SUBMITIT_REQUIREMENTS.name})",
        "runs": (
            f"one ssh call: {submitit_command(sched, jobs)}; bench/submitit_sweep.py does "
            f"AutoExecutor(cluster='slurm').map_array over 1..{jobs} (one sbatch of "
            f"a job array); each task runs `bash {script_path(sched)} <i>` under submitit's srun"
        ),
        "check": f"{SUBMITIT_CHECK_JOBS} jobs run to completion before the rounds: {', '.join(done)}",
    }


def sweep_submitit(info: dict[str, Any], sched: Scheduler, jobs: int) -> list[str]:
    command = submitit_command(sched, jobs)
    result = openssh(satori.ssh_client_argv(info, command), command)
    if result.exit_code != 0:
        raise SystemExit(f"submitit side: exit {result.exit_code}:\n{result.stdout}{result.stderr}")
    return parse_submitit_ids(result.stdout)


def cancel_all(info: dict[str, Any]) -> None:
    conn = ssh.connection(endpoint(info))
    ssh.run_remote(conn, 'scancel --user "$USER" || true', safe_to_retry=True)


def logins(sshd_log: Path) -> int:
    return sshd_log.read_text(errors="replace").count("Accepted publickey")


def run_sweeps(info: dict[str, Any], sshd_log: Path, scheduler: str, jobs: int, rounds: int) -> dict[str, Any]:
    sched = scheduler_for(scheduler)
    sides_here = sides_for(scheduler)
    spec = JobSpec(job_name=JOB_NAME, step="sweep", workdir=RUN_DIR, log_dir="logs", command=("true",))
    script = render_job_script(sched, spec)
    sweep_atlas(info, sched, script, 0)  # stage once, untimed, so every side finds the script
    submitit_setup = prepare_submitit(info, sched, jobs) if "submitit" in sides_here else None
    samples: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="atlas-mux-") as tmp:
        control_path = Path(tmp) / "cm-%C"
        sides: dict[str, Callable[[], list[str]]] = {
            "atlas": lambda: sweep_atlas(info, sched, script, jobs),
            "ssh-mux": lambda: sweep_mux(info, sched, jobs, control_path),
            "array": lambda: sweep_array(info, scheduler, jobs),
            "submitit": lambda: sweep_submitit(info, sched, jobs),
            "ssh-fresh": lambda: sweep_fresh(info, sched, jobs),
        }
        for round_index, order in enumerate(abba_order(sides_here, rounds)):
            for side in order:
                before = logins(sshd_log)
                started = time.perf_counter()
                ids = sides[side]()
                elapsed = time.perf_counter() - started
                if side == "ssh-mux":
                    close_mux(info, control_path)  # the next round's master logs in anew, timed
                opened = logins(sshd_log) - before
                if len(set(ids)) != jobs:
                    raise SystemExit(f"{side}: expected {jobs} distinct job ids, got {len(set(ids))}")
                sample = {"round": round_index, "side": side, "seconds": round(elapsed, 4), "logins": opened}
                if side == "atlas":
                    sample["phases_s"] = {phase: round(s, 4) for phase, s in atlas_phase_s.items()}
                samples.append(sample)
                cancel_all(info)
            print(
                f"round {round_index + 1}/{rounds}: "
                + ", ".join(
                    f"{s['side']} {s['seconds']:.2f} s ({s['logins']} login(s))" for s in samples[-len(sides_here) :]
                ),
                flush=True,
            )
    result = summarise(samples, scheduler, jobs, rounds)
    if submitit_setup is not None:
        result["submitit"] = submitit_setup
    return result


def summarise(samples: list[dict[str, Any]], scheduler: str, jobs: int, rounds: int) -> dict[str, Any]:
    """Medians, logins and paired ratios of the sides measured; those not measured by name, with
    the reason, and in no figure (a reading not taken is not a zero)."""
    sides_here = sides_for(scheduler)
    seconds = {side: [s["seconds"] for s in samples if s["side"] == side] for side in sides_here}
    logins_by_side = {side: sorted({s["logins"] for s in samples if s["side"] == side}) for side in sides_here}
    return {
        "scheduler": scheduler,
        "jobs": jobs,
        "rounds": rounds,
        "order": "ABBA (each round the reverse of the one before)",
        "sides": list(sides_here),
        "not_measured": {side: f"not measured: {why}" for side, why in NOT_MEASURED[scheduler].items()},
        "median_s": {side: round(statistics.median(v), 4) for side, v in seconds.items()},
        "per_job_median_ms": {side: round(1000 * statistics.median(v) / jobs, 2) for side, v in seconds.items()},
        "logins_per_sweep": logins_by_side,
        # Above 1: Atlas's sweep took less time than the baseline's.
        "baseline_over_atlas": {side: paired_ratio(seconds[side], seconds["atlas"]) for side in sides_here[1:]},
        # Atlas's sweep split: its fixed cost (a login in Python, SFTP staging, the status query
        # through the board, which gathers callers for polling.GATHER_S first; no baseline asks
        # for status) beside the submissions themselves.
        "atlas_phase_median_s": {
            phase: round(statistics.median(split[phase] for split in splits), 4) for phase in ATLAS_PHASES
        }
        if (splits := [s["phases_s"] for s in samples if "phases_s" in s])
        else {},
        "samples": samples,
    }


def profile(info: dict[str, Any], scheduler: str, count: int) -> dict[str, Any]:
    """Milliseconds per command, median of `count`, each way a command can reach the login node."""
    sched = scheduler_for(scheduler)
    ssh.close_all()
    conn = ssh.connection(endpoint(info))
    transport = conn.transport()

    def bare_channel(command: str) -> None:
        channel = transport.open_session()
        channel.exec_command(command)
        channel.recv_exit_status()
        channel.close()

    submit = sched.submit_command(RUN_DIR, script_path(sched), [])
    with tempfile.TemporaryDirectory(prefix="atlas-mux-") as tmp:
        control_path = Path(tmp) / "cm-%C"
        openssh(mux_argv(info, control_path, "true"), "true")  # the master, untimed
        ways: dict[str, Callable[[], object]] = {
            "paramiko exec channel, `true`": lambda: bare_channel("true"),
            "paramiko exec channel, `bash -lc true`": lambda: bare_channel("bash -lc true"),
            "atlas run_remote(`true`) (bash -lc, output read to EOF)": lambda: ssh.run_remote(conn, "true"),
            "openssh over ControlMaster, `bash -lc true`": lambda: openssh(mux_argv(info, control_path, "true"), ""),
            "atlas run_remote(submission)": lambda: ssh.run_remote(conn, submit),
            "openssh over ControlMaster, submission": lambda: openssh(mux_argv(info, control_path, submit), ""),
        }
        timings: dict[str, list[float]] = {way: [] for way in ways}
        for round_index in range(count):
            for way in ways if round_index % 2 == 0 else reversed(list(ways)):
                started = time.perf_counter()
                ways[way]()
                timings[way].append(1000 * (time.perf_counter() - started))
        close_mux(info, control_path)
    cancel_all(info)
    return {
        way: {"median_ms": round(statistics.median(t), 2), "samples_ms": [round(x, 2) for x in t]}
        for way, t in timings.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--scheduler", choices=("slurm", "lsf"), default="slurm")
    parser.add_argument("--profile", action="store_true", help="also time one submission's parts (30 of each)")
    parser.add_argument("--up", action="store_true", help="start the local Satori first if it is not running")
    parser.add_argument("--state-dir", type=Path, help="a local environment's state dir (with --port-base)")
    parser.add_argument("--port-base", type=int)
    parser.add_argument("--out", type=Path, help="write the JSON here (smoke runs), not to bench/results/")
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
    sshd_log = Path(status["daemons"]["sshd"]["log"])
    result: dict[str, Any] = {
        "bench": "hpc_sweep",
        "date": now_utc(),
        **run_record(),
        "provenance": "local Satori: real OpenSSH server and Slurm on this host"
        + ("; LSF's command set is Atlas's stand-in over that Slurm" if args.scheduler == "lsf" else ""),
        "args": sys.argv[1:],
        **run_sweeps(info, sshd_log, args.scheduler, args.jobs, args.rounds),
    }
    if args.profile:
        result["profile_ms"] = profile(info, args.scheduler, 30)
    for side, why in result["not_measured"].items():
        print(f"{side:<10} {why}")
    for side in result["sides"]:
        print(
            f"{side:<10} median {result['median_s'][side]:7.2f} s for {args.jobs} jobs "
            f"({result['per_job_median_ms'][side]:6.1f} ms/job), logins per sweep {result['logins_per_sweep'][side]}"
        )
    split = ", ".join(f"{phase} {s:.2f} s" for phase, s in result["atlas_phase_median_s"].items())
    print(f"atlas split (medians): {split or 'not measured (no Atlas sweep)'}")
    for side, ratio in result["baseline_over_atlas"].items():
        low, high = ratio["ci95"]
        verdict = "Atlas faster" if low > 1 else "Atlas slower" if high < 1 else "no clear winner"
        print(
            f"{side:<10} / atlas: {ratio['median']:.2f} (95 % CI {ratio['ci95'][0]:.2f} to {ratio['ci95'][1]:.2f}): "
            f"{verdict}"
        )
    for way, timing in (result.get("profile_ms") or {}).items():
        print(f"  {timing['median_ms']:7.1f} ms  {way}")
    out: Path = args.out or RESULTS / f"hpc-sweep-{args.scheduler}-{result['date'][:10]}.json"
    out = write_result(result, out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
