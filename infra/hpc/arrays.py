"""A job array's elements in compact form: one letter per element, run-length encoded in state.

A swept step's SweepJob (infra/hpc/providers/sweep_job.py) keeps its per-element states as one
string, a letter per element in point order (docs/architecture.md, "Sweeps: one object per
sweep"), stored run-length encoded (`D998F2`): a few bytes when most elements agree, at most a
letter and a digit or two per element. Pure: the schedulers' parsers give `JobState`s by element
index, and this turns them into letters, merges them with what was seen before and summarises.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping

from infra.hpc.scheduler import EVERY_ELEMENT, JobState, Phase, array_points
from infra.outputs import SweepOutputs

PENDING = "P"
RUNNING = "R"
DONE = "D"
FAILED = "F"
KILLED = "K"  # cancelled by someone other than Atlas (the owner by hand, an admin)
CANCELLED = "C"  # cancelled by Atlas (destroy)
UNKNOWN = "?"
LETTERS = (PENDING, RUNNING, DONE, FAILED, KILLED, CANCELLED, UNKNOWN)
# What a letter reads as in a person's words (the refresh log, the outputs' counts).
WORDS = {
    PENDING: "pending",
    RUNNING: "running",
    DONE: "done",
    FAILED: "failed",
    KILLED: "killed outside Atlas",
    CANCELLED: "cancelled by Atlas",
    UNKNOWN: "unknown",
}
FINISHED = frozenset({DONE, FAILED, KILLED, CANCELLED})
# A retry's job name adds `-r<attempt>` to its chunk's (at most 63 characters: job_name_for's 57,
# `-c9`, `-r9`), so a point runs at most nine times.
MAX_ATTEMPTS = 9
# A letter as a phase (infra.hpc.scheduler.Phase's value): what the report and monitor count by.
PHASES = {
    PENDING: Phase.PENDING.value,
    RUNNING: Phase.RUNNING.value,
    DONE: Phase.SUCCEEDED.value,
    FAILED: Phase.FAILED.value,
    KILLED: Phase.CANCELLED.value,
    CANCELLED: Phase.CANCELLED.value,
    UNKNOWN: Phase.UNKNOWN.value,
}
_RUN = re.compile(r"([PRDFKC?])(\d+)")


def letter_of(state: JobState) -> str:
    """An element's letter. Atlas cancels elements only when it deletes the sweep, after which
    nothing reads them: an element the scheduler shows cancelled was killed outside Atlas."""
    return {
        Phase.PENDING: PENDING,
        Phase.RUNNING: RUNNING,
        Phase.SUSPENDED: RUNNING,  # started, and holds its place
        Phase.SUCCEEDED: DONE,
        Phase.FAILED: FAILED,
        Phase.CANCELLED: KILLED,
    }.get(state.phase, UNKNOWN)


def encode(states: str) -> str:
    """`DDDDF` as `D4F1`: each run of one letter as the letter and its length."""
    if any(letter not in LETTERS for letter in states):
        raise ValueError(f"element states must be letters of {''.join(LETTERS)}, found {states!r}")
    runs: list[str] = []
    i = 0
    while i < len(states):
        j = i
        while j < len(states) and states[j] == states[i]:
            j += 1
        runs.append(f"{states[i]}{j - i}")
        i = j
    return "".join(runs)


def decode(text: str) -> str:
    """`encode`'s inverse; ValueError for text it did not write."""
    if _RUN.sub("", text):
        raise ValueError(f"{text!r} is not run-length encoded element states (e.g. D998F2)")
    return "".join(letter * int(count) for letter, count in _RUN.findall(text))


def merge(previous: str, seen: Mapping[int, str], count: int) -> str:
    """The elements' letters after a query: what the scheduler showed (`seen`, by 0-based position
    in the array) wins; an element it no longer shows (past MinJobAge or CLEAN_PERIOD with no
    history) keeps a finished letter it had, and is unknown if it was last seen unfinished."""
    old = previous if len(previous) == count else UNKNOWN * count
    return "".join(seen[i] if i in seen else (old[i] if old[i] in FINISHED else UNKNOWN) for i in range(count))


def summary(states: str) -> Phase:
    """The sweep as one phase: running while any element runs, pending while any waits and none
    runs, succeeded when every one is done, unknown while any is unknown and none is unfinished,
    cancelled when any was killed and none failed, else failed."""
    letters = set(states)
    if not letters:
        return Phase.UNKNOWN
    if RUNNING in letters:
        return Phase.RUNNING
    if PENDING in letters:
        return Phase.PENDING
    if letters == {DONE}:
        return Phase.SUCCEEDED
    if UNKNOWN in letters:
        return Phase.UNKNOWN
    if FAILED in letters:
        return Phase.FAILED
    return Phase.CANCELLED


def counts(states: str) -> dict[str, int]:
    """How many elements are in each state, by word (`{"done": 998, "failed": 2}`)."""
    return {WORDS[letter]: n for letter, n in sorted(Counter(states).items(), key=lambda kv: LETTERS.index(kv[0]))}


def unfinished(states: str) -> bool:
    return any(letter not in FINISHED for letter in states)


def sweep_letters(sweep: SweepOutputs, seen: Mapping[str, Mapping[str, JobState]], base: int) -> str:
    """A sweep's letter per point now: each array's elements as `array_elements_query` answered
    (`seen` by array id, then by the element's index counted from `base`), the later array of a
    point (its retry) winning, merged with the letters the stack outputs hold (`merge`)."""
    try:
        previous = decode(sweep.elements)
    except ValueError:
        previous = ""
    found: dict[int, str] = {}
    for array in sweep.arrays:
        points = array_points(array)
        answer = seen.get(array.job_id, {})
        for key, state in answer.items():
            point = points.get(int(key) - base) if key.isdigit() else None
            if point is not None:
                found[point] = letter_of(state)
        every = answer.get(EVERY_ELEMENT)
        if every is not None:  # the array's own record speaks for the elements it does not list
            listed = {points.get(int(k) - base) for k in answer if k.isdigit()}
            for point in set(points.values()) - listed:
                found[point] = letter_of(every)
    return merge(previous, found, sweep.points)
