"""`atlas doctor` on an HPC side (infra/hpc/doctor.py and each scheduler's preflight.py): the deciders
on recorded answers, table by table; the commands the checks send, run by a real bash against
stand-in programs (the heredoc that hands sbatch each job script, the writable folder); and the
checks in order against a fake login."""

from __future__ import annotations

import dataclasses
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

from infra.doctor import Status
from infra.hpc.doctor import (
    Login,
    hpc_checks,
    judge_login,
    judge_programs,
    judge_writable,
    programs_command,
    step_requests,
    writable_command,
)
from infra.hpc.lsf import preflight as lsf
from infra.hpc.registry import SCHEDULER_CLASSES, scheduler_for
from infra.hpc.remote import RemoteResult, SshEndpoint, SshHop
from infra.hpc.scheduler import SiteDirectives, StepRequest
from infra.hpc.slurm import preflight as slurm
from infra.hpc.ssh.errors import SecondFactorError
from infra.hpc.target import HpcConfigError, HpcTarget
from infra.workload.load import load_workload
from infra.workload.model import Workload

ROOT = Path(__file__).resolve().parents[2]
KEY = "atlas:hpc.site"


def answer(stdout: str = "", code: int = 0, stderr: str = "") -> RemoteResult:
    return RemoteResult("recorded", code, stdout, stderr)


@pytest.fixture(scope="module")
def probe() -> Workload:
    return load_workload(ROOT / "workloads" / "probe" / "workload.yaml")


def requests_for(workload: Workload, scheduler: str = "slurm", **fields: object) -> list[StepRequest]:
    target = HpcTarget(host="site", user=None, scheduler=scheduler, queue="normal", **fields)  # type: ignore[arg-type]
    return step_requests(workload, scheduler_for(scheduler), target, "mysite", "site", "atlas-runs/mysite/site/probe")


def bigger(workload: Workload, step: str, gpus: int) -> Workload:
    """The workload with one step asking for more GPUs per node."""
    steps = tuple(
        dataclasses.replace(s, resources=dataclasses.replace(s.resources, gpus_per_node=gpus)) if s.name == step else s
        for s in workload.steps
    )
    return dataclasses.replace(workload, steps=steps)


# --- Slurm ----------------------------------------------------------------------------------------

SINFO = "normal*|up\nbackfill|up\ngpu|down\ngpu|down\n"


@pytest.mark.parametrize(
    ("queue", "result", "status", "said"),
    [
        ("normal", answer(SINFO), Status.OK, "partition 'normal' (the default) is up"),
        ("backfill", answer(SINFO), Status.OK, "partition 'backfill' is up"),
        (None, answer(SINFO), Status.OK, "partition 'normal' (the default) is up"),
        ("gpus", answer(SINFO), Status.FAIL, "partition 'gpus' does not exist (sinfo lists backfill, gpu, normal)"),
        ("gpu", answer(SINFO), Status.FAIL, "partition 'gpu' is down: it takes no jobs now"),
        (None, answer("a|up\nb|up\n"), Status.FAIL, "Slurm has no default partition (sinfo lists a, b)"),
        ("normal", answer("", 1, "sinfo: error: Unable to contact slurm controller"), Status.FAIL,
         "exited 1: sinfo: error: Unable to contact slurm controller"),
    ],
)
def test_slurm_partitions(queue: str | None, result: RemoteResult, status: Status, said: str) -> None:
    found = slurm.judge_partition(queue, KEY, result)
    assert found.status is status and said in found.detail
    if status is Status.FAIL:
        assert found.fix
    if "does not exist" in said:
        assert found.fix == f"set {KEY}.queue to one of them"


WOULD_START = "sbatch: Job 57 to start at 2026-12-05T10:00:01 using 1 processors on nodes vm in partition normal"


@pytest.mark.parametrize(
    ("code", "text", "status", "said", "fix"),
    [
        (0, WOULD_START, Status.OK, "would start at 2026-12-05T10:00:01 on vm in partition normal", ""),
        (1, "sbatch: error: Batch job submission failed: Requested node configuration is not available",
         Status.FAIL, "Slurm refuses it: Requested node configuration is not available",
         "no node of the partition has what train asks: lower it (overrides.site.train.resources"),
        # What Debian's slurm-wlm 22.05.8 prints for `--test-only` (the local Satori's).
        (1, "sbatch: error: allocation failure: Requested node configuration is not available", Status.FAIL,
         "Slurm refuses it: allocation failure: Requested node configuration is not available",
         "no node of the partition has what train asks"),
        (1, "sbatch: error: Batch job submission failed: Requested time limit is invalid (missing or exceeds some "
            "limit)", Status.FAIL, "Requested time limit is invalid", "lower the step's walltime"),
        (1, "sbatch: error: Invalid generic resource (gres) specification", Status.FAIL,
         "Invalid generic resource (gres) specification", "choose a GPU partition for atlas:hpc.site.queue"),
        (1, "sbatch: error: Batch job submission failed: Invalid account or account/partition combination specified",
         Status.FAIL, "Invalid account", "set atlas:hpc.site.account"),
        (1, "sbatch: error: Batch job submission failed: Invalid partition name specified", Status.FAIL,
         "Invalid partition name", "set atlas:hpc.site.queue to a partition `sinfo` lists"),
    ],
)
def test_slurm_test_only_answers(
    probe: Workload, code: int, text: str, status: Status, said: str, fix: str
) -> None:
    train = requests_for(probe)[-1]
    found = slurm.judge_test_only(train, KEY, "site", code, text)
    assert found.status is status and said in found.detail and fix in found.fix
    assert found.detail.startswith("train (1 node x 1 GPU, 1 CPU, 2048M, 00:30:00)")


FAKE_SBATCH = """#!/bin/bash
# sbatch as far as --test-only goes: the job script on stdin, refused where it asks for 8 GPUs.
[ "$1" = --test-only ] || { echo "sbatch: this stand-in only tests" >&2; exit 3; }
script=$(cat)
case "$script" in
  *"#SBATCH --gres=gpu:8"*)
    echo "sbatch: error: Batch job submission failed: Requested node configuration is not available" >&2
    exit 1 ;;
  *"#SBATCH --job-name="*) ;;
  *) echo "sbatch: error: no job script on stdin" >&2; exit 2 ;;
esac
echo "sbatch: Job $RANDOM to start at 2026-12-05T10:00:01 using 1 processors on nodes vm in partition normal" >&2
"""


def run_bash(command: str, bin_dir: Path, home: Path, system: bool = True) -> RemoteResult:
    """The command as the login node's `bash -lc` runs it, against stand-in programs (and, with
    `system`, this machine's own: dirname, cat)."""
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin" if system else str(bin_dir), "HOME": str(home)}
    done = subprocess.run(["/bin/bash", "-c", command], capture_output=True, text=True, env=env, check=False)
    return RemoteResult(command, done.returncode, done.stdout, done.stderr)


@pytest.fixture
def stand_ins(tmp_path: Path) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text(FAKE_SBATCH)
    (bin_dir / "sbatch").chmod(0o755)
    return bin_dir


def test_every_steps_whole_script_reaches_sbatch_test_only_through_one_command(
    probe: Workload, stand_ins: Path, tmp_path: Path
) -> None:
    scheduler = scheduler_for("slurm")
    steps = requests_for(probe, directives=SiteDirectives(account="proj-1", extra=("--qos=low",)))
    assert all("#SBATCH --account=proj-1" in s.script and "#SBATCH --qos=low" in s.script for s in steps)
    dry_run = scheduler.request_probe(steps, KEY, "site")
    assert dry_run is not None
    result = run_bash(dry_run.command, stand_ins, tmp_path)
    assert set(slurm.dry_run_sections(result.stdout)) == {"make-hdf5", "inception-moments", "train"}
    found = dry_run.judge(result)
    assert found.status is Status.OK, found
    assert found.detail.startswith("train (1 node x 1 GPU, 1 CPU, 2048M, 00:30:00) would start at ")
    assert found.detail.endswith("on vm in partition normal; the other 2 step(s) too (sbatch --test-only)")

    greedy = requests_for(bigger(probe, "train", 8))
    refused = scheduler.request_probe(greedy, KEY, "site")
    assert refused is not None
    found = refused.judge(run_bash(refused.command, stand_ins, tmp_path))
    assert found.status is Status.FAIL
    assert found.detail == (
        "train (1 node x 8 GPUs, 1 CPU, 2048M, 00:30:00): Slurm refuses it: Requested node configuration is not "
        "available"
    )
    # An answer cut short (the login lost) names the step it has no answer for.
    gone = refused.judge(answer("@@atlas-step make-hdf5\n", 255, "Connection to site closed"))
    assert gone.status is Status.FAIL and gone.detail == (
        "`sbatch --test-only` gave no answer for step make-hdf5 (exit 255: Connection to site closed)"
    )


# --- LSF ------------------------------------------------------------------------------------------

BQUEUES = (
    "QUEUE_NAME      PRIO STATUS          MAX JL/U JL/P JL/H NJOBS  PEND   RUN  SUSP \n"
    "normal            30 Open:Active       -    -    -    -     0     0     0     0\n"
    "night             20 Open:Inact        -    -    -    -     0     0     0     0\n"
    "old               20 Closed:Inact      -    -    -    -     0     0     0     0\n"
)


@pytest.mark.parametrize(
    ("queue", "result", "status", "said"),
    [
        ("normal", answer(BQUEUES), Status.OK, "queue 'normal' is Open:Active"),
        ("night", answer(BQUEUES), Status.OK, "queue 'night' is Open:Inact (Inact: it takes jobs but dispatches"),
        (None, answer(BQUEUES), Status.OK, "LSF's default queue (DEFAULT_QUEUE); bqueues lists night, normal, old"),
        ("gpu", answer(BQUEUES), Status.FAIL, "queue 'gpu' does not exist (bqueues lists night, normal, old)"),
        ("old", answer(BQUEUES), Status.FAIL, "queue 'old' is Closed:Inact: it takes no jobs now"),
        ("normal", answer("", 255, "LSF is down; try later"), Status.FAIL, "listed no queue (exit 255: LSF is down"),
    ],
)
def test_lsf_queues(queue: str | None, result: RemoteResult, status: Status, said: str) -> None:
    found = lsf.judge_queue(queue, KEY, result)
    assert found.status is status and said in found.detail
    if status is Status.FAIL:
        assert found.fix


LSLOAD_GPU = (
    "HOST_NAME       status  ngpus  gpu_shared_avg_mut  gpu_shared_avg_ut  ngpus_physical\n"
    "node1               ok      4                   -                  -               4\n"
    "node2          unavail      8                   -                  -               8\n"
    "node3               ok      2                   -                  -               2\n"
)


@pytest.mark.parametrize(
    ("gpus", "nodes", "status", "said"),
    [
        (1, 1, Status.OK, "step train asks for 1 node(s) x 1 GPUs: 2 available host(s) offer that many (node1, node3"),
        (4, 1, Status.OK, "1 available host(s) offer that many (node1"),
        (2, 2, Status.OK, "2 available host(s) offer that many (node1, node3"),
        (4, 2, Status.FAIL, "asks for 2 node(s) x 4 GPUs: 1 host(s) offer 4 GPUs (node1) (lsload -gpu)"),
        (8, 1, Status.FAIL, "no available host offers 8 GPUs (the most: 4, of 2 host(s))"),
    ],
)
def test_lsf_gpu_hosts(probe: Workload, gpus: int, nodes: int, status: Status, said: str) -> None:
    steps = requests_for(probe, "lsf")
    train = dataclasses.replace(steps[-1].spec, gpus_per_node=gpus, nodes=nodes)
    found = lsf.judge_gpu_hosts([train], KEY, "site", answer(LSLOAD_GPU))
    assert found.status is status and said in found.detail, found
    if status is Status.FAIL:
        assert found.fix.startswith("lower it (overrides.site.train.resources")


def test_lsf_asks_the_hosts_only_for_the_gpu_steps(probe: Workload) -> None:
    lsf_scheduler = scheduler_for("lsf")
    asked = lsf_scheduler.request_probe(requests_for(probe, "lsf"), KEY, "site")
    assert asked is not None and asked.command == "lsload -gpu"
    assert asked.judge(answer(LSLOAD_GPU)).status is Status.OK
    assert asked.judge(answer("", 255, "lsload: LIM is down")).fix.startswith("check that the cluster's LSF")
    no_gpu = requests_for(bigger(probe, "train", 0), "lsf")
    assert lsf_scheduler.request_probe(no_gpu, KEY, "site") is None


# --- what every scheduler says ---------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(SCHEDULER_CLASSES))
def test_every_scheduler_names_its_programs_and_probes(name: str, probe: Workload) -> None:
    scheduler = scheduler_for(name)
    assert scheduler.programs and all(p.isidentifier() for p in scheduler.programs)
    assert scheduler.submit_program in scheduler.programs and scheduler.cancel_program in scheduler.programs
    assert scheduler.queue_probe("normal", KEY).command
    assert scheduler.request_probe(requests_for(probe, name), KEY, "site") is not None


def test_programs_found_or_missing(tmp_path: Path) -> None:
    slurm_scheduler = scheduler_for("slurm")
    command = programs_command(slurm_scheduler.programs)
    for program in ("sbatch", "squeue", "sinfo"):
        (tmp_path / program).write_text("#!/bin/sh\n")
        (tmp_path / program).chmod(0o755)
    found = judge_programs(slurm_scheduler, run_bash(command, tmp_path, tmp_path, system=False))
    assert (found.status, found.detail) == (Status.FAIL, "sacct, scancel not found on the login shell's PATH (bash -l)")
    assert "~/.bash_profile" in found.fix
    for program in ("sacct", "scancel"):
        (tmp_path / program).write_text("#!/bin/sh\n")
        (tmp_path / program).chmod(0o755)
    found = judge_programs(slurm_scheduler, run_bash(command, tmp_path, tmp_path, system=False))
    assert found.status is Status.OK and found.detail == "Slurm's commands found: sbatch, squeue, sacct, scancel, sinfo"


def test_the_run_folder_is_judged_by_its_nearest_existing_folder_and_nothing_is_made(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "atlas-runs" / "s").mkdir(parents=True)
    relative = "atlas-runs/s/site/probe"
    found = judge_writable(relative, KEY, run_bash(writable_command(relative), tmp_path, home))
    assert found == type(found).ok(f"{relative} can be made: {home}/atlas-runs/s is writable")
    assert not (home / "atlas-runs" / "s" / "site").exists()
    (home / relative).mkdir(parents=True)
    assert judge_writable(relative, KEY, run_bash(writable_command(relative), tmp_path, home)).detail == (
        f"{relative} exists and is writable"
    )
    # A file where a folder should be: no folder can be made under it (as root, `test -w` says yes to any folder).
    (home / "blocked").write_text("")
    refused = judge_writable("blocked/run", KEY, run_bash(writable_command("blocked/run"), tmp_path, home))
    assert refused.status is Status.FAIL and f"{home}/blocked is not a folder you may write" in refused.detail
    assert refused.fix == f"set {KEY}.remote_work_dir to a folder you may write (your home or the site's scratch)"
    absolute = str(tmp_path / "scratch" / "x")
    assert judge_writable(absolute, KEY, run_bash(writable_command(absolute), tmp_path, home)).detail == (
        f"{absolute} can be made: {tmp_path} is writable"
    )


# --- the login, and the checks in order ------------------------------------------------------------

BASTION = SshHop(host="10.0.0.1", port=22, user="me", known_hosts="", known_hosts_source="", name="bastion")
ENDPOINT = SshEndpoint(
    host="10.0.0.2", port=22, user="atlas", known_hosts="", known_hosts_source="", name="site", jumps=(BASTION,)
)


def test_the_login_line_names_the_route() -> None:
    found = judge_login(ENDPOINT, False, answer("atlas\n"))
    assert found.detail == "logged in to atlas@site through jump host bastion (me@10.0.0.1:22)"
    mastered = dataclasses.replace(ENDPOINT, control_path="/home/me/.ssh/cm-abc")
    assert judge_login(mastered, True, answer("atlas\n")).detail == (
        "logged in to atlas@site through the master connection (ControlPath) /home/me/.ssh/cm-abc"
    )
    direct = dataclasses.replace(ENDPOINT, jumps=(), name="")
    assert judge_login(direct, False, answer("atlas\n")).detail == (
        "logged in to atlas@10.0.0.2 directly (atlas@10.0.0.2:22)"
    )
    assert judge_login(ENDPOINT, False, answer("", 1, "id: cannot find name")).status is Status.FAIL


class FakeSite:
    """A login whose commands answer from a table: the first key a command starts with."""

    def __init__(self, answers: Mapping[str, RemoteResult]) -> None:
        self.answers = answers
        self.commands: list[str] = []

    def login(self, target: HpcTarget, key: str) -> Login:
        assert key == KEY

        def run(command: str) -> RemoteResult:
            self.commands.append(command)
            return next(a for prefix, a in self.answers.items() if command.startswith(prefix))

        return Login(run, ENDPOINT, False)


STEPS = ("make-hdf5", "inception-moments", "train")
SITE = {
    "id -un": answer("atlas\n"),
    "command -v": answer("/usr/bin/sbatch\n/usr/bin/squeue\n/usr/bin/sacct\n/usr/bin/scancel\n/usr/bin/sinfo\n"),
    "sinfo": answer(SINFO),
    "echo '@@atlas-step": answer("".join(f"@@atlas-step {s}\n{WOULD_START}\n@@atlas-exit 0\n" for s in STEPS)),
    "d=": answer("writable /home/atlas\n"),
}


def statuses(checks: tuple) -> list[tuple[str, str]]:  # type: ignore[type-arg]
    return [(c.name, c.status.value) for c in checks]


def test_the_checks_run_in_order_on_one_login(probe: Workload) -> None:
    site = FakeSite(SITE)
    target = HpcTarget(host="site", user=None, scheduler="slurm", queue="normal")
    checks = hpc_checks("site", target, probe, "mysite", login=site.login)
    assert statuses(checks) == [
        ("ssh", "ok"), ("scheduler", "ok"), ("queue", "ok"), ("gpu-request", "ok"), ("work-dir", "ok")
    ]
    first_words = [c.split()[0] for c in site.commands]
    assert first_words == ["id", "command", "sinfo", "echo", "d=atlas-runs/mysite/site/probe;"]
    assert checks[-1].detail == "atlas-runs/mysite/site/probe can be made: /home/atlas is writable"
    # Nothing is submitted: every sbatch run is --test-only.
    runs = [line for c in site.commands for line in c.splitlines() if line.startswith("sbatch")]
    assert len(runs) == 3 and all(line.startswith("sbatch --test-only ") for line in runs)


def test_a_missing_queue_fails_once_and_what_needs_it_is_skipped(probe: Workload) -> None:
    site = FakeSite(SITE)
    target = HpcTarget(host="site", user=None, scheduler="slurm", queue="gpus")
    checks = hpc_checks("site", target, probe, "mysite", login=site.login)
    assert statuses(checks) == [
        ("ssh", "ok"), ("scheduler", "ok"), ("queue", "fail"), ("gpu-request", "skip"), ("work-dir", "ok")
    ]
    assert checks[3].detail == "not checked (needs: queue)"


@pytest.mark.parametrize(
    ("refusal", "detail", "fix"),
    [
        (
            HpcConfigError("atlas:hpc.site.host: 'sitte' is no Host entry of ~/.ssh/config (its Host entries: site) "
                           "and does not resolve here (Name or service not known); did you mean 'site'? write a Host "
                           "alias of your ssh config or the login node's address"),
            "atlas:hpc.site.host: 'sitte' is no Host entry of ~/.ssh/config (its Host entries: site) and does not "
            "resolve here (Name or service not known)",
            "did you mean 'site'? write a Host alias of your ssh config or the login node's address",
        ),
        (
            SecondFactorError("the login node site (atlas@10.0.0.2:22) accepted key a for atlas and then asks for "
                              "keyboard-interactive: a second factor, and Atlas never prompts. Open a master "
                              "connection once (answering the prompt), then run again: `ssh -M -S /s -fN site`"),
            "the login node site (atlas@10.0.0.2:22) accepted key a for atlas and then asks for keyboard-interactive: "
            "a second factor, and Atlas never prompts",
            "Open a master connection once (answering the prompt), then run again: `ssh -M -S /s -fN site`",
        ),
        (OSError("[Errno 111] Connection refused"), "[Errno 111] Connection refused",
         "check the route with `ssh <host> true` from this machine, as the same user"),
    ],
)
def test_a_refused_login_is_one_line_with_its_fix_and_nothing_else_runs(
    probe: Workload, refusal: Exception, detail: str, fix: str
) -> None:
    def refused(target: HpcTarget, key: str) -> Login:
        raise refusal

    checks = hpc_checks("site", HpcTarget(host="sitte", user=None, scheduler="slurm"), probe, "s", login=refused)
    assert statuses(checks) == [
        ("ssh", "fail"), ("scheduler", "skip"), ("queue", "skip"), ("gpu-request", "skip"), ("work-dir", "skip")
    ]
    assert (checks[0].detail, checks[0].fix) == (detail, fix)
    assert [c.detail for c in checks[1:]] == [f"not checked (needs: {n})" for n in ("ssh", "scheduler", "queue", "ssh")]
    assert os.linesep not in checks[0].detail


def test_apptainer_found_or_missing_through_the_login_shell(tmp_path: Path) -> None:
    """The probe command run by bash: a site with Apptainer on PATH, and one without."""
    from infra.hpc.apptainer import probe_command
    from infra.hpc.doctor import judge_apptainer

    fake = tmp_path / "bin" / "apptainer"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'apptainer version 1.4.0'\n")
    fake.chmod(0o755)

    def login_shell(command: str, path: str) -> RemoteResult:
        done = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=False,
                              env={"PATH": path})
        return RemoteResult(command, done.returncode, done.stdout, done.stderr)

    probe = probe_command("apptainer")
    found = judge_apptainer("apptainer", "atlas:hpc.s", login_shell(probe, f"{fake.parent}:/usr/bin:/bin"))
    assert found.status is Status.OK and "Apptainer 1.4.0 on " in found.detail and "linux/" in found.detail
    missing = judge_apptainer("apptainer", "atlas:hpc.s", login_shell(probe, "/usr/bin:/bin"))
    assert missing.status is Status.FAIL
    assert "not found on the login shell's PATH (PATH=/usr/bin:/bin)" in missing.detail
    assert "atlas:hpc.s.apptainer.command" in missing.fix and "atlas:hpc.s.runtime: bare" in missing.fix
