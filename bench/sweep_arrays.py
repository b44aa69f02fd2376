"""A sweep as one job array: Atlas's `pulumi up` of a swept step against the array a user submits by hand.

Every side submits the same sweep of `--points` points to the local Satori (real OpenSSH server,
real Slurm; LSF's command set is Atlas's stand-in over that Slurm), in the same run, ABBA order
(each round's order the reverse of the last), `--rounds` rounds:
- atlas-up: `pulumi up --yes --skip-preview` of Atlas's own stack program (stacks/__main__.py) on
  a stack whose only side is the local Satori and whose workload is one swept step (a grid of
  `--points` values, `sleep` with the value appended; telemetry on, as a stack's default). Timed
  from the CLI's start to its exit: the engine, the language host, the HPC side's StagedFiles
  (the table of points, the array script, the workload's folder, the telemetry sampler, over
  SFTP, checked by sha256) and its SweepJob: the array submitted and every element's first status
  read (one query per array). Each round is a new stack (a new run folder and job names), made
  and removed untimed; its arrays are cancelled after the timing.
- atlas-create: the same two resources' providers called in this process as the engine calls
  them (StagedFilesProvider.create, SweepJobProvider.create) with a new SSH login: what Atlas's
  own code costs without Pulumi's engine and language host.
- array: one `sbatch`/`bsub` of the SAME array script (the one the untimed warm-up `pulumi up`
  staged, table beside it) over one OpenSSH ControlMaster connection, the master's login inside
  the timing, as a user scripts it. It reads no status afterwards (in its favour) and stages
  nothing (the files are there: in its favour).
- submitit (Slurm only): `executor.map_array` over the points on the login node, one `ssh` call,
  as bench/hpc_sweep.py's submitit side (bench/submitit_sweep.py; installed and checked untimed).
  LSF: not measured (submitit has no LSF executor).
Between sides every job of the login user is cancelled (untimed).

The JSON holds every round, medians, and per Atlas side the paired ratio baseline/atlas per round
with a 95 % bootstrap interval (above 1: Atlas faster); the issue's goal, Atlas within 1.2x of the
hand-made array, is a ratio array/atlas of at least 1/1.2.

`--preview` measures instead what a sweep's size does to a stack: for each of `--preview-points`
(default 10 and 1,000) a stack is stood up (untimed), then `pulumi preview` with no change is
timed `--preview-runs` times per stack, alternating (ABBA), and the stack's exported state is
measured: its size in bytes and each resource's share.

    .venv/bin/python -m bench.sweep_arrays [--points 50] [--rounds 10] [--scheduler slurm|lsf]
        [--preview [--preview-points 10,1000] [--preview-runs 6]] [--up]
        [--state-dir DIR --port-base N]   (default: ATLAS_LOCALENV_DIR / ATLAS_LOCALENV_PORT_BASE)
        [--out FILE]   (default: bench/results/sweep-arrays-<scheduler>-<points>-<date>.json,
                        sweep-preview-<scheduler>-<date>.json)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench import hpc_sweep
from bench.provenance import run_record, write_result
from bench.stats import RESULTS, abba_order, now_utc, paired_ratio
from infra.hpc import arrays, polling, providers, ssh
from infra.hpc.components import workload_source_files
from infra.hpc.job_script import SubmissionKey, render_job_script, sweep_scripts
from infra.hpc.pipeline import _chunk_entries, run_directories, staged_file_entries
from infra.hpc.providers import StagedFilesProvider
from infra.hpc.providers.sweep_job import SweepJobProvider
from infra.hpc.registry import scheduler_for
from infra.hpc.scheduler import JobSpec, Scheduler
from infra.workload.load import load_workload
from localenv import satori
from localenv.layout import Layout, Ports, default_layout
from tests.e2e.pulumi_cli import PulumiProject

ENVIRONMENT = "satori"
WORKLOAD = "sweepbench"
REMOTE_ROOT = "atlas-bench/sweep-arrays"
QUEUE = "normal"
SIDES = ("atlas-up", "atlas-create", "array", "submitit")
ATLAS_SIDES = ("atlas-up", "atlas-create")
NOT_MEASURED: dict[str, dict[str, str]] = {"slurm": {}, "lsf": {"submitit": "submitit has no LSF executor"}}
GOAL_WITHIN = 1.2  # the issue's goal: Atlas within 1.2x of the hand-made array
RESOURCES = {"nodes": 1, "gpus_per_node": 0, "cpus_per_task": 1, "memory": "256Mi", "walltime": "00:10:00"}


def sides_for(scheduler: str) -> tuple[str, ...]:
    return tuple(side for side in SIDES if side not in NOT_MEASURED[scheduler])


def workload_definition(points: int) -> dict[str, Any]:
    """One swept step over `points` values of `lr` (1..N): each element runs `sleep 300 <lr>`, so
    the elements the node starts hold it until they are cancelled, the rest stay pending."""
    return {
        "version": 1,
        "name": WORKLOAD,
        "description": f"bench/sweep_arrays.py: one step swept over {points} points",
        "source": {"folder": "."},
        "data": {"outputs": [{"name": "points", "path": "results/train"}]},
        "steps": [
            {
                "name": "train",
                "command": ["sleep", "300"],
                "outputs": ["points"],
                "resources": RESOURCES,
                "sweep": {"grid": {"lr": list(range(1, points + 1))}, "args": ["{lr}"], "results": "results/train"},
            }
        ],
        "logs": {"root": "logs"},
        "telemetry": {"root": "telemetry"},
    }


def workload_path(points: int) -> str:
    """The definition's path in the project copy (its folder holds it alone: the folder is staged)."""
    return f"workloads/{WORKLOAD}-{points}/workload.yaml"


@dataclass
class Bench:
    """The project copy, the local Satori, and the scheduler the sides use."""

    proj: PulumiProject
    info: dict[str, Any]
    scheduler: str
    sshd_log: Path

    @property
    def sched(self) -> Scheduler:
        return scheduler_for(self.scheduler)

    def write_workload(self, points: int) -> None:
        path = self.proj.root / workload_path(points)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(workload_definition(points), sort_keys=False))
        # The folder source stages what is beside the definition: one small file, as a step's script would be.
        (path.parent / "README").write_text(f"bench/sweep_arrays.py: {points} points of `sleep 300 <lr>`\n")

    def stack_config(self, points: int) -> dict[str, Any]:
        info = self.info
        return {
            "atlas:workload": workload_path(points),
            "atlas:runId": "1",
            "atlas:hpc": {
                ENVIRONMENT: {
                    "scheduler": self.scheduler,
                    "provenance": "local stand-in: LSF commands on Slurm"
                    if self.scheduler == "lsf"
                    else "local stand-in: Slurm on this host",
                    "host": info["host"],
                    "port": int(info["port"]),
                    "user": info["user"],
                    "queue": QUEUE,
                    "known_hosts_file": info["known_hosts_file"],
                    "private_key_file": info["key_file"],
                    "remote_work_dir": REMOTE_ROOT,
                    "poll_interval_seconds": 2,
                }
            },
        }

    def new_stack(self, name: str, points: int) -> None:
        path = self.proj.root / "stacks" / f"Pulumi.{name}.yaml"
        path.write_text(yaml.safe_dump({"config": self.stack_config(points)}, sort_keys=False))
        self.proj.run("stack", "init", name)

    def remove_stack(self, name: str) -> None:
        self.proj.run("stack", "rm", "--force", "--yes", "-s", name)

    def run_dir(self, stack: str) -> str:
        return f"{REMOTE_ROOT}/{stack}/{ENVIRONMENT}/{WORKLOAD}"

    def sweep_output(self, stack: str) -> dict[str, Any]:
        env = self.proj.outputs(stack)["environments"][ENVIRONMENT]
        (step,) = [s for s in env["steps"] if s["name"] == "train"]
        return dict(step["sweep"])

    def run(self, command: str, timeout: float = 120) -> ssh.RemoteResult:
        return ssh.run_remote(ssh.connection(hpc_sweep.endpoint(self.info)), command, timeout=timeout)

    def cancel_all(self) -> None:
        self.run('scancel --user "$USER" || true')


def check_elements(sweep: Mapping[str, Any], points: int, side: str) -> None:
    """Every element of the sweep known (a letter each, none `?`): submitted and read."""
    letters = arrays.decode(str(sweep["elements"]))
    if len(letters) != points or "?" in letters:
        raise SystemExit(f"{side}: expected {points} elements read, got {letters[:80]!r}")


def side_atlas_up(bench: Bench, stack: str, points: int) -> float:
    bench.new_stack(stack, points)
    started = time.perf_counter()
    bench.proj.run("up", "--yes", "--skip-preview", "-s", stack)
    elapsed = time.perf_counter() - started
    check_elements(bench.sweep_output(stack), points, "atlas-up")
    return elapsed


# Where the atlas-create side's seconds went, the last time it ran (run_rounds keeps each round's).
create_phases_s: dict[str, float] = {}


def side_atlas_create(bench: Bench, stack: str, points: int) -> float:
    """StagedFiles and SweepJob created by their providers, with the inputs the HPC side gives
    them (infra/hpc/components.py), from a new login; the inputs are built before the timing."""
    workload = load_workload(bench.proj.root / workload_path(points), bench.proj.root)
    sched = bench.sched
    run_dir = bench.run_dir(stack)
    key = SubmissionKey("atlas", stack, ENVIRONMENT, "1", run_dir)
    sweep = sweep_scripts(workload, sched, key, QUEUE, telemetry=True)["train"]
    info = bench.info
    known_hosts = Path(info["known_hosts_file"])
    target = {
        "ssh": providers.ssh_inputs(
            info["host"], int(info["port"]), info["user"], known_hosts.read_text(), f"file {known_hosts}", None
        ),
        "ssh_secret": {"private_key": Path(info["key_file"]).read_text(), "passphrase": None},
    }
    files = staged_file_entries(
        {}, workload_source_files(workload, bench.proj.root), True, RuntimeError, {"train": sweep}
    )
    staged = {**target, "run_dir": run_dir, "files": files, "directories": run_directories(workload)}
    props = {
        **target,
        "provider_version": providers.PROVIDER_VERSION,
        "scheduler": bench.scheduler,
        "scheduler_options": {},
        "step": "train",
        "run_dir": run_dir,
        "table_path": sweep.table_path,
        "table_sha256": ssh.sha256_hex(sweep.table.encode()),
        "chunks": _chunk_entries(sweep),
        "log_pattern": f"logs/train.{sched.array_log_placeholder}",
        "requested_queue": QUEUE,
        "after_job_ids": [],
        "after_definitions": [],
        "poll_interval_s": 2.0,
        "size": points,
    }
    ssh.close_all()
    polling.reset_boards()
    started = time.perf_counter()
    StagedFilesProvider().create(staged)
    was_staged = time.perf_counter()
    created = SweepJobProvider().create(props)
    elapsed = time.perf_counter() - started
    assert created.outs is not None
    check_elements(created.outs, points, "atlas-create")
    ssh.close_all()
    create_phases_s.update(
        {"login and staging": was_staged - started, "sweep create": elapsed - (was_staged - started)}
    )
    return elapsed


def side_array(bench: Bench, run_dir: str, script_path: str, control_path: Path) -> float:
    command = bench.sched.submit_command(run_dir, script_path, [])
    started = time.perf_counter()
    result = hpc_sweep.openssh(hpc_sweep.mux_argv(bench.info, control_path, command), command)
    array_id = bench.sched.parse_submission(result)
    elapsed = time.perf_counter() - started
    hpc_sweep.close_mux(bench.info, control_path)  # the next round's master logs in anew, timed
    if not array_id:
        raise SystemExit(f"array: no array id in {result.stdout!r}")
    return elapsed


def side_submitit(bench: Bench, points: int) -> float:
    started = time.perf_counter()
    ids = hpc_sweep.sweep_submitit(bench.info, bench.sched, points)
    elapsed = time.perf_counter() - started
    if len(set(ids)) != points:
        raise SystemExit(f"submitit: expected {points} task ids, got {len(set(ids))}")
    return elapsed


def open_bench(args: argparse.Namespace, tmp: Path) -> Bench:
    layout: Layout = (
        Layout(state_dir=args.state_dir, ports=Ports(args.port_base))
        if args.state_dir and args.port_base
        else default_layout()
    )
    status = satori.up(layout) if args.up else satori.status(layout)
    if not status["ssh"]["running"]:
        raise SystemExit("the local Satori is not running: `scripts/localenv up`, or pass --up")
    proj = PulumiProject.create(tmp)
    return Bench(proj, status["ssh"], args.scheduler, Path(status["daemons"]["sshd"]["log"]))


def run_rounds(bench: Bench, points: int, rounds: int) -> dict[str, Any]:
    bench.write_workload(points)
    sides_here = sides_for(bench.scheduler)
    bench.cancel_all()  # what an interrupted run left in the queue
    bench.run(f"rm -rf -- {REMOTE_ROOT}")
    # Untimed warm-up: the stack program's first run (its imports compiled), and the array
    # script and table the `array` side submits, staged where this stack put them.
    # Every stack's name (hence its run folder and job names) new to this run: an array of an
    # earlier run with the same name would be adopted by the SweepJob, not submitted.
    tag = time.strftime("%H%M%S")
    warm = f"warmup-{tag}"
    warm_s = side_atlas_up(bench, warm, points)
    warm_sweep = bench.sweep_output(warm)
    if len(warm_sweep["arrays"]) != 1:
        raise SystemExit(f"{points} points make {len(warm_sweep['arrays'])} arrays here: the array side submits one")
    bench.cancel_all()
    script_path = f".atlas/jobs/train{bench.sched.script_suffix}"
    script_text = bench.run(f"cat -- {bench.run_dir(warm)}/{script_path}").stdout
    submitit_setup = None
    if "submitit" in sides_here:
        job = render_job_script(
            bench.sched,
            JobSpec(
                job_name=hpc_sweep.JOB_NAME, step="sweep", workdir=hpc_sweep.RUN_DIR, log_dir="logs", command=("true",)
            ),
        )
        hpc_sweep.sweep_atlas(bench.info, bench.sched, job, 0)  # stages submitit's per-task script
        submitit_setup = hpc_sweep.prepare_submitit(bench.info, bench.sched, points)
    samples: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="atlas-mux-") as mux:
        control_path = Path(mux) / "cm-%C"
        for round_index, order in enumerate(abba_order(sides_here, rounds)):
            for side in order:
                stack = f"r{round_index}-{side}-{tag}"
                before = hpc_sweep.logins(bench.sshd_log)
                if side == "atlas-up":
                    seconds = side_atlas_up(bench, stack, points)
                elif side == "atlas-create":
                    seconds = side_atlas_create(bench, stack, points)
                elif side == "array":
                    seconds = side_array(bench, bench.run_dir(warm), script_path, control_path)
                else:
                    seconds = side_submitit(bench, points)
                opened = hpc_sweep.logins(bench.sshd_log) - before
                bench.cancel_all()
                if side == "atlas-up":
                    bench.remove_stack(stack)
                sample = {"round": round_index, "side": side, "seconds": round(seconds, 4), "logins": opened}
                if side == "atlas-create":
                    sample["phases_s"] = {phase: round(v, 4) for phase, v in create_phases_s.items()}
                samples.append(sample)
            recent = samples[-len(sides_here) :]
            print(
                f"round {round_index + 1}/{rounds}: "
                + ", ".join(f"{s['side']} {s['seconds']:.2f} s ({s['logins']} login(s))" for s in recent),
                flush=True,
            )
    bench.cancel_all()
    bench.remove_stack(warm)
    bench.run(f"rm -rf -- {REMOTE_ROOT}")
    result = summarise(samples, bench.scheduler, points, rounds)
    result["atlas_up_warmup_s"] = round(warm_s, 4)
    result["array_script"] = {"path": script_path, "text": script_text, "table": "beside it, staged by the warm-up"}
    if submitit_setup is not None:
        result["submitit"] = submitit_setup
    return result


def summarise(samples: list[dict[str, Any]], scheduler: str, points: int, rounds: int) -> dict[str, Any]:
    sides_here = sides_for(scheduler)
    seconds = {side: [s["seconds"] for s in samples if s["side"] == side] for side in sides_here}
    ratios = {
        atlas: {side: paired_ratio(seconds[side], seconds[atlas]) for side in sides_here if side not in ATLAS_SIDES}
        for atlas in ATLAS_SIDES
    }
    goal = {}
    for atlas in ATLAS_SIDES:
        array = ratios[atlas]["array"]
        low, high = array["ci95"]
        within = "yes" if low >= 1 / GOAL_WITHIN else "no" if high < 1 / GOAL_WITHIN else "not clear"
        verdict = {"within_1.2x_of_array": within, "atlas_over_array_median": round(1 / array["median"], 3)}
        if "submitit" in ratios[atlas]:
            s_low, s_high = ratios[atlas]["submitit"]["ci95"]
            verdict["ahead_of_submitit"] = "yes" if s_low > 1 else "no" if s_high < 1 else "not clear"
        goal[atlas] = verdict
    return {
        "scheduler": scheduler,
        "points": points,
        "rounds": rounds,
        "order": "ABBA (each round the reverse of the one before)",
        "sides": list(sides_here),
        "not_measured": {side: f"not measured: {why}" for side, why in NOT_MEASURED[scheduler].items()},
        "median_s": {side: round(statistics.median(v), 4) for side, v in seconds.items()},
        "logins_per_sweep": {side: sorted({s["logins"] for s in samples if s["side"] == side}) for side in sides_here},
        # Above 1: Atlas's side took less time than the baseline.
        "baseline_over_atlas": ratios,
        "goal": goal,
        # The providers' seconds split: the SFTP staging (a new login first) and the SweepJob's create
        # (the array lookup by name, the retired ids, the submission, every element's status).
        "atlas_create_phase_median_s": {
            phase: round(statistics.median(split[phase] for split in splits), 4) for phase in splits[0]
        }
        if (splits := [s["phases_s"] for s in samples if "phases_s" in s])
        else {},
        "samples": samples,
    }


def state_sizes(bench: Bench, stack: str) -> dict[str, Any]:
    """The stack's exported state: its size, and each resource's outputs' size by type."""
    exported = bench.proj.run("stack", "export", "-s", stack).stdout
    resources = json.loads(exported)["deployment"].get("resources") or []
    by_type: dict[str, int] = {}
    for resource in resources:
        kind = resource["type"].split(":")[-1]
        size = len(json.dumps(resource, separators=(",", ":")))
        by_type[kind] = by_type.get(kind, 0) + size
    return {"bytes": len(exported.encode()), "resources": len(resources), "bytes_by_type": by_type}


def run_preview(bench: Bench, sizes: list[int], runs: int) -> dict[str, Any]:
    bench.run(f"rm -rf -- {REMOTE_ROOT}")
    tag = time.strftime("%H%M%S")
    stacks = {n: f"preview-{n}-{tag}" for n in sizes}
    up_s: dict[int, float] = {}
    for n, stack in stacks.items():
        bench.write_workload(n)
        up_s[n] = side_atlas_up(bench, stack, n)
        bench.cancel_all()
    samples: list[dict[str, Any]] = []
    for round_index, order in enumerate(abba_order([str(n) for n in sizes], runs)):
        for label in order:
            stack = stacks[int(label)]
            started = time.perf_counter()
            out = bench.proj.run("preview", "--diff", "-s", stack).stdout
            elapsed = time.perf_counter() - started
            # What preview says it would do: a no-change preview lists nothing but "unchanged".
            planned = [line.strip() for line in out.splitlines() if line.strip().startswith(("+", "~", "-", "+-"))]
            summary = out[out.rfind("Resources:") :].split("\n\n")[0].strip() if "Resources:" in out else out[-400:]
            sample = {"round": round_index, "points": int(label), "seconds": round(elapsed, 4), "summary": summary}
            if planned:
                sample["planned"] = planned
                print(f"preview of {stack} plans changes: {planned}", flush=True)
            samples.append(sample)
        print(
            f"preview round {round_index + 1}/{runs}: "
            + ", ".join(f"{s['points']} points {s['seconds']:.2f} s" for s in samples[-len(sizes) :]),
            flush=True,
        )
    states = {n: state_sizes(bench, stack) for n, stack in stacks.items()}
    timings = {n: [s["seconds"] for s in samples if s["points"] == n] for n in sizes}
    small, large = sizes[0], sizes[-1]
    for stack in stacks.values():
        bench.remove_stack(stack)
    bench.cancel_all()
    bench.run(f"rm -rf -- {REMOTE_ROOT}")
    return {
        "scheduler": bench.scheduler,
        "points": sizes,
        "runs": runs,
        "order": "ABBA over the stacks (each round the reverse of the one before)",
        "first_up_s": {str(n): round(s, 4) for n, s in up_s.items()},
        "preview_median_s": {str(n): round(statistics.median(v), 4) for n, v in timings.items()},
        "no_change": all("planned" not in s for s in samples),
        # Above 1: the larger sweep's preview took longer.
        "preview_large_over_small": paired_ratio(timings[large], timings[small]),
        "state": {str(n): s for n, s in states.items()},
        "state_large_over_small": round(states[large]["bytes"] / states[small]["bytes"], 3),
        "samples": samples,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--scheduler", choices=("slurm", "lsf"), default="slurm")
    parser.add_argument("--preview", action="store_true", help="time no-change previews and state size instead")
    parser.add_argument("--preview-points", default="10,1000")
    parser.add_argument("--preview-runs", type=int, default=6)
    parser.add_argument("--up", action="store_true", help="start the local Satori first if it is not running")
    parser.add_argument("--state-dir", type=Path)
    parser.add_argument("--port-base", type=int)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    provenance = "local Satori: real OpenSSH server and Slurm on this host" + (
        "; LSF's command set is Atlas's stand-in over that Slurm (bsub, bjobs, bkill are scripts that call Slurm)"
        if args.scheduler == "lsf"
        else ""
    )
    origin = run_record()
    with tempfile.TemporaryDirectory(prefix="atlas-sweep-arrays-") as tmp:
        bench = open_bench(args, Path(tmp))
        head: dict[str, Any] = {
            "bench": "sweep_arrays",
            "date": now_utc(),
            **origin,
            "provenance": provenance,
            "args": sys.argv[1:],
        }
        if args.preview:
            sizes = [int(n) for n in args.preview_points.split(",")]
            result = {
                **head,
                "what": "no-change `pulumi preview` and state size by sweep size",
                **run_preview(bench, sizes, args.preview_runs),
            }
            print(json.dumps({k: result[k] for k in ("preview_median_s", "state_large_over_small")}))
            out = args.out or RESULTS / f"sweep-preview-{args.scheduler}-{result['date'][:10]}.json"
        else:
            result = {
                **head,
                "what": "a sweep submitted as one job array: Atlas vs by hand vs submitit",
                **run_rounds(bench, args.points, args.rounds),
            }
            for side in result["sides"]:
                print(f"{side:<13} median {result['median_s'][side]:7.2f} s, logins {result['logins_per_sweep'][side]}")
            for atlas, verdict in result["goal"].items():
                print(f"{atlas}: {verdict}")
            out = args.out or RESULTS / f"sweep-arrays-{args.scheduler}-{args.points}-{result['date'][:10]}.json"
    out = write_result(result, out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
