"""LSF's step records for the report: `bjobs -a -hms -o ... -json` under TZ=UTC, and `bhist -l` for
the jobs bjobs has forgotten (past CLEAN_PERIOD). Pure: tests feed recorded output.

States and exit codes are read by jobs.py's parsers, as the providers read them; what is read here
is what the report needs beyond them: times as Unix seconds, the pending reason, the host.
"""

from __future__ import annotations

import datetime as dt
import re
import shlex
from collections.abc import Sequence

from infra.hpc.lsf.jobs import (
    bjobs_json_records,
    bjobs_records,
    lsf_short,
    parse_array_bhist,
    parse_array_bhist_event_times,
    parse_bhist_event_times,
    parse_bhist_long,
    parse_bjobs_json,
    state_of_record,
)
from infra.hpc.remote import RemoteResult
from infra.hpc.scheduler import (
    Argv,
    JobState,
    SubmittedStep,
    UnsupportedOutput,
    job_step_record,
    unknown_step_record,
)
from infra.job_records import ElementRecord, StepRecord

LSF_FIELDS = "jobid stat queue exit_code job_name submit_time start_time finish_time exit_reason pend_reason exec_host"
# The commands, less their job ids; the records name them as their source.
BJOBS_QUERY = f"TZ=UTC bjobs -a -hms -o '{LSF_FIELDS}' -json"
BHIST_QUERY = "TZ=UTC bhist -l"


def bjobs_query(job_ids: Sequence[str]) -> str:
    return f"{BJOBS_QUERY} {shlex.join(job_ids)}"


def bhist_query(job_ids: Sequence[str]) -> str:
    return f"{BHIST_QUERY} {shlex.join(job_ids)}"


def bjobs_forgot(bjobs: RemoteResult, ids: Sequence[str]) -> list[str]:
    """The jobs `bjobs` printed no record of (past CLEAN_PERIOD; an ERROR record is none): bhist's."""
    known = bjobs_records(bjobs)
    return [i for i in ids if i not in known]


def _year_of(step: SubmittedStep) -> int:
    submitted = step.submitted_at
    return int(submitted[:4]) if submitted[:4].isdigit() else dt.datetime.now(dt.UTC).year


def lsf_step_records(
    steps: Sequence[SubmittedStep], bjobs: RemoteResult, bhist: RemoteResult | None, host: str, argv: Argv
) -> tuple[StepRecord, ...]:
    """Steps from `bjobs -a -hms -o LSF_FIELDS -json` (and `bhist -l` for jobs bjobs no longer knows)."""
    records = bjobs_records(bjobs)
    states = parse_bjobs_json(bjobs) if bjobs.stdout.strip().startswith("{") else {}
    history: dict[str, JobState] = {}
    history_times: dict[str, dict[str, tuple[str, int | None]]] = {}
    if bhist is not None:
        try:
            history = parse_bhist_long(bhist)
        except UnsupportedOutput:
            history = {}
        history_times = parse_bhist_event_times(bhist)
    # bhist prints no year for this year's events.
    this_year = dt.datetime.now(dt.UTC).year
    result = []
    for step in steps:
        job_id, year = step.job_id, _year_of(step)
        record, state = records.get(job_id), states.get(job_id)
        if record is not None and state is not None:
            submitted = lsf_short(state.submit_time, year)
            started = lsf_short(state.start_time, year)
            finished = lsf_short(state.finish_time, year)
            if finished is not None and submitted is not None and finished < submitted:
                finished = lsf_short(state.finish_time, year + 1)
            result.append(
                job_step_record(
                    step,
                    state,
                    f"LSF: `{BJOBS_QUERY} {job_id}` on {host}",
                    argv,
                    requested_at=submitted,
                    scheduled_at=started,
                    started_at=started,
                    finished_at=finished,
                    pending_reason=record.get("PEND_REASON", "").strip(),
                    node=record.get("EXEC_HOST", ""),
                )
            )
        elif job_id in history:
            times = {
                kind: lsf_short(when, printed_year or this_year)
                for kind, (when, printed_year) in history_times.get(job_id, {}).items()
            }
            result.append(
                job_step_record(
                    step,
                    history[job_id],
                    f"LSF: `{BHIST_QUERY} {job_id}` on {host}",
                    argv,
                    requested_at=times.get("submitted"),
                    scheduled_at=times.get("dispatched"),
                    started_at=times.get("started"),
                    finished_at=times.get("finished"),
                )
            )
        else:
            result.append(unknown_step_record(step, "neither bjobs nor bhist knows the job", argv))
    return tuple(result)


# --- a sweep's elements: one query per array -------------------------------------------------------

# An element's JOB_NAME is the array's name and its index (`name[3]`); its JOBID the array's.
_ELEMENT_NAME = re.compile(r"\[(\d+)\]$")


def array_record_queries(array_id: str) -> list[str]:
    """An array's elements, each command for the whole array (LSF 10.1: an array's id names every
    element), asked in order until every element is known: `bjobs` (what mbatchd holds,
    CLEAN_PERIOD after the end), then `bhist -l` (the event log)."""
    ids = shlex.quote(array_id)
    return [f"{BJOBS_QUERY} {ids}", f"{BHIST_QUERY} {ids}"]


def lsf_array_records(
    array_id: str, answer: RemoteResult, command: str, host: str, year: int
) -> dict[int, ElementRecord]:
    """One of `array_record_queries`' answers as records by the element's index (from 1); the
    point is the caller's. `year`: the submission's (LSF prints none). UnsupportedOutput where
    the command did not answer."""
    source = f"LSF: `{command}` on {host}"
    if command.startswith(BHIST_QUERY):
        return _bhist_array_records(array_id, answer, source)
    found: dict[int, ElementRecord] = {}
    for record in bjobs_json_records(answer):
        match = _ELEMENT_NAME.search(record.get("JOB_NAME", ""))
        if record.get("JOBID") != array_id or match is None:
            continue
        state = state_of_record(record)
        submitted = lsf_short(state.submit_time, year)
        started = lsf_short(state.start_time, year)
        finished = lsf_short(state.finish_time, year) if state.phase.finished else None
        if finished is not None and submitted is not None and finished < submitted:
            finished = lsf_short(state.finish_time, year + 1)
        index = int(match.group(1))
        found[index] = ElementRecord(
            point=-1,
            job=f"{array_id}[{index}]",
            state=state.native_state,
            phase=state.phase.value,
            requested_at=submitted,
            started_at=started,
            finished_at=finished,
            exit_code=state.exit_code,
            node=record.get("EXEC_HOST", ""),
            source=source,
        )
    return found


def _bhist_array_records(array_id: str, answer: RemoteResult, source: str) -> dict[int, ElementRecord]:
    """`bhist -l <array id>`: each element's block, its state and times as for a job (this year's
    events print no year: the current one is taken, as for a step)."""
    if answer.exit_code != 0 and "No matching job found" not in answer.stderr:
        raise UnsupportedOutput(answer.stderr.strip() or f"exit {answer.exit_code}")
    this_year = dt.datetime.now(dt.UTC).year
    found: dict[int, ElementRecord] = {}
    event_times = parse_array_bhist_event_times(answer, array_id)
    for index_text, state in parse_array_bhist(answer, array_id).items():
        index = int(index_text)
        times = {
            kind: lsf_short(when, printed or this_year)
            for kind, (when, printed) in event_times.get(index_text, {}).items()
        }
        found[index] = ElementRecord(
            point=-1,
            job=f"{array_id}[{index}]",
            state=state.native_state,
            phase=state.phase.value,
            requested_at=times.get("submitted"),
            started_at=times.get("started"),
            finished_at=times.get("finished"),
            exit_code=state.exit_code,
            node="",
            source=source,
        )
    return found
