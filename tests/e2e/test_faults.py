"""Faults during `pulumi up` of the HPC sides, with the real CLI, each followed by a re-run.

The `local` stack with its OpenShift side disabled: the local Satori, once through LSF and
once through Slurm (one login node, one SSH connection). For each fault the test then
asserts, through the schedulers themselves (squeue / bjobs over SSH):
- no duplicate job: exactly one live job per step's unique job name;
- no orphaned resource: every job of this run the scheduler knows is in state (or was
  cancelled and retired), no pending operation is left in the checkpoint, and after
  `pulumi destroy` no job of this run is pending or running and nothing staged is left;
- state matches the scheduler: after `pulumi refresh`, the job ids in `pulumi stack export`
  and in the outputs are the scheduler's, with the scheduler's states, and
  `pulumi preview --expect-no-changes` holds.

Faults: (a) SIGINT to `pulumi up` while the preparation jobs are awaited (twice, the forced
stop that leaves pending operations; then, after `pulumi refresh`, once, as a user's Ctrl-C), (b) slurmctld
stopped while `up` waits for the preparation steps, (c) the training job killed outside
Atlas (scancel / bkill), (d) the provider's SSH connection dropped during `bsub`/`sbatch`
(its sshd session killed on the login node while the submission runs), and sshd itself
down for a moment.

Counts are printed as `FAULT-COUNTS {...}` lines (run pytest with -s to see them).
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import shlex
import signal
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.hpc.job_script import job_name_for
from localenv import satori
from localenv.layout import Layout
from tests.e2e.pulumi_cli import PulumiProject, run_bare
from tests.e2e.pulumi_cli import satori_ssh as ssh
from tests.support import wait_until

pytestmark = pytest.mark.e2e
STACK = "local"
HPC_ENVIRONMENTS = ("satori", "satori-slurm")
SCHEDULER = {"satori": "lsf", "satori-slurm": "slurm"}
STEPS = ("make-hdf5", "inception-moments", "train")
PREP_STEPS = STEPS[:-1]
LIVE = {"PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "SUSPENDED", "PEND", "RUN", "PSUSP", "USUSP", "SSUSP"}
# A job that ended without running to its end by someone's hand: Slurm's CANCELLED, LSF's EXIT
# (bkill; no job of these tests fails by itself).
KILLED = {"CANCELLED", "EXIT"}
UP = ("up", "--yes", "--skip-preview", "-s", STACK)



def local_squeue_names(layout: Layout) -> list[str]:
    """Job names this Slurm knows, asked as root on this machine (fast: for timing a fault)."""
    env = {**os.environ, "SLURM_CONF": satori.status(layout)["slurm"]["conf"]}
    proc = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%j"], capture_output=True, text=True,
                          env=env, timeout=30, check=False)
    return proc.stdout.split() if proc.returncode == 0 else []


@dataclass
class Job:
    job_id: str
    name: str
    state: str


@dataclass
class FaultStack:
    proj: PulumiProject
    layout: Layout
    remote: str
    counts: dict[str, Any] = field(default_factory=dict)

    def job_name(self, env: str, step: str) -> str:
        return job_name_for("atlas", STACK, env, step, "1", f"{self.remote}/{STACK}/{env}/probe")

    @property
    def names(self) -> dict[str, tuple[str, str]]:
        """job name -> (environment, step), for every job this stack may submit."""
        return {self.job_name(e, s): (e, s) for e in HPC_ENVIRONMENTS for s in STEPS}

    # --- the schedulers' view, over SSH ------------------------------------------------------

    def scheduler_jobs(self) -> dict[str, list[Job]]:
        """This run's jobs per job name: LSF's through `bjobs -a`, Slurm's through `squeue -t all`."""
        found: dict[str, list[Job]] = {name: [] for name in self.names}
        for line in ssh(self.layout, "squeue -h -t all -o '%i|%j|%T'").split():
            job_id, name, state = line.split("|")
            if name in found and SCHEDULER[self.names[name][0]] == "slurm":
                found[name].append(Job(job_id, name, state))
        records = json.loads(ssh(self.layout, "bjobs -a -o 'jobid stat job_name' -json"))["RECORDS"]
        for record in records:
            name = record.get("JOB_NAME", "")
            if name in found and SCHEDULER[self.names[name][0]] == "lsf":
                found[name].append(Job(record["JOBID"], name, record["STAT"]))
        for jobs in found.values():
            jobs.sort(key=lambda j: int(j.job_id))
        return found

    def job_count(self) -> int:
        return sum(len(jobs) for jobs in self.scheduler_jobs().values())

    def wait_until_no_live_job(self, timeout: float = 240) -> None:
        wait_until(
            lambda: not any(j.state in LIVE for jobs in self.scheduler_jobs().values() for j in jobs),
            "no job of this run to be live", timeout, pause=2, detail=self.scheduler_jobs,
        )

    def retired(self, env: str) -> set[str]:
        path = f"~/{self.remote}/{STACK}/{env}/probe/.atlas/retired-jobs"
        return {line.split()[0] for line in ssh(self.layout, f"cat {path} 2>/dev/null || true").splitlines() if line}

    # --- Pulumi's view -----------------------------------------------------------------------

    def up_in_background(self) -> BackgroundUp:
        return BackgroundUp(subprocess.Popen(
            ["pulumi", *UP, "--non-interactive"], cwd=self.proj.root, env=self.proj.env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        ))

    def hold_file(self) -> str:
        """While this file exists on the login node, the held preparation step stays held."""
        return f"{pwd.getpwnam(satori.LOGIN_USER).pw_dir}/{self.remote}/{HOLD_FILE}"

    def export(self) -> dict[str, Any]:
        return json.loads(self.proj.run("stack", "export", "-s", STACK).stdout)

    def state_jobs(self) -> dict[str, dict[str, Any]]:
        """BatchJob outputs in the checkpoint, per job name."""
        resources = self.export()["deployment"].get("resources") or []
        return {
            r["outputs"]["job_name"]: r["outputs"]
            for r in resources
            if r["type"].endswith(":BatchJob") and r.get("outputs", {}).get("job_name")
        }

    def wait_for_first_job(self, up: BackgroundUp, timeout: float = 120) -> str:
        """Block until a job of this run is in the scheduler; return its name."""

        def first_job() -> str | None:
            assert up.proc.poll() is None, f"pulumi up ended before any job was submitted:\n{up.output}"
            return next((n for n in local_squeue_names(self.layout) if n in self.names), None)

        return wait_until(first_job, "a job of this run to be submitted", timeout, pause=0.1)

    # --- the checks every fault ends with -----------------------------------------------------

    def verify(self, case: str, *, killed_steps: tuple[str, ...] = ()) -> dict[str, Any]:
        """No duplicate, no orphan, state == scheduler (after refresh); returns the counts."""
        self.wait_until_no_live_job()
        self.proj.run("refresh", "--yes", "-s", STACK)
        export = self.export()
        pending = export["deployment"].get("pending_operations") or []
        assert not pending, f"pending operations left in the checkpoint: {pending}"
        in_state = self.state_jobs()
        outputs = self.proj.outputs(STACK)["environments"]
        sched = self.scheduler_jobs()
        duplicates = 0
        for name, (env, step) in self.names.items():
            jobs = sched[name]
            live = [j for j in jobs if j.state not in KILLED]
            duplicates += max(0, len(live) - 1)
            assert len(live) == 1, f"{env}/{step} ({name}): expected one job, the scheduler has {jobs}"
            job = live[0]
            # Killed jobs are only those this test killed, and Atlas retired them (no orphan).
            killed = [j for j in jobs if j.state in KILLED]
            expected_killed = 1 if step in killed_steps else 0
            assert len(killed) == expected_killed, f"{env}/{step}: killed jobs {killed}"
            assert {j.job_id for j in killed} <= self.retired(env), f"{env}/{step}: {killed} not retired"
            # State matches the scheduler: id and native state in the checkpoint, id in the outputs.
            assert name in in_state, f"{env}/{step}: job {job.job_id} is in the scheduler but not in state"
            assert in_state[name]["job_id"] == job.job_id, (env, step, in_state[name]["job_id"], job)
            assert in_state[name]["native_state"] == job.state, (env, step, in_state[name]["native_state"], job)
            step_out = next(s for s in outputs[env]["steps"] if s["name"] == step)
            assert step_out["job_id"] == job.job_id
        assert set(in_state) == set(self.names), "state holds a job this run does not define"
        self.proj.run("preview", "--expect-no-changes", "-s", STACK)
        counts = {
            "case": case,
            "jobs_total": sum(len(j) for j in sched.values()),
            "jobs_live_or_done": sum(1 for jobs in sched.values() for j in jobs if j.state not in KILLED),
            "jobs_killed_outside_and_retired": sum(1 for jobs in sched.values() for j in jobs if j.state in KILLED),
            "duplicates": duplicates,
            "pending_operations": len(pending),
            **self.counts,
        }
        print("FAULT-COUNTS " + json.dumps(counts), flush=True)
        return counts


# Atlas submits the whole pipeline at once and then awaits the preparation steps; the probe's
# take about a second, too short a window for a fault to land "while they are awaited". The
# second is held longer: a Ctrl-C lets the operations in flight finish (the first step's wait
# among them), so the re-run must still find the second one running. A test that needs it held
# for as long as it takes creates HOLD_FILE (in the run's remote folder) and removes it to let
# the step go on (at most HOLD_FILE_LIMIT_S).
PREP_HOLD_S = {"make-hdf5": 4, "inception-moments": 25}
HELD_STEP = "inception-moments"
HOLD_FILE = "hold-inception-moments"
HOLD_FILE_LIMIT_S = 300


def _hold_preparation_steps(path: Path, hold_s: dict[str, int], hold_file: str) -> None:
    """In the project's copy of the workload: each preparation step sleeps first, then runs as written."""
    doc = yaml.safe_load(path.read_text())
    for step in doc["steps"]:
        if step["name"] in hold_s:
            line = shlex.join([str(t) for t in [*step["command"], *step.get("args", [])]])
            hold = f"sleep {hold_s[step['name']]}"
            if step["name"] == HELD_STEP:
                wait = f"while [ -e {shlex.quote(hold_file)} ]; do sleep 0.5; done"
                hold += f"; timeout {HOLD_FILE_LIMIT_S} sh -c {shlex.quote(wait)}"
            step["command"], step["args"] = ["sh", "-c", f"{hold}; {line}"], []
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


class BackgroundUp:
    """`pulumi up` in the background, its output read as it comes, so a test can act on what it shows."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._arrived = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._arrived:
                self.lines.append(line)
                self._arrived.notify_all()

    @property
    def output(self) -> str:
        with self._arrived:
            return "".join(self.lines)

    def wait_for(self, text: str, timeout: float) -> None:
        """Block until a line of the output holds `text`."""
        deadline = time.monotonic() + timeout
        with self._arrived:
            while not any(text in line for line in self.lines):
                left = deadline - time.monotonic()
                assert left > 0, f"pulumi up did not show {text!r} within {timeout:g} s:\n{''.join(self.lines)}"
                assert self.proc.poll() is None or self._reader.is_alive(), (
                    f"pulumi up ended before it showed {text!r}:\n{''.join(self.lines)}"
                )
                self._arrived.wait(min(left, 0.5))

    def finish(self, timeout: float) -> tuple[int, str]:
        """Its exit code and whole output, once it ends (killed, and the test failed, after `timeout`)."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            self._reader.join(timeout=10)
            raise AssertionError(f"pulumi did not end within {timeout:g} s:\n{self.output}") from None
        self._reader.join(timeout=30)
        return self.proc.returncode, self.output


@pytest.fixture
def stack(tmp_path: Path, satori_env: Layout) -> Iterator[FaultStack]:
    proj = PulumiProject.create(tmp_path)
    remote = f"atlas-fault-{uuid.uuid4().hex[:6]}"
    info = satori.status(satori_env)["ssh"]
    config = proj.stack_config(STACK)
    # The HPC sides only (at least one environment must stay enabled).
    config["atlas:openshift"] = {**config["atlas:openshift"], "enabled": False}
    for name in HPC_ENVIRONMENTS:
        config["atlas:hpc"][name] = {
            **config["atlas:hpc"][name], "port": info["port"], "known_hosts_file": info["known_hosts_file"],
            "private_key_file": info["key_file"], "remote_work_dir": remote,
        }
    run_bare(config, HPC_ENVIRONMENTS)  # no OpenShift side: the steps run on the login node's software
    proj.set_stack_config(STACK, config)
    fs = FaultStack(proj, satori_env, remote)
    _hold_preparation_steps(proj.root / "workloads" / "probe" / "workload.yaml", PREP_HOLD_S, fs.hold_file())
    proj.run("stack", "init", STACK)
    yield fs
    satori.up(satori_env)  # whatever a test stopped is running again
    proj.run("destroy", "--yes", "-s", STACK)
    # No orphan after destroy: nothing of this run pending or running, nothing staged left.
    leftover = [j for jobs in fs.scheduler_jobs().values() for j in jobs if j.state in LIVE]
    staged = ssh(satori_env, f"find ~/{remote} -path '*/.atlas/jobs/*' -type f 2>/dev/null | wc -l").strip()
    proj.run("stack", "rm", "--yes", "-s", STACK, check=False)
    ssh(satori_env, f"rm -rf ~/{remote}")
    assert not leftover, f"jobs still live after destroy: {leftover}"
    assert staged == "0", f"{staged} staged job scripts left after destroy"


# --- (a) SIGINT ---------------------------------------------------------------------------------


def test_sigint_during_up_then_up_again(stack: FaultStack) -> None:
    # Twice, while the pipeline is submitted and its preparation steps awaited: the forced stop,
    # which leaves the interrupted operations as pending operations in the checkpoint.
    ssh(stack.layout, f"mkdir -p ~/{stack.remote} && touch {shlex.quote(stack.hold_file())}")
    up = stack.up_in_background()
    stack.wait_for_first_job(up)
    time.sleep(0.3)
    up.proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    up.proc.send_signal(signal.SIGINT)
    rc, out = up.finish(60)
    assert rc != 0, out
    pending = stack.export()["deployment"].get("pending_operations") or []
    after_twice = stack.job_count()

    # What a user does next, as Pulumi's warning says: repair the stack with `pulumi refresh`,
    # which in non-interactive mode needs --clear-pending-creates (a plain `up` goes ahead but
    # leaves the stale entries in the checkpoint), then `pulumi up`: Atlas's create looks each
    # job up by its unique name and adopts what the interrupted run had already submitted.
    stack.proj.run("refresh", "--yes", "--clear-pending-creates", "-s", STACK)
    assert not stack.export()["deployment"].get("pending_operations")

    # Once, as a user's Ctrl-C, while the second preparation step (held by the hold file) is
    # awaited: Pulumi's graceful cancel lets the operations in flight finish and records them.
    # The signal goes once the engine shows that wait: from then on Pulumi handles SIGINT (before
    # its update starts, a SIGINT ends it, or is ignored where the parent ignores SIGINT).
    up = stack.up_in_background()
    up.wait_for(f"{HELD_STEP}-done creating", 180)
    up.proc.send_signal(signal.SIGINT)
    up.wait_for("received; cancelling", 30)
    ssh(stack.layout, f"rm -f {shlex.quote(stack.hold_file())}")  # the held step goes on
    rc_once, out = up.finish(180)
    assert not stack.export()["deployment"].get("pending_operations"), "a graceful cancel left pending operations"
    after_once = stack.job_count()
    recorded_once = len(stack.state_jobs())

    stack.proj.run(*UP)
    stack.counts = {
        "sigint_twice": {"jobs_after": after_twice, "pending_operations": len(pending)},
        "sigint_once": {"exit_code": rc_once, "jobs_after": after_once, "jobs_in_state": recorded_once},
    }
    stack.verify("a-sigint")


# --- (b) slurmctld stopped ----------------------------------------------------------------------


def test_slurmctld_stopped_during_up_then_up_again(stack: FaultStack) -> None:
    slurmctld = satori._daemons(stack.layout)["slurmctld"]
    up = stack.up_in_background()
    stack.wait_for_first_job(up)
    jobs_before_stop = stack.job_count()
    assert slurmctld.stop(), "slurmctld was not running"
    try:
        rc, out = up.finish(300)
    finally:
        satori.up(stack.layout)
    assert rc != 0, f"up should fail while the scheduler is down:\n{out}"
    # A clear error: the scheduler could not be asked (with its own complaint), not "the job vanished".
    assert "Unable to contact slurm controller" in out, out  # Slurm's own words
    assert "did not answer a status query" in out and "Cannot connect to LSF" in out, out  # LSF's
    assert "vanished" not in out, out
    # slurmctld came back with its state: the jobs submitted before the stop are still known.
    jobs_after_restart = stack.job_count()
    assert jobs_after_restart >= jobs_before_stop
    stack.proj.run(*UP)
    stack.counts = {"jobs_before_stop": jobs_before_stop, "jobs_after_restart": jobs_after_restart,
                    "errors": sorted({ln.split("SchedulerError: ")[-1].strip()[:160] for ln in out.splitlines()
                                      if "SchedulerError: " in ln})}
    stack.verify("b-slurmctld-stopped")


# --- (c) a job killed outside -------------------------------------------------------------------


def test_job_killed_outside_then_refresh_and_up(stack: FaultStack) -> None:
    stack.proj.run(*UP)
    old = {env: next(s["job_id"] for s in stack.proj.outputs(STACK)["environments"][env]["steps"]
                     if s["name"] == "train") for env in HPC_ENVIRONMENTS}
    ssh(stack.layout, f"bkill {old['satori']}")
    ssh(stack.layout, f"scancel {old['satori-slurm']}")
    jobs_before = stack.job_count()
    wait_until(lambda: not any(j.state in LIVE for env, step in (("satori", "train"), ("satori-slurm", "train"))
                               for j in stack.scheduler_jobs()[stack.job_name(env, step)]),
               "the killed jobs to end", 60, pause=1)
    refresh = stack.proj.run("refresh", "--yes", "-s", STACK).stdout
    seen = {name: out["state"] for name, out in stack.state_jobs().items()}
    for env in HPC_ENVIRONMENTS:
        assert seen[stack.job_name(env, "train")] == "cancelled", (env, seen, refresh)
    stack.proj.run(*UP)
    new = {env: next(s["job_id"] for s in stack.proj.outputs(STACK)["environments"][env]["steps"]
                     if s["name"] == "train") for env in HPC_ENVIRONMENTS}
    assert all(new[e] != old[e] for e in HPC_ENVIRONMENTS), (old, new)
    stack.counts = {"jobs_before_kill": jobs_before, "jobs_after_up": stack.job_count(),
                    "killed": old, "resubmitted": new}
    stack.verify("c-killed-outside", killed_steps=("train",))


# --- (d) SSH connection dropped -----------------------------------------------------------------


def _session_of(pid: int, sshd_pid: int) -> int | None:
    """The sshd per-connection process (a child of the listener) that `pid` runs under."""
    while pid > 1:
        try:
            ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return None
        if ppid == sshd_pid:
            return pid
        pid = ppid
    return None


class SubmissionDropper(threading.Thread):
    """Kills the provider's SSH session on the login node while a `bsub`/`sbatch` runs in it,
    once per distinct submission command: the connection drops mid-submission."""

    def __init__(self, layout: Layout, pause_sshd_s: float = 0.0) -> None:
        super().__init__(daemon=True)
        self.layout = layout
        self.pause_sshd_s = pause_sshd_s
        self.stop = threading.Event()
        self.dropped: list[str] = []
        self.uid = pwd.getpwnam(satori.LOGIN_USER).pw_uid

    def run(self) -> None:
        sshd = satori._daemons(self.layout)["sshd"]
        sshd_pid = sshd.pid()
        while not self.stop.is_set() and sshd_pid is not None:
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                try:
                    if entry.stat().st_uid != self.uid:
                        continue
                    cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                except OSError:
                    continue
                if not cmdline.startswith("bash -lc") or not (" bsub " in cmdline or "sbatch " in cmdline):
                    continue
                if cmdline in self.dropped:
                    continue
                session = _session_of(int(entry.name), sshd_pid)
                if session is None:
                    continue
                with contextlib.suppress(ProcessLookupError):
                    os.kill(session, signal.SIGKILL)
                self.dropped.append(cmdline)
                if self.pause_sshd_s and len(self.dropped) == 1:
                    sshd.stop()
                    time.sleep(self.pause_sshd_s)
                    satori.up(self.layout)
                    sshd_pid = sshd.pid()
            time.sleep(0.01)


@pytest.mark.parametrize("pause_sshd_s", [0.0, 3.0], ids=["connection-killed", "sshd-down-3s"])
def test_ssh_dropped_during_submission_then_up_again(stack: FaultStack, pause_sshd_s: float) -> None:
    dropper = SubmissionDropper(stack.layout, pause_sshd_s)
    dropper.start()
    try:
        first = stack.proj.run(*UP, check=False)
    finally:
        dropper.stop.set()
        dropper.join(timeout=30)
    assert dropper.dropped, "no submission was caught in flight"
    out = first.stdout + first.stderr
    after_first = stack.job_count()
    # Whatever the first up made of it (adopted by name, or failed cleanly), up again.
    stack.proj.run(*UP)
    stack.counts = {
        "connections_dropped_mid_submission": len(dropper.dropped),
        "sshd_down_s": pause_sshd_s,
        "first_up_rc": first.returncode,
        "answered_by_lookup": out.count("answered by lookup after a dropped connection"),
        "jobs_after_first_up": after_first,
        "first_up_errors": sorted({ln.strip()[:200] for ln in out.splitlines() if "Error: " in ln}),
    }
    stack.verify(f"d-ssh-dropped-{'sshd-down' if pause_sshd_s else 'connection-killed'}")
