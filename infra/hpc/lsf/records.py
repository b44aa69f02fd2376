"""LSF's step records for the report: `bjobs -a -hms -o ... -json` under TZ=UTC, and `bhist -l` for
the jobs bjobs has forgotten (past CLEAN_PERIOD). Pure: tests feed recorded output.

States and exit codes are read by jobs.py's parsers, as the providers read them; what is read here
is what the report needs beyond them: times as Unix seconds, the pending reason, the host.
"""

from __future__ import annotations

import datetime as dt
import shlex
from collections.abc import Sequence

from infra.hpc.lsf.jobs import (
    bjobs_records,
    lsf_short,
    parse_bhist_event_times,
    parse_bhist_long,
    parse_bjobs_json,
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
from infra.job_records import StepRecord

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
