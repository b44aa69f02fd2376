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
- retry: with `max_attempts` above 1, an `up` that finds failed or killed elements (after a
  refresh: `pulumi up --refresh`) submits, per chunk, one new array of just those elements (the
  chunk's own script, its array directive and name overridden on the command line: `-r<attempt>`),
  never an element that succeeded or is still pending or running; a point's last attempt is its
  state. The steps after the sweep wait for the arrays holding each point's last attempt to
  succeed and for the arrays they superseded to end (`final_ids`, `ended_ids`).
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
    scheduler_options_of,
)
from infra.hpc.providers.batch_job import (
    RETIRED_JOBS_FILE,
    check_after_job_ids,
    check_dependencies,
    job_definition,
    replaced_with_surroundings,
)
from infra.hpc.providers.common import HpcProviderError, SshResource, join_remote, over_ssh, utc_now
from infra.hpc.registry import SCHEDULER_NAMES, scheduler_for
from infra.hpc.remote import RemoteResult
from infra.hpc.scheduler import (
    EVERY_ELEMENT,
    JOB_ID,
    JOB_NAME,
    ArrayRequest,
    CancelOutcome,
    JobState,
    Scheduler,
    SchedulerError,
)
from infra.index_ranges import index_ranges, parse_index_ranges

SWEEP_DEFINING_INPUTS = ("chunks", "table_path", "table_sha256", "run_dir", "scheduler", "step", "image_digest")
SWEEP_JOB_OUTPUTS = (
    "job_ids", "job_id", "elements", "state", "counts", "submitted_at", "retries", "final_ids", "ended_ids",
)
MAX_ATTEMPTS = arrays.MAX_ATTEMPTS
RETRIED = frozenset({arrays.FAILED, arrays.KILLED})


@dataclass(frozen=True)
class Chunk:
    """One array of the sweep, as the `chunks` input holds it."""

    job_name: str
    script_path: str
    script_sha256: str
    offset: int
    count: int
    after: int | None  # the chunk (by position) whose array this one waits for
    parallel: int | None = None  # its throttle, which a retry of some of its elements keeps

    @classmethod
    def of(cls, entry: Mapping[str, Any]) -> Chunk:
        after = entry.get("after")
        parallel = entry.get("parallel")
        return cls(
            str(entry["job_name"]),
            str(entry["script_path"]),
            str(entry["script_sha256"]),
            int(entry["offset"]),
            int(entry["count"]),
            None if after is None else int(after),
            None if parallel is None else int(parallel),
        )

    @property
    def points(self) -> range:
        return range(self.offset, self.offset + self.count)


@dataclass(frozen=True)
class Retry:
    """One array of some of a chunk's points run again, as the `retries` output holds it."""

    chunk: int  # the chunk (by position) whose script it ran
    job_id: str
    job_name: str
    points: tuple[int, ...]  # the sweep's points, in element order

    @classmethod
    def of(cls, entry: Mapping[str, Any]) -> Retry:
        return cls(int(entry["chunk"]), str(entry["job_id"]), str(entry["job_name"]),
                   parse_index_ranges(str(entry["points"])))

    def to_dict(self) -> dict[str, Any]:
        return {"chunk": self.chunk, "job_id": self.job_id, "job_name": self.job_name,
                "points": index_ranges(self.points)}


@dataclass(frozen=True)
class ArrayToRead:
    """An array to read: a chunk's own or a retry's, and the points its elements run."""

    chunk: Chunk
    job_id: str
    points: tuple[int, ...]


def sweep_arrays(chunks: Sequence[Chunk], job_ids: Sequence[str], retries: Sequence[Retry]) -> list[ArrayToRead]:
    """Every array of the sweep in submission order: the chunks', then the retries'; a point's
    last array in this order holds its last attempt."""
    found = [ArrayToRead(chunk, job_id, tuple(chunk.points)) for chunk, job_id in zip(chunks, job_ids, strict=True)]
    return found + [ArrayToRead(chunks[r.chunk], r.job_id, r.points) for r in retries]


def attempts_of(size: int, retries: Sequence[Retry]) -> list[int]:
    """How many times each point was submitted: once, plus once per retry that holds it."""
    counts = [1] * size
    for retry in retries:
        for point in retry.points:
            counts[point] += 1
    return counts


def retry_points(letters: str, attempts: Sequence[int], max_attempts: int) -> list[int]:
    """The points to run again: failed or killed, with attempts left. Never one that succeeded,
    or is pending, running or unknown (it may still be running)."""
    return [p for p, letter in enumerate(letters) if letter in RETRIED and attempts[p] < max_attempts]


def dependency_ids(arrays_: Sequence[ArrayToRead], letters: str, base: int) -> tuple[list[str], list[str]]:
    """What a step after the sweep waits for, so that it runs once every point's latest attempt
    succeeded: (`final_ids`) each array none of whose points ran again later, to succeed as a
    whole; (`ended_ids`) each array some of whose points ran again later, to end, whatever its
    elements did (its superseded failures would never let `afterok`/`done` hold), with, in
    `final_ids`, its elements that still hold a point's latest attempt not yet done, one by one
    (`<array>_<index>`, the scheduler's index: Slurm's `afterok:<array>_<index>`, LSF's
    `done(<array>[<index>])`)."""
    last = last_arrays(arrays_)
    final: list[str] = []
    ended: list[str] = []
    for array in arrays_:
        if all(last[p] == array.job_id for p in array.points):
            final.append(array.job_id)
            continue
        ended.append(array.job_id)
        final += [
            f"{array.job_id}_{p - array.chunk.offset + base}"
            for p in array.points
            if last[p] == array.job_id and letters[p] != arrays.DONE
        ]
    return final, ended


def last_arrays(arrays_: Sequence[ArrayToRead]) -> dict[int, str]:
    """Each point's last array: the one whose element is its latest attempt."""
    return {point: array.job_id for array in arrays_ for point in array.points}


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

    @property
    def max_attempts(self) -> int:
        return int(self.props.get("max_attempts") or 1)

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


def earlier_array(call: SweepCall, job_name: str, retired: set[tuple[str, str]]) -> str | None:
    """The array an earlier, interrupted `up` submitted under this unique name (a chunk's or a
    retry's), not retired: the newest by id."""
    query = call.scheduler.array_lookup_query(job_name)
    found = [array_id for array_id in query.parse(call.run(query.command)) if (array_id, job_name) not in retired]
    return max(found, key=int) if found else None


def _submit(
    call: SweepCall,
    chunk: Chunk,
    after: Sequence[str],
    retired: set[tuple[str, str]],
    *,
    after_ended: Sequence[str] = (),
    array: ArrayRequest | None = None,
) -> str:
    job_name = chunk.job_name if array is None else array.job_name
    command = call.scheduler.submit_command(call.run_dir, chunk.script_path, after, after_ended=after_ended,
                                            array=array)
    try:
        # Not retried blindly: a submission that was sent but not answered may have happened.
        result = ssh.run_remote(call.conn, command, check=False, safe_to_retry=False)
    except ssh.ConnectionLostError:
        earlier = earlier_array(call, job_name, retired)  # reconnects; the name says whether it went through
        if earlier is not None:
            return earlier
        result = ssh.run_remote(call.conn, command, check=False, safe_to_retry=False)
    try:
        return call.scheduler.parse_submission(result)
    except SchedulerError as error:
        raise HpcProviderError(
            f"sweep of step {call.step!r}, array {job_name}, was not submitted: {error}"
        ) from None


def check_staged(call: SweepCall) -> None:
    """The table and every chunk's script are where StagedFiles put them, as previewed."""
    paths = [join_remote(call.run_dir, str(call.props["table_path"]))]
    expected = {paths[0]: str(call.props["table_sha256"])}
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


def element_states(
    call: SweepCall, job_ids: Sequence[str], previous: str = "", retries: Sequence[Retry] = ()
) -> str:
    """Every point's letter, in point order, from one query per array, chunks' then retries' (and
    the accounting query for an array whose live answer forgot some), merged with what was
    `previous`ly seen: a point's last array says its state."""
    base = call.scheduler.array_index_base
    seen: dict[int, str] = {}
    for array in sweep_arrays(call.chunks, job_ids, retries):
        query = call.scheduler.array_elements_query(array.job_id)
        states: dict[str, JobState] = query.parse(call.run(query.command))
        if len(states) < len(array.points):
            history = call.scheduler.array_history_query(array.job_id)
            if history is not None:
                states = {**history.parse(call.run(history.command)), **states}
        mine = set(array.points)
        shown = set()
        every = states.pop(EVERY_ELEMENT, None)
        for index, state in states.items():
            point = array.chunk.offset + int(index) - base
            if point in mine:
                seen[point] = arrays.letter_of(state)
                shown.add(point)
        for point in mine - shown:
            if every is not None:
                seen[point] = arrays.letter_of(every)  # the array's own record speaks for it
            else:
                # Its newest array no longer shows it: what an older array said is not its state.
                seen.pop(point, None)
    return arrays.merge(previous, seen, call.size)


def _outs(
    call: SweepCall, job_ids: Sequence[str], letters: str, submitted_at: str, retries: Sequence[Retry] = ()
) -> dict[str, Any]:
    final_ids, ended_ids = dependency_ids(
        sweep_arrays(call.chunks, job_ids, retries), letters, call.scheduler.array_index_base
    )
    return {
        **call.props,
        "job_ids": list(job_ids),
        "job_id": job_ids[0] if job_ids else "",
        "elements": arrays.encode(letters),
        "state": arrays.summary(letters).value,
        "counts": arrays.counts(letters),
        "submitted_at": submitted_at,
        "retries": [r.to_dict() for r in retries],
        "final_ids": final_ids,
        "ended_ids": ended_ids,
    }


def retries_of(props: Mapping[str, Any]) -> list[Retry]:
    return [Retry.of(entry) for entry in props.get("retries") or []]


def needs_retry(olds: Mapping[str, Any], max_attempts: int) -> bool:
    """Whether the elements last read hold a point to run again under `max_attempts`."""
    if max_attempts <= 1 or not olds.get("elements"):
        return False
    letters = arrays.decode(str(olds["elements"]))
    return bool(retry_points(letters, attempts_of(len(letters), retries_of(olds)), max_attempts))


def submit_retries(call: SweepCall, job_ids: Sequence[str], retries: list[Retry], letters: str) -> list[Retry]:
    """One new array per chunk of its points to run again (adopted by name where an interrupted
    `up` submitted it already); the retries with the new ones."""
    todo = retry_points(letters, attempts_of(call.size, retries), call.max_attempts)
    if not todo:
        return retries
    check_staged(call)
    retired = retired_ids(call)
    base = call.scheduler.array_index_base
    found = list(retries)
    for number, chunk in enumerate(call.chunks):
        points = tuple(p for p in todo if p in chunk.points)
        if not points:
            continue
        round_ = 2 + sum(1 for r in found if r.chunk == number)
        job_name = f"{chunk.job_name}-r{round_}"
        array_id = earlier_array(call, job_name, retired)
        if array_id is not None:
            pulumi.log.info(f"{job_name}: adopted array {array_id}, submitted by an earlier `pulumi up`")
        else:
            request = ArrayRequest(job_name, tuple(p - chunk.offset + base for p in points), chunk.parallel)
            array_id = _submit(call, chunk, [], retired, array=request)
            pulumi.log.info(f"{job_name}: array {array_id} runs points {index_ranges(points)} again "
                            f"(attempt {round_} of at most {call.max_attempts})")
        found.append(Retry(number, array_id, job_name, points))
    return found


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
        check_after_job_ids(news, failures)
        return pulumi.dynamic.CheckResult(news, failures)

    def diff(self, _id: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.DiffResult:
        replaces = changed(olds, news, SWEEP_DEFINING_INPUTS)
        replaces += replaced_with_surroundings(olds, news)
        updates = changed(
            olds,
            news,
            ("provider_version", "poll_interval_s", "ssh_secret", "requested_queue", "ssh", "after_definitions",
             "max_attempts"),
        )
        if not replaces and needs_retry(olds, int(news.get("max_attempts") or 1)):
            updates.append("elements")  # failed or killed points with attempts left: run them again
        return pulumi.dynamic.DiffResult(
            changes=bool(replaces or updates), replaces=replaces, delete_before_replace=True
        )

    def create(self, props: dict[str, Any]) -> pulumi.dynamic.CreateResult:
        call = sweep_call(props)
        check_staged(call)
        retired = retired_ids(call)
        after = list(props.get("after_job_ids") or [])
        arrays_before = list(props.get("after_array_ids") or [])
        submitted_at = utc_now()
        job_ids: list[str] = []
        checked = False
        for chunk in call.chunks:
            earlier = earlier_array(call, chunk.job_name, retired)
            if earlier is not None:
                pulumi.log.info(f"{chunk.job_name}: adopted array {earlier}, submitted by an earlier `pulumi up`")
                job_ids.append(earlier)
                continue
            if not checked:
                check_dependencies(call.scheduler, call.run, call.step, after)
                checked = True
            # A lane's next chunk waits for the one before it to end, whatever its elements did: the
            # lane is a throttle, and a failed element must not hold the points after it.
            lane = [job_ids[chunk.after]] if chunk.after is not None else []
            job_ids.append(_submit(call, chunk, after + arrays_before, retired, after_ended=lane
                                   + list(props.get("after_ended_ids") or [])))
        letters = element_states(call, job_ids)
        return pulumi.dynamic.CreateResult(",".join(job_ids), _outs(call, job_ids, letters, submitted_at))

    def read(self, id_: str, props: dict[str, Any]) -> pulumi.dynamic.ReadResult:
        call = sweep_call(props)
        job_ids = list(props.get("job_ids") or id_.split(","))
        retries = retries_of(props)
        previous = arrays.decode(str(props.get("elements") or ""))
        letters = element_states(call, job_ids, previous, retries)
        submitted_at = str(props.get("submitted_at") or "")
        return pulumi.dynamic.ReadResult(id_, _outs(call, job_ids, letters, submitted_at, retries))

    def update(self, id_: str, olds: dict[str, Any], news: dict[str, Any]) -> pulumi.dynamic.UpdateResult:
        kept = {**news, **{k: olds.get(k) for k in SWEEP_JOB_OUTPUTS}}
        if not needs_retry(olds, int(news.get("max_attempts") or 1)):
            return pulumi.dynamic.UpdateResult(kept)
        call = sweep_call(kept)
        job_ids = list(olds.get("job_ids") or id_.split(","))
        retries = retries_of(olds)
        # Read again first: only what is failed or killed now runs again.
        letters = element_states(call, job_ids, arrays.decode(str(olds.get("elements") or "")), retries)
        retried = submit_retries(call, job_ids, retries, letters)
        # What the points' earlier attempts ended as is not their state now: submitted, until read.
        again = {p for r in retried[len(retries):] for p in r.points}
        letters = "".join(arrays.PENDING if p in again else letter for p, letter in enumerate(letters))
        retries = retried
        letters = element_states(call, job_ids, letters, retries)
        return pulumi.dynamic.UpdateResult(_outs(call, job_ids, letters, str(olds.get("submitted_at") or ""), retries))

    def delete(self, id_: str, props: dict[str, Any]) -> None:
        call = sweep_call(props)
        job_ids = list(props.get("job_ids") or id_.split(","))
        retries = retries_of(props)
        letters = element_states(call, job_ids, arrays.decode(str(props.get("elements") or "")), retries)
        retire = []
        names = [c.job_name for c in call.chunks] + [r.job_name for r in retries]
        every = sweep_arrays(call.chunks, job_ids, retries)
        last = last_arrays(every)
        for array, job_name in zip(every, names, strict=True):
            # Its elements whose points ran again later are finished (they failed or were killed).
            if arrays.unfinished("".join(letters[p] for p in array.points if last[p] == array.job_id)):
                outcome = call.scheduler.parse_cancel(
                    array.job_id, call.run(call.scheduler.cancel_command(array.job_id))
                )
                if outcome is CancelOutcome.CANCELLED:
                    pulumi.log.info(f"cancelled array {array.job_id} ({job_name}): every pending or running element")
            retire.append(f"{array.job_id} {job_name}")
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
    retries: pulumi.Output[list[dict[str, Any]]]
    final_ids: pulumi.Output[list[str]]
    ended_ids: pulumi.Output[list[str]]

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
        after_ended_ids: pulumi.Input[Sequence[str]] | None = None,
        after_definitions: Sequence[str] = (),
        max_attempts: int = 1,
        poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
        scheduler_options: Mapping[str, str] | None = None,
        image_digest: pulumi.Input[str] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ) -> None:
        """`chunks`: one entry per array, in order (`job_name`, `script_path`, `script_sha256`,
        `offset`, `count`, `after`), their scripts staged by the environment's StagedFiles with the
        table of points at `table_path`; `after_job_ids` the jobs it waits for (checked, as a
        BatchJob's), `after_array_ids` and `after_ended_ids` the arrays of the sweeps before it (to
        succeed; to end, their failed points run again later); `max_attempts` how many times a
        point may run (1: never again)."""
        if not 1 <= max_attempts <= MAX_ATTEMPTS:
            raise ValueError(f"max_attempts: {max_attempts} is not between 1 and {MAX_ATTEMPTS}")
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
            "max_attempts": max_attempts,
        }
        if after_array_ids is not None:
            inputs["after_array_ids"] = after_array_ids
            inputs["after_ended_ids"] = after_ended_ids if after_ended_ids is not None else []
        if image_digest is not None:
            # Runs in the image (Apptainer): a new image is a new job. Only then, so every bare
            # job's inputs are what they always were.
            inputs["image_digest"] = image_digest
        super().__init__(SweepJobProvider(), name, inputs, SWEEP_JOB_OUTPUTS, opts)
