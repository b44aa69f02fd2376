"""Batched, rate-limited job status per login host: one bjobs/squeue for many jobs.

Site admins limit how often users poll the scheduler (a bjobs every few seconds drew
complaints at LSF sites; Slurm sites ask for squeue at most every minute or two). Every
status read in a provider process goes through the board of its host:
- requests that arrive together are gathered for a moment and answered by one query;
- a host is never queried more often than its minimum interval; an answer younger than
  that interval is served from the board;
- a site that fails is asked again after a growing delay (`backoff_s`: the monitor and
  `atlas compare --wait` use it);
- `fresh_after` lets a waiter insist on an answer newer than a given time (it then waits for
  the next allowed query instead of re-reading the same old answer).

`query_states` asks a scheduler for many jobs' states in as few commands as it can (the live
query, then accounting); `lookup_by_name` finds a job by its name. Both take a `runner`, so
tests feed recorded output.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from infra.hpc.remote import RemoteResult, Runner
from infra.hpc.scheduler import JobState, Scheduler, SchedulerError, UnsupportedOutput

GATHER_S = 0.2  # how long a first request waits for others to join its query
# A site that keeps failing is asked again after 1, 2, 4, ... intervals, at most this long apart
# (or one interval, where that is longer): a login node that is down is not hammered.
MAX_BACKOFF_S = 600.0


def backoff_s(interval_s: float, failures: int) -> float:
    """How long to wait before asking a site again after `failures` failed polls in a row (none:
    the interval itself)."""
    if failures <= 0:
        return interval_s
    return min(interval_s * 2.0 ** (failures - 1), max(MAX_BACKOFF_S, interval_s))


@dataclass
class QueryOutcome:
    states: dict[str, JobState] = field(default_factory=dict)
    commands: list[str] = field(default_factory=list)


def query_states(scheduler: Scheduler, runner: Runner, job_ids: Sequence[str]) -> QueryOutcome:
    """States of many jobs in as few commands as possible: the live query, then accounting.

    Jobs absent from every answer are absent from the result: the scheduler no longer
    knows them (or never did).
    """
    outcome = QueryOutcome()
    wanted = sorted(set(job_ids), key=int)
    if not wanted:
        return outcome
    for live, queries in ((True, scheduler.status_queries), (False, scheduler.accounting_queries)):
        missing = [j for j in wanted if j not in outcome.states]
        if not missing:
            break
        failures: list[str] = []
        for query in queries(missing):
            outcome.commands.append(query.command)
            try:
                found = query.parse(runner(query.command))
            except UnsupportedOutput as error:
                failures.append(f"`{query.command}`: {error}")
                continue
            outcome.states.update({k: v for k, v in found.items() if k in missing})
            break
        else:
            if live:
                # No live query answered: the scheduler is down or unreachable, which is not the
                # same as "it does not know these jobs" (that would read as jobs that vanished).
                raise SchedulerError(
                    f"{scheduler.name} did not answer a status query (is its controller up?): " + "; ".join(failures)
                )
    return outcome


def lookup_by_name(scheduler: Scheduler, runner: Runner, job_name: str) -> list[JobState]:
    """The login user's jobs named `job_name`. An answer that cannot be read is an error, never
    "none": a submission decided on it could duplicate a job already there."""
    query = scheduler.lookup_by_name_query(job_name)
    try:
        states = query.parse(runner(query.command))
    except UnsupportedOutput as error:
        raise SchedulerError(
            f"{scheduler.name} could not say whether job {job_name} exists (`{query.command}`: {error}); "
            "nothing was submitted: check the scheduler, then run `pulumi up` again"
        ) from None
    return sorted((s for s in states.values() if s.name == job_name), key=lambda s: int(s.job_id))


@dataclass
class _Answer:
    state: JobState | None  # None: the scheduler does not know the job
    fetched_at: float


@dataclass
class StatusBoard:
    min_interval_s: float
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    queries: int = 0  # how many scheduler queries this board made (tests and the bench read it)
    _answers: dict[str, _Answer] = field(default_factory=dict)
    _wanted: set[str] = field(default_factory=set)
    _last_query_at: float | None = None
    _in_flight: bool = False
    _cond: threading.Condition = field(default_factory=threading.Condition)

    def states(
        self,
        scheduler: Scheduler,
        runner: Callable[[str], RemoteResult],
        job_ids: Sequence[str],
        fresh_after: float | None = None,
    ) -> dict[str, JobState | None]:
        """The state of each job (None: unknown to the scheduler), at most `min_interval_s` old."""
        ids = set(job_ids)
        with self._cond:
            self._wanted |= ids
            while True:
                now = self.clock()
                oldest_ok = now - self.min_interval_s if fresh_after is None else fresh_after
                if all(j in self._answers and self._answers[j].fetched_at >= oldest_ok for j in ids):
                    return {j: self._answers[j].state for j in ids}
                if self._in_flight:
                    self._cond.wait(timeout=1.0)
                    continue
                wait = 0.0 if self._last_query_at is None else self._last_query_at + self.min_interval_s - now
                if wait > 0:
                    self._cond.wait(timeout=wait)
                    continue
                self._in_flight = True
                break
        try:
            self.sleep(GATHER_S)  # let concurrent readers (a refresh of many jobs) join this query
            with self._cond:
                batch = sorted(self._wanted, key=int)
            outcome = query_states(scheduler, runner, batch)
            fetched_at = self.clock()
            with self._cond:
                self.queries += 1
                for job_id in batch:
                    self._answers[job_id] = _Answer(outcome.states.get(job_id), fetched_at)
                self._last_query_at = fetched_at
        finally:
            with self._cond:
                self._in_flight = False
                self._cond.notify_all()
        with self._cond:
            return {j: self._answers[j].state if j in self._answers else None for j in ids}

    def forget(self, job_ids: Sequence[str]) -> None:
        """Stop asking about jobs Atlas no longer tracks (deleted resources)."""
        with self._cond:
            self._wanted -= set(job_ids)
            for job_id in job_ids:
                self._answers.pop(job_id, None)

    def invalidate(self, job_ids: Sequence[str]) -> None:
        """Drop cached answers (after a submit or cancel changed them), keeping the rate limit."""
        with self._cond:
            for job_id in job_ids:
                self._answers.pop(job_id, None)


_BOARDS: dict[tuple[tuple[str, int, str], str], StatusBoard] = {}
_BOARDS_LOCK = threading.Lock()


def board_for(host_key: tuple[str, int, str], min_interval_s: float, scheduler: str = "") -> StatusBoard:
    """The process's board for a host's scheduler; the strictest interval asked for wins.

    One board per scheduler: a login node may serve LSF and Slurm (the local Satori does, with
    one job id space), and a board answers every job it was asked about with one scheduler's
    query, so jobs of another scheduler on a shared board got that scheduler's states.
    """
    key = (host_key, scheduler)
    with _BOARDS_LOCK:
        board = _BOARDS.get(key)
        if board is None:
            board = StatusBoard(min_interval_s)
            _BOARDS[key] = board
        board.min_interval_s = max(board.min_interval_s, min_interval_s)
        return board


def reset_boards() -> None:
    with _BOARDS_LOCK:
        _BOARDS.clear()
