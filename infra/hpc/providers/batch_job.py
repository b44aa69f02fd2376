"""`BatchJob`: one scheduler job for one workload step, submitted once and found again by its name.

- preview: a job's successors and completion know it by its `job_definition` where its id is not
  known yet (dependency_replaced), so an update in place (new code) replaces none of them;
- up: the job is looked up by its unique name first, so a retry after a dropped connection (or an
  interrupted `pulumi up`) adopts the job it already submitted instead of submitting it twice;
- refresh: `read` asks the scheduler (polling.py's batched boards), so a job finished, killed or
  moved outside Atlas shows in state; one cancelled outside is replaced by the next `up`;
- destroy: `delete` cancels a pending or running job (already gone is fine) and marks its id
  retired, so a later `up` never adopts it.

What every call needs (`JobCall`: the connection, the scheduler and the typed inputs) and the
wait for a job's end are here too; job_completion.py awaits with them.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import pulumi
import pulumi.dynamic

from infra.dynamic.inputs import changed, is_unknown
from infra.hpc import ssh
from infra.hpc.options import job_options
from infra.hpc.polling import StatusBoard, board_for, lookup_by_name, query_states
from infra.hpc.provider_inputs import (
    DEFAULT_POLL_INTERVAL_S,
    DEFAULT_WAIT_TIMEOUT_S,
    JobInputs,
    check_relative_path,
    check_remote_dir,
    check_ssh,
    endpoint_from,
    same_login,
    scheduler_options_of,
)
from infra.hpc.providers.common import HpcProviderError, SshResource, join_remote, over_ssh, utc_now
from infra.hpc.registry import SCHEDULER_NAMES as SCHEDULERS
from infra.hpc.registry import scheduler_for
from infra.hpc.remote import RemoteResult, Runner
from infra.hpc.scheduler import (
    JOB_ID,
    JOB_NAME,
    CancelOutcome,
    JobState,
    Phase,
    Scheduler,
    SchedulerError,
)
from infra.hpc.target import HpcConfigError
from infra.hpc.target_parser import QUEUE_NAME

RETIRED_JOBS_FILE = ".atlas/retired-jobs"
STEP_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
LOG_TAIL_LINES = 20

# Inputs whose change means a different job: the old one is cancelled, a new one submitted. So
# does a change of `scheduler_options`, compared as the scheduler reads them (_options_changed).
JOB_DEFINING_INPUTS = (
    "script",
    "script_sha256",
    "script_path",
    "run_dir",
    "job_name",
    "after_job_ids",
    "scheduler",
    "step",
    "image_digest",
)
# The formula of `job_definition`, part of the state format: a definition written with another is
# not compared (see dependency_replaced).
DEFINITION_FORMULA = "1"
# What a BatchJob learns from the scheduler; an update in place keeps them.
BATCH_JOB_OUTPUTS = (
    "job_id",
    "state",
    "native_state",
    "exit_code",
    "queue",
    "submitted_at",
    "finished_at",
    "log_file",
    "scheduler_visible",
)


@dataclass(frozen=True)
class JobCall:
    """A BatchJob's connection, scheduler and inputs, for one provider call."""

    conn: ssh.PooledConnection
    scheduler: Scheduler
    inputs: JobInputs
    props: Mapping[str, Any]  # all of them, carried into the outputs

    @property
    def run_dir(self) -> str:
        return self.inputs.run_dir

    @property
    def name(self) -> str:
        return self.inputs.job_name

    def run(self, command: str) -> RemoteResult:
        """Reads and lookups: repeating them is harmless, so a dropped connection is retried."""
        return ssh.run_remote(self.conn, command, check=False, safe_to_retry=True)

    def board(self) -> StatusBoard:
        return board_for(self.conn.endpoint.pool_key, self.inputs.poll_interval_s, self.scheduler.name)

    def board_states(self, job_ids: Sequence[str], fresh_after: float | None = None) -> dict[str, JobState | None]:
        return self.board().states(self.scheduler, self.run, job_ids, fresh_after=fresh_after)

    def log_file(self, job_id: str) -> str:
        return join_remote(self.run_dir, self.inputs.log_pattern.replace(self.scheduler.log_placeholder, job_id))


def job_call(props: Mapping[str, Any]) -> JobCall:
    inputs = JobInputs.of(props)
    return JobCall(
        ssh.connection(endpoint_from(props)),
        scheduler_for(inputs.scheduler, inputs.scheduler_options),
        inputs,
        props,
    )


def _retired_job_ids(job: JobCall) -> set[str]:
    """Ids of this job name that Atlas deleted. Lines are `<id> <name>`: ids alone are not enough,
    since a scheduler's id counter can restart (a reinstalled Slurm, MaxJobId wrapping)."""
    path = join_remote(job.run_dir, RETIRED_JOBS_FILE)
    result = job.run(f"cat -- {shlex.quote(path)} 2>/dev/null || true")
    retired = set()
    for line in result.stdout.splitlines():
        fields = line.split()
        if len(fields) == 2 and JOB_ID.match(fields[0]) and fields[1] == job.name:
            retired.add(fields[0])
    return retired


def _earlier_submission(job: JobCall) -> JobState | None:
    """A job this resource already submitted (same unique name) that still counts.

    Retired jobs (deleted by Atlas) and jobs that failed or were cancelled do not count:
    re-running `pulumi up` after those submits afresh.
    """
    retired = _retired_job_ids(job)
    candidates = [
        s
        for s in lookup_by_name(job.scheduler, job.run, job.name)
        if s.job_id not in retired and s.phase not in (Phase.FAILED, Phase.CANCELLED)
    ]
    return candidates[-1] if candidates else None


def _check_dependencies(job: JobCall, after: Sequence[str]) -> None:
    check_dependencies(job.scheduler, job.run, job.inputs.step, after)


def check_dependencies(scheduler: Scheduler, run: Runner, step: str, after: Sequence[str]) -> None:
    """Slurm silently drops a dependency on an unknown job, and a failed one blocks forever: refuse
    both (jobs only: a sweep's arrays are not asked this way, squeue lists their elements)."""
    if not after:
        return
    states = query_states(scheduler, run, after).states
    for job_id in after:
        state = states.get(job_id)
        if state is None:
            raise HpcProviderError(
                f"step {step!r} depends on job {job_id}, which the scheduler does not know; "
                "run `pulumi refresh` and then `pulumi up` so the earlier step is submitted again"
            )
        if state.phase in (Phase.FAILED, Phase.CANCELLED):
            raise HpcProviderError(
                f"step {step!r} depends on job {job_id}, which ended {state.native_state} "
                f"(exit code {state.exit_code}); it could never start. Fix the earlier step and run `pulumi up` again"
            )


def _submit(job: JobCall, after: Sequence[str], after_ended: Sequence[str] = ()) -> str:
    command = job.scheduler.submit_command(job.run_dir, job.inputs.script_path, after, after_ended=after_ended)
    try:
        # Not retried blindly: a submission that was sent but not answered may have happened.
        result = ssh.run_remote(job.conn, command, check=False, safe_to_retry=False)
    except ssh.ConnectionLostError:
        earlier = _earlier_submission(job)  # reconnects; the name says whether it went through
        if earlier is not None:
            pulumi.log.info(
                f"{job.name}: submission answered by lookup after a dropped connection: job {earlier.job_id}"
            )
            return earlier.job_id
        result = ssh.run_remote(job.conn, command, check=False, safe_to_retry=False)
    try:
        return job.scheduler.parse_submission(result)
    except SchedulerError as error:
        raise HpcProviderError(f"step {job.inputs.step!r} was not submitted: {error}") from None


def _outs(job: JobCall, job_id: str, state: JobState | None, submitted_at: str, visible: bool = True) -> dict[str, Any]:
    return {
        **job.props,
        "job_id": job_id,
        "state": state.phase.value if state else Phase.UNKNOWN.value,
        "native_state": state.native_state if state else "",
        "exit_code": state.exit_code if state else None,
        "queue": (state.queue if state and state.queue else job.inputs.requested_queue) or "",
        "submitted_at": submitted_at,
        "finished_at": state.finish_time if state else "",
        "log_file": job.log_file(job_id),
        "scheduler_visible": visible,
    }


def _log_tail(job: JobCall, job_id: str) -> str:
    path = job.log_file(job_id)
    result = job.run(f"tail -n {LOG_TAIL_LINES} -- {shlex.quote(path)} 2>/dev/null || true")
    return result.stdout.rstrip()


def wait_until_finished(job: JobCall, job_id: str) -> JobState:
    timeout = job.inputs.wait_timeout_s
    deadline = time.monotonic() + timeout
    asked_at: float | None = None
    while True:
        state = job.board_states([job_id], fresh_after=asked_at)[job_id]
        asked_at = time.monotonic()
        if state is None:
            raise HpcProviderError(f"job {job_id} ({job.name}) vanished from the scheduler while Atlas waited for it")
        if state.phase.finished:
            break
        if asked_at > deadline:
            raise HpcProviderError(
                f"job {job_id} ({job.name}) is still {state.native_state} after {timeout:g} s; it keeps its place "
                "in the queue: run `pulumi up` again to keep waiting (the job is found by name, not resubmitted)"
            )
    if state.phase is not Phase.SUCCEEDED:
        tail = _log_tail(job, job_id)
        raise HpcProviderError(
            f"job {job_id} ({job.name}, step {job.inputs.step!r}) ended {state.native_state} with exit code "
            f"{state.exit_code}; log: {job.log_file(job_id)}"
            + (f"\n--- last lines of the log\n{tail}" if tail else "")
            + "\nFix the step and run `pulumi up` again: a changed script is submitted afresh"
            + (
                f" (to run it again unchanged: pulumi up --replace '{job.inputs.job_urn}')"
                if job.inputs.job_urn
                else ""
            )
        )
    return state


def job_definition(
    *,
    scheduler: str,
    scheduler_options: Mapping[str, str],
    step: str,
    job_name: str,
    run_dir: str,
    script_path: str,
    script_sha256: str,
    after_definitions: Sequence[str],
) -> str:
    """`<formula>:<sha256>` over what defines a job (JOB_DEFINING_INPUTS and its options), its
    predecessors named by their own definitions instead of their ids: known when the program runs,
    so in preview too, where a job's id may not be. Two jobs with one definition are the same job."""
    fields = {
        "scheduler": scheduler,
        "scheduler_options": dict(sorted(job_options(scheduler_options).items())),
        "step": step,
        "job_name": job_name,
        "run_dir": run_dir,
        "script_path": script_path,
        "script_sha256": script_sha256,
        "after": list(after_definitions),
    }
    digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()
    return f"{DEFINITION_FORMULA}:{digest}"


def _formulas(definitions: object) -> set[str]:
    values = definitions if isinstance(definitions, list | tuple) else [definitions]
    return {str(value).partition(":")[0] for value in values}


def arrays_replaced(olds: Mapping[str, Any], news: Mapping[str, Any]) -> list[str]:
    """The sweeps' arrays a job or sweep waits for, where they are other arrays now: those whose
    every element must succeed (`after_array_ids`) and those that must only end, their failed
    points run again by a later array (`after_ended_ids`); present only after a sweep."""
    return [
        key
        for key in ("after_array_ids", "after_ended_ids")
        if (olds.get(key) or news.get(key)) and dependency_replaced(olds, news, key, "after_definitions")
    ]


def dependency_replaced(
    olds: Mapping[str, Any], news: Mapping[str, Any], ids_key: str, definitions_key: str
) -> bool:
    """Whether the jobs a resource names by id (`ids_key`: a successor's `after_job_ids`, a
    completion's `job_id`) are other jobs now, so the resource must be replaced with them.

    Known ids are compared. In preview, a job being updated has no id yet: the engine hands a
    dynamic resource's update its inputs for outputs, and a BatchJob's id is not one. So there the
    jobs' definitions (`definitions_key`, job_definition's) decide: a replaced job has a new one, a
    job updated in place (a new provider version, every job of a stack at once) the same one. Without
    that, every code change would show every chained job and completion replaced, though `up`, which
    compares the real ids, replaces none of them.

    Where the definitions cannot tell, the answer is the safe one for each side of the upgrade:
    a program that gives none is answered `replaced`, as unknown inputs always were; state written
    before they were recorded (or with another formula) `not replaced`, as that state's jobs are
    only updated by the first `up` of this code. The limit: a job replaced in that same first
    `up`, or one replaced because refresh saw it cancelled outside Atlas (which its definition
    does not say), shows its successors updated in preview; `up` compares the real ids and
    replaces them."""
    new_ids = news.get(ids_key)
    if not is_unknown(new_ids):
        return bool(olds.get(ids_key) != new_ids)
    new, old = news.get(definitions_key), olds.get(definitions_key)
    if new is None or is_unknown(new):
        return True
    if old is None or _formulas(old) != _formulas(new):
        return False
    return bool(old != new)


def _options_changed(olds: Mapping[str, Any], news: Mapping[str, Any]) -> bool:
    """Whether the scheduler's own options mean something else now: compared as its class reads
    them, so state written before `scheduler_options` (which holds the scheduler's older spelling
    of them) equals the same options spelt the new way: a running job is not resubmitted for a
    renamed input."""
    if is_unknown(news.get("scheduler_options")):
        return True
    try:
        return job_options(scheduler_options_of(olds)) != job_options(scheduler_options_of(news))
    except (HpcConfigError, SchedulerError):
        return True


def replaced_with_surroundings(olds: Mapping[str, Any], news: Mapping[str, Any]) -> list[str]:
    """What replaces a BatchJob or a SweepJob beyond its own defining inputs, in this order: the
    jobs it waits for are others now (`after_job_ids`), or the sweeps' arrays (`arrays_replaced`);
    its scheduler's options mean something else; it would run under another login (or one not
    known yet)."""
    replaces = []
    if dependency_replaced(olds, news, "after_job_ids", "after_definitions"):
        replaces.append("after_job_ids")
    replaces += arrays_replaced(olds, news)
    if _options_changed(olds, news):
        replaces.append("scheduler_options")
    if is_unknown(news.get("ssh")) or not same_login(olds, news):
        replaces.append("ssh")
    return replaces


def check_after_job_ids(news: Mapping[str, Any], failures: list[pulumi.dynamic.CheckFailure]) -> None:
    """A BatchJob's or SweepJob's `after_job_ids`: each a job id where known."""
    after = news.get("after_job_ids") or []
    if is_unknown(after):
        return
    for i, job_id in enumerate(after):
        if not is_unknown(job_id) and not (isinstance(job_id, str) and JOB_ID.match(job_id)):
            failures.append(pulumi.dynamic.CheckFailure(f"after_job_ids[{i}]", f"{job_id!r} is not a job id"))


class BatchJobProvider(pulumi.dynamic.ResourceProvider):
    """One scheduler job for one workload step."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.CheckResult:
        failures: list[pulumi.dynamic.CheckFailure] = []
        check_ssh(news, failures)

        def fail(prop: str, reason: str) -> None:
            failures.append(pulumi.dynamic.CheckFailure(prop, reason))

        value = news.get("scheduler")
        if not is_unknown(value) and value not in SCHEDULERS:
            fail("scheduler", f"expected one of {', '.join(SCHEDULERS)}, found {value!r}")
        elif not is_unknown(value) and not is_unknown(news.get("scheduler_options")):
            try:
                scheduler_options_of(news)
            except HpcConfigError as error:
                fail("scheduler_options", str(error))
        value = news.get("job_name")
        if not is_unknown(value) and not (isinstance(value, str) and JOB_NAME.match(value)):
            fail("job_name", f"{value!r}: use at most 63 lower-case letters, digits and '-'")
        value = news.get("step")
        if not is_unknown(value) and not (isinstance(value, str) and STEP_NAME.match(value)):
            fail("step", f"{value!r} is not a step name (a DNS label)")
        value = news.get("requested_queue")
        if value is not None and not is_unknown(value) and not (isinstance(value, str) and QUEUE_NAME.match(value)):
            fail("requested_queue", f"{value!r} is not a queue name")
        check_remote_dir(news.get("run_dir"), "run_dir", failures)
        check_relative_path(news.get("script_path"), "script_path", failures)
        pattern = news.get("log_pattern")
        if not is_unknown(pattern) and not (
            isinstance(pattern, str) and re.match(r"^[A-Za-z0-9._/%-]{1,255}$", pattern)
        ):
            fail("log_pattern", f"{pattern!r} contains characters outside letters, digits and . _ / % -")
        script, digest = news.get("script"), news.get("script_sha256")
        if not is_unknown(script) and not is_unknown(digest) and ssh.sha256_hex(str(script).encode()) != digest:
            fail("script_sha256", "does not match the script")
        check_after_job_ids(news, failures)
        return pulumi.dynamic.CheckResult(news, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        replaces = changed(olds, news, tuple(k for k in JOB_DEFINING_INPUTS if k != "after_job_ids"))
        replaces += replaced_with_surroundings(olds, news)
        if olds.get("state") == Phase.CANCELLED.value:
            # Refresh saw it cancelled outside Atlas: the desired state is a job that runs.
            replaces.append("state")
        updates = changed(
            olds,
            news,
            (
                "provider_version",
                "wait",
                "wait_timeout_s",
                "poll_interval_s",
                "ssh_secret",
                "requested_queue",
                "ssh",
                "after_definitions",
            ),
        )
        return pulumi.dynamic.DiffResult(
            changes=bool(replaces or updates),
            replaces=replaces,
            # Never two copies of one step at once (they would compete for the same GPUs and files),
            # and the old job must be retired before its successor looks its name up.
            delete_before_replace=True,
        )

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        job = job_call(props)
        script_path = join_remote(job.run_dir, job.inputs.script_path)
        staged = ssh.remote_sha256(job.conn, [script_path])[script_path]
        if staged != props["script_sha256"]:
            raise HpcProviderError(
                f"the job script {script_path} on {job.conn.endpoint.address} is "
                f"{'missing' if staged is None else 'not the one previewed (sha256 ' + staged + ')'}; "
                "it is staged by the environment's StagedFiles resource: run `pulumi up` again"
            )
        after = list(props.get("after_job_ids") or [])
        # A sweep's arrays are not checked like jobs (squeue lists their elements, not the array).
        arrays_before = list(props.get("after_array_ids") or [])
        arrays_ended = list(props.get("after_ended_ids") or [])
        earlier = _earlier_submission(job)
        if earlier is not None:
            # An interrupted or dropped earlier `up` already submitted it.
            job_id = earlier.job_id
            submitted_at = earlier.submit_time or utc_now()
        else:
            _check_dependencies(job, after)
            submitted_at = utc_now()
            job_id = _submit(job, after + arrays_before, arrays_ended)
        job.board().invalidate([job_id])
        state = wait_until_finished(job, job_id) if job.inputs.wait else None
        return pulumi.dynamic.CreateResult(job_id, _outs(job, job_id, state, submitted_at))

    def read(self, id_: str, props: dict[str, Any]) -> pulumi.dynamic.ReadResult:
        job = job_call(props)
        state = job.board_states([id_])[id_]
        if state is None:
            # Past the scheduler's memory (CLEAN_PERIOD, MinJobAge, no accounting): keep what was
            # last seen. Only a job last seen unfinished becomes "unknown".
            last = str(props.get("state") or Phase.UNKNOWN.value)
            outs = {**props, "scheduler_visible": False}
            if not Phase(last).finished:
                outs["state"] = Phase.UNKNOWN.value
            return pulumi.dynamic.ReadResult(id_, outs)
        return pulumi.dynamic.ReadResult(id_, _outs(job, id_, state, str(props.get("submitted_at") or "")))

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        return pulumi.dynamic.UpdateResult({**news, **{k: olds.get(k) for k in BATCH_JOB_OUTPUTS}})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        job = job_call(props)
        # The state recorded at submission is stale (the pipeline is awaited by BatchJobCompletion, not
        # here): ask the scheduler, in one batched query for every job being deleted, so a job
        # that already ended is retired without a cancel and never reported as cancelled.
        seen = job.board_states([id_]).get(id_)
        last_state = seen.phase.value if seen is not None else props.get("state")
        # Cancelling twice is harmless, so the cancel may be retried over a new connection.
        finished = {Phase.SUCCEEDED.value, Phase.FAILED.value, Phase.CANCELLED.value}
        outcome = CancelOutcome.ALREADY_FINISHED
        if last_state not in finished:
            outcome = job.scheduler.parse_cancel(id_, job.run(job.scheduler.cancel_command(id_)))
        retired = join_remote(job.run_dir, RETIRED_JOBS_FILE)
        retire = f"mkdir -p -- {shlex.quote(str(PurePosixPath(retired).parent))}"
        retire += f" && echo {shlex.quote(f'{id_} {job.name}')} >> {shlex.quote(retired)}"
        ssh.run_remote(job.conn, retire, safe_to_retry=True)
        job.board().forget([id_])
        if outcome is CancelOutcome.CANCELLED:
            pulumi.log.info(f"cancelled job {id_} ({job.name})")


class BatchJob(SshResource, module="hpc", name="BatchJob"):
    job_id: pulumi.Output[str]
    job_name: pulumi.Output[str]
    state: pulumi.Output[str]
    native_state: pulumi.Output[str]
    exit_code: pulumi.Output[int | None]
    queue: pulumi.Output[str]
    submitted_at: pulumi.Output[str]
    log_file: pulumi.Output[str]
    script_sha256: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        *,
        ssh_target: pulumi.Input[dict[str, Any]],
        ssh_secret: pulumi.Input[dict[str, Any]],
        scheduler: str,
        step: str,
        job_name: str,
        run_dir: str,
        script_path: str,
        script: str,
        log_pattern: str,
        requested_queue: str | None = None,
        after_job_ids: pulumi.Input[Sequence[pulumi.Input[str]]] = (),
        after_array_ids: pulumi.Input[Sequence[str]] | None = None,
        after_ended_ids: pulumi.Input[Sequence[str]] | None = None,
        after_definitions: Sequence[str] = (),
        wait: bool = False,
        wait_timeout_s: float = DEFAULT_WAIT_TIMEOUT_S,
        poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
        scheduler_options: Mapping[str, str] | None = None,
        image_digest: pulumi.Input[str] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """`after_job_ids`: the ids of the jobs this one waits for; `after_array_ids`: the arrays
        of the sweeps it waits for (every element to succeed); `after_ended_ids`: the sweeps' arrays
        whose failed points ran again later (to end); `after_definitions`: those jobs' and sweeps'
        `job_definition`s (what preview knows of them)."""
        script_sha256 = ssh.sha256_hex(script.encode())
        # Known in preview, unlike `job_id`: what this job's successors and completion compare.
        self.job_definition = job_definition(
            scheduler=scheduler,
            scheduler_options=scheduler_options or {},
            step=step,
            job_name=job_name,
            run_dir=run_dir,
            script_path=script_path,
            script_sha256=script_sha256,
            after_definitions=after_definitions,
        )
        inputs: dict[str, Any] = {
            **over_ssh(ssh_target, ssh_secret),
            "scheduler": scheduler,
            # What only this scheduler reads, as its class's `parse_options` returned them.
            "scheduler_options": dict(scheduler_options or {}),
            "step": step,
            "job_name": job_name,
            "run_dir": run_dir,
            "script_path": script_path,
            "script": script,
            # Pulumi's preview shortens a multi-line string to its first lines but prints a list
            # in full: this one is there so `pulumi preview` shows every line that will run.
            "script_lines": script.splitlines(),
            "script_sha256": script_sha256,
            "log_pattern": log_pattern,
            "requested_queue": requested_queue,
            "after_job_ids": after_job_ids,
            "after_definitions": list(after_definitions),
            "wait": wait,
            "wait_timeout_s": wait_timeout_s,
            "poll_interval_s": poll_interval_s,
        }
        if after_array_ids is not None:
            # Only where a sweep comes before: every other job's inputs are what they always were.
            inputs["after_array_ids"] = after_array_ids
            inputs["after_ended_ids"] = after_ended_ids if after_ended_ids is not None else []
        if image_digest is not None:
            # Runs in the image (Apptainer): a new image is a new job. Only then, so every bare
            # job's inputs are what they always were.
            inputs["image_digest"] = image_digest
        super().__init__(BatchJobProvider(), name, inputs, BATCH_JOB_OUTPUTS, opts)
