"""`atlas doctor` on an HPC side: the login node reached as the stack will reach it, the scheduler's
commands, the queue, each step's request, the run folder; nothing submitted, nothing written.

The checks, in order, each needing the ones named:
- `ssh`: the route `check_endpoint` resolves (the user's ssh config: an alias, jump hosts, the
  agent, a master connection) and a login over it (`id -un`); a refusal is its own one line;
- `scheduler` (ssh): the login shell (`bash -l`, as every Atlas command runs) finds each program
  the scheduler's class lists (`command -v`);
- `queue` (scheduler): the scheduler's `queue_probe` (Slurm: `sinfo`, LSF: `bqueues`);
- `gpu-request` (queue): the scheduler's `request_probes` on each step's rendered job script
  (Slurm: `sbatch --test-only`, which submits nothing; LSF: the hosts' GPUs, `lsload -gpu`);
- `work-dir` (ssh): the run folder `pulumi up` makes (`<remote_work_dir>/<stack>/<environment>/
  <workload>`) can be made: its nearest existing folder is writable (`test -w`, nothing written);
- `apptainer` (ssh; runtime apptainer only): the login shell finds Apptainer (`apptainer.command`)
  and says its version and the node's machine (the image's architecture is checked by `up`, once
  the image exists).
What differs between schedulers is asked of the scheduler's class through the registry. The
deciders are pure functions of what a command printed; `ssh_login` is the one part that connects,
and tests give `hpc_checks` a login of their own.
"""

from __future__ import annotations

import posixpath
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from infra.doctor import Check, Checklist, Finding
from infra.errors import AtlasConfigError
from infra.hpc.apptainer import oci_architecture, parse_probe, probe_command, searched_path
from infra.hpc.job_script import SubmissionKey, render_job_script, step_specs
from infra.hpc.registry import scheduler_for
from infra.hpc.remote import RemoteResult, Runner, SshEndpoint
from infra.hpc.scheduler import Probe, Scheduler, SchedulerError, StepRequest
from infra.hpc.ssh.commands import run_remote
from infra.hpc.ssh.errors import SshError
from infra.hpc.ssh.pool import connection
from infra.hpc.ssh.resolve import check_endpoint, describe_route
from infra.hpc.target import HpcTarget
from infra.hpc.target_parser import validate_remote_path
from infra.workload.model import Workload

# What a check may raise that is a finding, not a bug: a refusal naming its fix.
EXPECTED: tuple[type[BaseException], ...] = (AtlasConfigError, SshError, SchedulerError, OSError)
COMMAND_TIMEOUT_S = 60.0
# The Pulumi project's name in job names (`job_name_for`); the checks submit nothing under it.
PROJECT = "atlas"


@dataclass(frozen=True)
class Login:
    """A login to the target's login node: how to run a command there, and how it was reached."""

    run: Runner
    endpoint: SshEndpoint
    through_master: bool  # the user's OpenSSH master connection carries it (a site's second factor)


def ssh_login(target: HpcTarget, key: str) -> Login:
    """Resolve and check the route (HpcConfigError naming the key and the fix), then log in (an
    SshError naming the hop and the fix); commands run as every Atlas command does."""
    endpoint = check_endpoint(target, key)
    pooled = connection(endpoint)
    through_master = pooled.master() is not None  # connects, through whichever route answers

    def run(command: str) -> RemoteResult:
        return run_remote(pooled, command, check=False, safe_to_retry=True, timeout=COMMAND_TIMEOUT_S)

    return Login(run, endpoint, through_master)


# --- the deciders: pure functions of what a command printed -------------------------------------


def route_text(endpoint: SshEndpoint, through_master: bool) -> str:
    """How the login was reached, from `describe_route`'s lines."""
    lines = list(describe_route(endpoint))
    if through_master:
        return f" through the {lines[-1]}"
    jumps = [line for line in lines if line.startswith("jump host ")]
    return f" through {' then '.join(jumps)}" if jumps else f" directly ({endpoint.address})"


def judge_login(endpoint: SshEndpoint, through_master: bool, result: RemoteResult) -> Finding:
    """`id -un` on the login node: who Atlas is logged in as, and the route."""
    user = result.stdout.strip().splitlines()[-1].strip() if result.stdout.strip() else ""
    if result.exit_code != 0 or not user:
        said = (result.stderr or result.stdout).strip().splitlines()
        return Finding.fail(
            f"logged in to {endpoint.route}, but `id -un` exited {result.exit_code} "
            f"({said[-1] if said else 'no output'})",
            "check the account's login shell and ~/.bash_profile on the login node (Atlas runs `bash -lc`)",
        )
    return Finding.ok(f"logged in to {user}@{endpoint.name or endpoint.host}{route_text(endpoint, through_master)}")


def programs_command(programs: Sequence[str]) -> str:
    return "command -v " + " ".join(shlex.quote(p) for p in programs)


def judge_programs(scheduler: Scheduler, result: RemoteResult) -> Finding:
    """`command -v <programs>` in the login shell: each program the scheduler needs is found."""
    found = {posixpath.basename(line.strip()) for line in result.stdout.splitlines() if line.strip()}
    missing = [p for p in scheduler.programs if p not in found]
    if missing:
        return Finding.fail(
            f"{', '.join(missing)} not found on the login shell's PATH (bash -l)",
            f"make {scheduler.label}'s commands part of the login shell (in ~/.bash_profile: the site's `module load` "
            "or its profile script), or check the target's scheduler",
        )
    return Finding.ok(f"{scheduler.label}'s commands found: {', '.join(scheduler.programs)}")


def writable_command(run_dir: str) -> str:
    """The run folder's nearest existing folder and whether the login user may write there:
    `test -w`, nothing created. Relative paths are the home's, as for SFTP."""
    quoted = shlex.quote(run_dir)
    return (
        f'd={quoted}; case "$d" in /*) ;; *) d="$HOME/$d" ;; esac; '
        'while [ ! -e "$d" ]; do d=$(dirname -- "$d"); done; '
        'if [ -d "$d" ] && [ -w "$d" ] && [ -x "$d" ]; then echo "writable $d"; else echo "not-writable $d"; fi'
    )


def judge_writable(run_dir: str, key: str, result: RemoteResult) -> Finding:
    verdict, _, where = result.stdout.strip().splitlines()[-1].partition(" ") if result.stdout.strip() else ("", "", "")
    if result.exit_code != 0 or verdict not in ("writable", "not-writable"):
        said = (result.stderr or result.stdout).strip().splitlines()
        return Finding.fail(
            f"could not tell whether {run_dir} can be made "
            f"(exit {result.exit_code}: {said[-1] if said else 'no output'})",
            "check the login node's shell",
        )
    if verdict == "not-writable":
        return Finding.fail(
            f"the run folder {run_dir} cannot be made: {where} is not a folder you may write",
            f"set {key}.remote_work_dir to a folder you may write (your home or the site's scratch)",
        )
    exists = where.rstrip("/").endswith(run_dir.rstrip("/"))
    return Finding.ok(f"{run_dir} {'exists and is writable' if exists else f'can be made: {where} is writable'}")


def judge_apptainer(command: str, key: str, result: RemoteResult) -> Finding:
    """`apptainer_probe`'s answer: Apptainer's version and the login node's machine, or why not."""
    if result.exit_code == 127:
        searched = searched_path(result.stdout)
        return Finding.fail(
            f"runtime apptainer, but {command!r} is not found on the login shell's PATH ({searched})",
            f"install Apptainer there or load its module in ~/.bash_profile, give its path as {key}.apptainer.command, "
            f"or set {key}.runtime: bare",
        )
    try:
        machine, version = parse_probe(result.stdout)
    except ValueError:
        said = (result.stderr or result.stdout).strip().splitlines()
        return Finding.fail(
            f"could not ask for Apptainer's version (exit {result.exit_code}: {said[-1] if said else 'no output'})",
            f"run `{command} --version` on the login node",
        )
    return Finding.ok(f"Apptainer {version} on {machine} (images must be linux/{oci_architecture(machine)})")


# --- the checks --------------------------------------------------------------------------------


def step_requests(
    workload: Workload, scheduler: Scheduler, target: HpcTarget, stack: str, environment: str, run_dir: str
) -> list[StepRequest]:
    """Each step's spec and job script exactly as `pulumi up` will render them (the site's
    directives included), under the run's job names; nothing is submitted under them."""
    run = SubmissionKey(PROJECT, stack, environment, "doctor", run_dir)
    specs = step_specs(workload, run, target.queue, True, target.directives)
    return [StepRequest(spec, render_job_script(scheduler, spec)) for spec in specs.values()]


def hpc_checks(
    environment: str,
    target: HpcTarget,
    workload: Workload,
    stack: str,
    login: Callable[[HpcTarget, str], Login] = ssh_login,
    checklist: Checklist | None = None,
) -> tuple[Check, ...]:
    """Every check of one HPC environment (`atlas:hpc.<environment>`), in order."""
    key = f"atlas:hpc.{environment}"
    checks = checklist or Checklist(EXPECTED)
    scheduler = scheduler_for(target.scheduler, target.scheduler_options)
    session: list[Login] = []

    def run(probe: Probe) -> Finding:
        return probe.judge(session[0].run(probe.command))

    def ssh() -> Finding:
        session.append(login(target, key))
        done = session[0]
        return judge_login(done.endpoint, done.through_master, done.run("id -un"))

    checks.run(
        "ssh",
        ssh,
        fallback_fix="check the route with `ssh <host> true` from this machine, as the same user",
    )
    checks.run(
        "scheduler",
        lambda: judge_programs(scheduler, session[0].run(programs_command(scheduler.programs))),
        needs=("ssh",),
    )
    checks.run("queue", lambda: run(scheduler.queue_probe(target.queue, key)), needs=("scheduler",))
    run_dir = validate_remote_path(f"{target.remote_work_dir}/{stack}/{environment}/{workload.name}", key)

    def gpu_request() -> Finding:
        requests = step_requests(workload, scheduler, target, stack, environment, run_dir)
        probe = scheduler.request_probe(requests, key, environment)
        if probe is None:
            return Finding.ok(f"no step asks for a GPU, and {scheduler.label} has no dry run to ask about the rest")
        return run(probe)

    checks.run("gpu-request", gpu_request, needs=("queue",))
    checks.run(
        "work-dir",
        lambda: judge_writable(run_dir, key, session[0].run(writable_command(run_dir))),
        needs=("ssh",),
    )
    if target.apptainer is not None:
        command = target.apptainer.command
        checks.run(
            "apptainer",
            lambda: judge_apptainer(command, key, session[0].run(probe_command(command))),
            needs=("ssh",),
        )
    return tuple(checks.checks)
