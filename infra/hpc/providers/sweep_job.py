"""`SweepJob`: a swept step as one Pulumi resource, its chunks each one scheduler array.

What BatchJob does for one job, for the arrays of one sweep (job_script.sweep_scripts: the table
of points and one array script per chunk of the split at the site's array limit):
- up: the table and scripts are checked by sha256 where StagedFiles put them; each chunk is looked
  up by its job name first (`chunk_job_name`: the step's, then `-c<n>`), so an `up` interrupted
  mid-submission adopts the arrays it already submitted and submits only the others; a chunk
  that runs after another (throttle lanes) depends on that one's array;
- state: the arrays' ids (`job_ids`, in chunk order) and one letter per element run-length
  encoded (`elements`, infra/hpc/arrays.py): its size does not grow with the points beyond that;
- refresh: one query per array (`squeue -r -j <id>`, `bjobs <id>`), Slurm's accounting for the
  elements squeue forgot; an element killed outside Atlas shows as `K`;
- destroy: one cancel per array with unfinished elements (`scancel <id>`, `bkill <id>`: every
  pending or running element), each id retired like a BatchJob's so no later `up` adopts it.
Retries of failed elements are the next slice: `up` leaves a failed or killed element as it is.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import pulumi
import pulumi.dynamic

from infra.dynamic.inputs import changed, is_unknown
from infra.hpc import arrays, ssh
from infra.hpc.provider_inputs import (
    DEFAULT_POLL_INTERVAL_S,
    check_relative_path,
    check_remote_dir,
    check_ssh,
    endpoint_from,
    same_login,
    scheduler_options_of,
)
from infra.hpc.providers.batch_job import (
    RETIRED_JOBS_FILE,
    _options_changed,
    check_dependencies,
    dependency_replaced,
    job_definition,
)
from infra.hpc.providers.common import HpcProviderError, SshResource, join_remote, over_ssh, utc_now
from infra.hpc.registry import SCHEDULER_NAMES, scheduler_for
from infra.hpc.remote import RemoteResult
from infra.hpc.scheduler import JOB_ID, JOB_NAME, CancelOutcome, JobState, Scheduler, SchedulerError

SWEEP_DEFINING_INPUTS = ("chunks", "table_path", "table_sha256", "run_dir", "scheduler", "step")
SWEEP_JOB_OUTPUTS = ("job_ids", "job_id", "elements", "state", "counts", "submitted_at")


@dataclass(frozen=True)
class Chunk:
    """One array of the sweep, as the `chunks` input holds it."""

    job_name: str
    script_path: str
    script_sha256: str
    offset: int
    count: int
    after: int | None  # the chunk (by position) whose array this one waits for

    @classmethod
    def of(cls, entry: Mapping[str, Any]) -> Chunk:
        after = entry.get("after")
        return cls(
            str(entry["job_name"]),
            str(entry["script_path"]),
            str(entry["script_sha256"]),
            int(entry["offset"]),
            int(entry["count"]),
            None if after is None else int(after),
        )


@dataclass(frozen=True)
class SweepCall:
    """A SweepJob's connection, scheduler and inputs, for one provider call."""

    conn: ssh.PooledConnection
    scheduler: Scheduler
    props: Mapping[str, Any]

    @property
    def run_dir(self) -> str:
        return str(self.props["run_dir"])

    @property
    def step(self) -> str:
        return str(self.props["step"])

    @property
    def chunks(self) -> list[Chunk]:
        return [Chunk.of(entry) for entry in self.props["chunks"]]

    @property
    def size(self) -> int:
        return sum(chunk.count for chunk in self.chunks)

    def run(self, command: str) -> RemoteResult:
        """Reads and lookups: repeating them is harmless, so a dropped connection is retried."""
        return ssh.run_remote(self.conn, command, check=False, safe_to_retry=True)


def sweep_call(props: Mapping[str, Any]) -> SweepCall:
    scheduler = scheduler_for(str(props["scheduler"]), scheduler_options_of(props))
    return SweepCall(ssh.connection(endpoint_from(props)), scheduler, props)


def retired_ids(call: SweepCall) -> set[tuple[str, str]]:
    """(id, name) of every job or array Atlas deleted in this run directory (RETIRED_JOBS_FILE)."""
    path = join_remote(call.run_dir, RETIRED_JOBS_FILE)
    result = call.run(f"cat -- {shlex.quote(path)} 2>/dev/null || true")
    pairs = set()
    for line in result.stdout.splitlines():
        fields = line.split()
        if len(fields) == 2 and JOB_ID.match(fields[0]):
            pairs.add((fields[0], fields[1]))
    return pairs


def earlier_array(call: SweepCall, chunk: Chunk, retired: set[tuple[str, str]]) -> str | None:
    """The array an earlier, interrupted `up` submitted for this chunk (same unique name), not
    retired: the newest by id."""
    query = call.scheduler.array_lookup_query(chunk.job_name)
    found = [array_id for array_id in query.parse(call.run(query.command)) if (array_id, chunk.job_name) not in retired]
    return max(found, key=int) if found else None


def _submit(call: SweepCall, chunk: Chunk, after: Sequence[str], retired: set[tuple[str, str]]) -> str:
    command = call.scheduler.submit_command(call.run_dir, chunk.script_path, after)
    try:
        # Not retried blindly: a submission that was sent but not answered may have happened.
        result = ssh.run_remote(call.conn, command, check=False, safe_to_retry=False)
    except ssh.ConnectionLostError:
        earlier = earlier_array(call, chunk, retired)  # reconnects; the name says whether it went through
        if earlier is not None:
            return earlier
        result = ssh.run_remote(call.conn, command, check=False, safe_to_retry=False)
    try:
        return call.scheduler.parse_submission(result)
    except SchedulerError as error:
        raise HpcProviderError(
            f"sweep of step {call.step!r}, array {chunk.job_name}, was not submitted: {error}"
        ) from None


def element_states(call: SweepCall, job_ids: Sequence[str], previous: str = "") -> str:
    """Every element's letter, in point order, from one query per array (and the accounting query
    for an array whose live answer forgot some), merged with what was `previous`ly seen."""
    base = call.scheduler.array_index_base
    seen: dict[int, str] = {}
    for chunk, array_id in zip(call.chunks, job_ids, strict=True):
        query = call.scheduler.array_elements_query(array_id)
        states: dict[str, JobState] = query.parse(call.run(query.command))
        if len(states) < chunk.count:
            history = call.scheduler.array_history_query(array_id)
            if history is not None:
                states = {**history.parse(call.run(history.command)), **states}
        for index, state in states.items():
            position = int(index) - base
            if 0 <= position < chunk.count:
                seen[chunk.offset + position] = arrays.letter_of(state)
    return arrays.merge(previous, seen, call.size)


def _outs(call: SweepCall, job_ids: Sequence[str], letters: str, submitted_at: str) -> dict[str, Any]:
    return {
        **call.props,
        "job_ids": list(job_ids),
        "job_id": job_ids[0] if job_ids else "",
        "elements": arrays.encode(letters),
        "state": arrays.summary(letters).value,
        "counts": arrays.counts(letters),
        "submitted_at": submitted_at,
    }


class SweepJobProvider(pulumi.dynamic.ResourceProvider):
    """A swept step's arrays, one per chunk."""

    def check(self, _olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.CheckResult:
        failures: list[pulumi.dynamic.CheckFailure] = []
        check_ssh(news, failures)

        def fail(prop: str, reason: str) -> None:
            failures.append(pulumi.dynamic.CheckFailure(prop, reason))

        if not is_unknown(news.get("scheduler")) and news.get("scheduler") not in SCHEDULER_NAMES:
            fail("scheduler", f"expected one of {', '.join(SCHEDULER_NAMES)}, found {news.get('scheduler')!r}")
        check_remote_dir(news.get("run_dir"), "run_dir", failures)
        check_relative_path(news.get("table_path"), "table_path", failures)
        chunks = news.get("chunks")
        if not is_unknown(chunks):
            if not isinstance(chunks, list) or not chunks:
                fail("chunks", "expected one entry per array, at least one")
            else:
                for i, entry in enumerate(chunks):
                    if not isinstance(entry, Mapping) or not JOB_NAME.match(str(entry.get("job_name", ""))):
                        fail(f"chunks[{i}].job_name", "use at most 63 lower-case letters, digits and '-'")
                        continue
                    check_relative_path(entry.get("script_path"), f"chunks[{i}].script_path", failures)
                    after = entry.get("after")
                    if after is not None and not (isinstance(after, int) and 0 <= after < i):
                        fail(f"chunks[{i}].after", f"{after!r} is not an earlier chunk")
        after_ids = news.get("after_job_ids") or []
        if not is_unknown(after_ids):
            for i, job_id in enumerate(after_ids):
                if not is_unknown(job_id) and not (isinstance(job_id, str) and JOB_ID.match(job_id)):
                    fail(f"after_job_ids[{i}]", f"{job_id!r} is not a job id")
        return pulumi.dynamic.CheckResult(news, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        replaces = changed(olds, news, SWEEP_DEFINING_INPUTS)
        if dependency_replaced(olds, news, "after_job_ids", "after_definitions"):
            replaces.append("after_job_ids")
        if (olds.get("after_array_ids") or news.get("after_array_ids")) and dependency_replaced(
            olds, news, "after_array_ids", "after_definitions"
        ):
            replaces.append("after_array_ids")
        if _options_changed(olds, news):
            replaces.append("scheduler_options")
        if is_unknown(news.get("ssh")) or not same_login(olds, news):
            replaces.append("ssh")
        updates = changed(
            olds,
            news,
            ("provider_version", "poll_interval_s", "ssh_secret", "requested_queue", "ssh", "after_definitions"),
        )
        return pulumi.dynamic.DiffResult(
            changes=bool(replaces or updates), replaces=replaces, delete_before_replace=True
        )

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        call = sweep_call(props)
        paths = [join_remote(call.run_dir, str(props["table_path"]))]
        expected = {paths[0]: str(props["table_sha256"])}
        for chunk in call.chunks:
            path = join_remote(call.run_dir, chunk.script_path)
            paths.append(path)
            expected[path] = chunk.script_sha256
        staged = ssh.remote_sha256(call.conn, paths)
        for path in paths:
            if staged[path] != expected[path]:
                found = "missing" if staged[path] is None else f"not the one previewed (sha256 {staged[path]})"
                raise HpcProviderError(
                    f"{path} on {call.conn.endpoint.address} is {found}; "
                    "it is staged by the environment's StagedFiles resource: run `pulumi up` again"
                )
        retired = retired_ids(call)
        after = list(props.get("after_job_ids") or [])
        arrays_before = list(props.get("after_array_ids") or [])
        submitted_at = utc_now()
        job_ids: list[str] = []
        checked = False
        for chunk in call.chunks:
            earlier = earlier_array(call, chunk, retired)
            if earlier is not None:
                pulumi.log.info(f"{chunk.job_name}: adopted array {earlier}, submitted by an earlier `pulumi up`")
                job_ids.append(earlier)
                continue
            if not checked:
                check_dependencies(call.scheduler, call.run, call.step, after)
                checked = True
            waits = after + arrays_before + ([job_ids[chunk.after]] if chunk.after is not None else [])
            job_ids.append(_submit(call, chunk, waits, retired))
        letters = element_states(call, job_ids)
        return pulumi.dynamic.CreateResult(",".join(job_ids), _outs(call, job_ids, letters, submitted_at))

    def read(self, id_: str, props: dict[str, Any]) -> pulumi.dynamic.ReadResult:
        call = sweep_call(props)
        job_ids = list(props.get("job_ids") or id_.split(","))
        previous = arrays.decode(str(props.get("elements") or ""))
        letters = element_states(call, job_ids, previous)
        return pulumi.dynamic.ReadResult(id_, _outs(call, job_ids, letters, str(props.get("submitted_at") or "")))

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        return pulumi.dynamic.UpdateResult({**news, **{k: olds.get(k) for k in SWEEP_JOB_OUTPUTS}})

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        call = sweep_call(props)
        job_ids = list(props.get("job_ids") or id_.split(","))
        letters = element_states(call, job_ids, arrays.decode(str(props.get("elements") or "")))
        retire = []
        for chunk, array_id in zip(call.chunks, job_ids, strict=True):
            mine = letters[chunk.offset : chunk.offset + chunk.count]
            if arrays.unfinished(mine):
                outcome = call.scheduler.parse_cancel(array_id, call.run(call.scheduler.cancel_command(array_id)))
                if outcome is CancelOutcome.CANCELLED:
                    pulumi.log.info(f"cancelled array {array_id} ({chunk.job_name}): every pending or running element")
            retire.append(f"{array_id} {chunk.job_name}")
        path = join_remote(call.run_dir, RETIRED_JOBS_FILE)
        command = f"mkdir -p -- {shlex.quote(str(PurePosixPath(path).parent))}"
        command += f" && printf '%s\\n' {' '.join(shlex.quote(line) for line in retire)} >> {shlex.quote(path)}"
        ssh.run_remote(call.conn, command, safe_to_retry=True)


class SweepJob(SshResource, module="hpc", name="SweepJob"):
    job_ids: pulumi.Output[list[str]]
    job_id: pulumi.Output[str]
    elements: pulumi.Output[str]
    state: pulumi.Output[str]
    submitted_at: pulumi.Output[str]

    def __init__(
        self,
        name: str,
        *,
        ssh_target: pulumi.Input[dict[str, Any]],
        ssh_secret: pulumi.Input[dict[str, Any]],
        scheduler: str,
        step: str,
        run_dir: str,
        table_path: str,
        table: str,
        chunks: Sequence[Mapping[str, Any]],
        log_pattern: str,
        requested_queue: str | None = None,
        after_job_ids: pulumi.Input[Sequence[pulumi.Input[str]]] = (),
        after_array_ids: pulumi.Input[Sequence[str]] | None = None,
        after_definitions: Sequence[str] = (),
        poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
        scheduler_options: Mapping[str, str] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """`chunks`: one entry per array, in order (`job_name`, `script_path`, `script_sha256`,
        `offset`, `count`, `after`), their scripts staged by the environment's StagedFiles with the
        table of points at `table_path`; `after_job_ids` the jobs it waits for (checked, as a
        BatchJob's), `after_array_ids` the arrays of the sweeps before it."""
        table_sha256 = ssh.sha256_hex(table.encode())
        self.job_definition = job_definition(
            scheduler=scheduler,
            scheduler_options=scheduler_options or {},
            step=step,
            job_name=str(chunks[0]["job_name"]),
            run_dir=run_dir,
            script_path=str(chunks[0]["script_path"]),
            script_sha256=ssh.sha256_hex((table_sha256 + "".join(str(c["script_sha256"]) for c in chunks)).encode()),
            after_definitions=after_definitions,
        )
        inputs: dict[str, Any] = {
            **over_ssh(ssh_target, ssh_secret),
            "scheduler": scheduler,
            "scheduler_options": dict(scheduler_options or {}),
            "step": step,
            "run_dir": run_dir,
            "table_path": table_path,
            "table_sha256": table_sha256,
            "chunks": [dict(c) for c in chunks],
            "log_pattern": log_pattern,
            "requested_queue": requested_queue,
            "after_job_ids": after_job_ids,
            "after_definitions": list(after_definitions),
            "poll_interval_s": poll_interval_s,
            "size": sum(int(c["count"]) for c in chunks),
        }
        if after_array_ids is not None:
            inputs["after_array_ids"] = after_array_ids
        super().__init__(SweepJobProvider(), name, inputs, SWEEP_JOB_OUTPUTS, opts)
