"""LSF's answers about jobs read into job states: bjobs (`-o ... -json`, and the delimited text of
older sites), `bhist -l`, and the times LSF prints. Pure: tests feed recorded output.

Formats are LSF's documented ones (IBM Spectrum LSF 10.1 command reference: bjobs -o/-json,
bhist), as the LSF drivers of Nextflow, Toil and dask-jobqueue parse them.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Mapping

from infra.hpc.remote import RemoteResult
from infra.hpc.scheduler import JobState, Phase, UnsupportedOutput, has_text, unreadable_answer

BJOBS_FIELDS = (
    "jobid",
    "stat",
    "queue",
    "exit_code",
    "job_name",
    "submit_time",
    "start_time",
    "finish_time",
    "exit_reason",
)
TEXT_FIELDS = ("jobid", "stat", "queue", "exit_code", "job_name")
TEXT_DELIMITER = "^"
_NOT_FOUND = re.compile(r"is not found|No (unfinished )?job found")
# bkill's end states: a job killed by its owner or an admin was cancelled, not failed.
KILLED_REASONS = ("TERM_OWNER", "TERM_ADMIN", "TERM_FORCE_OWNER", "TERM_FORCE_ADMIN", "TERM_REQUEUE")

STATE_PHASES: dict[str, Phase] = {
    "PEND": Phase.PENDING,
    "WAIT": Phase.PENDING,
    "PROV": Phase.PENDING,
    "RUN": Phase.RUNNING,
    "PSUSP": Phase.SUSPENDED,
    "USUSP": Phase.SUSPENDED,
    "SSUSP": Phase.SUSPENDED,
    "DONE": Phase.SUCCEEDED,
    "PDONE": Phase.SUCCEEDED,
    "EXIT": Phase.FAILED,
    "PERR": Phase.FAILED,
    "ZOMBI": Phase.CANCELLED,
    "UNKWN": Phase.UNKNOWN,
}

# bjobs' `Dec  2 15:56:43` (-hms), `Dec  2 15:56` without, and a suffix (`L`, `E`) after some.
LSF_SHORT = re.compile(r"^(?P<month>[A-Z][a-z]{2})\s+(?P<day>\d{1,2})\s+(?P<clock>\d{2}:\d{2}(?::\d{2})?)")


def lsf_short(text: str | None, year: int) -> float | None:
    """bjobs' `Dec  2 15:56:43` (with -hms; `Dec  2 15:56` without), printed under TZ=UTC, to Unix seconds.

    LSF prints no year: the caller passes the year of the submission it knows (the stack
    output's `submitted_at`); a finish time in January of a December job rolls over.
    """
    if not text:
        return None
    match = LSF_SHORT.match(text.strip())
    if not match:
        return None
    clock = match["clock"] if match["clock"].count(":") == 2 else match["clock"] + ":00"
    value = dt.datetime.strptime(f"{year} {match['month']} {int(match['day'])} {clock}", "%Y %b %d %H:%M:%S")
    return value.replace(tzinfo=dt.UTC).timestamp()


def lsf_phase(stat: str, exit_code: int | None = None, reason: str = "") -> Phase:
    """A bjobs/bhist state in Atlas's vocabulary: EXIT after bkill (or while pending) is cancelled."""
    phase = STATE_PHASES.get(stat.split(" ")[0].upper(), Phase.UNKNOWN)
    if phase is Phase.FAILED and (any(r in reason for r in KILLED_REASONS) or (not reason and exit_code is None)):
        # EXIT without an exit code: killed while pending.
        return Phase.CANCELLED
    return phase


def _int_or_none(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isdigit() else None


def state_of_record(record: Mapping[str, str]) -> JobState:
    """One bjobs record (upper-case keys, text values) as a job state."""
    stat = record.get("STAT", "")
    exit_code = _int_or_none(record.get("EXIT_CODE", ""))
    if stat in ("DONE", "PDONE") and exit_code is None:
        exit_code = 0  # LSF leaves EXIT_CODE empty for a job that exited 0
    reason = record.get("EXIT_REASON", "")
    return JobState(
        job_id=record["JOBID"],
        phase=lsf_phase(stat, exit_code, reason),
        native_state=stat,
        exit_code=exit_code,
        queue=record.get("QUEUE", ""),
        name=record.get("JOB_NAME", ""),
        submit_time=record.get("SUBMIT_TIME", ""),
        start_time=record.get("START_TIME", ""),
        finish_time=record.get("FINISH_TIME", ""),
        reason=reason,
    )


def bjobs_records(result: RemoteResult) -> dict[str, dict[str, str]]:
    """`bjobs -json`'s records by job id, as text, for the fields a state leaves out (pending
    reason, host); an ERROR record ("Job <N> is not found") is none. Empty where the answer is
    not bjobs' JSON."""
    text = result.stdout.strip()
    if not text.startswith("{"):
        return {}
    return {
        str(record["JOBID"]): {k: str(v) for k, v in record.items()}
        for record in json.loads(text).get("RECORDS", [])
        if record.get("JOBID") and "ERROR" not in record
    }


def parse_bjobs_json(result: RemoteResult) -> dict[str, JobState]:
    """`bjobs -o ... -json`: exit 255 when some ids are unknown, yet the JSON is complete."""
    text = result.stdout.strip()
    if not text.startswith("{"):
        if "No job found" in result.stderr or "No unfinished job found" in result.stderr:
            return {}
        if result.exit_code == 0 and not text and "is not found" in result.stderr:
            return {}
        raise UnsupportedOutput(result.stderr.strip() or text[:200])
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise UnsupportedOutput(f"bjobs -json printed invalid JSON: {error}") from None
    states: dict[str, JobState] = {}
    # bjobs -json always writes a "RECORDS" list (empty for none): without one it is not bjobs'.
    records = document.get("RECORDS") if isinstance(document, dict) else None
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise unreadable_answer("bjobs -json", text)
    for record in records:
        if "ERROR" in record or not record.get("JOBID"):
            continue  # "Job <N> is not found"
        state = state_of_record({k: str(v) for k, v in record.items()})
        states[state.job_id] = state
    return states


def parse_bjobs_text(result: RemoteResult) -> dict[str, JobState]:
    """`bjobs -noheader -o "... delimiter='^'"`: one `id^STAT^queue^exit^name` line per job, '-' for empty."""
    states: dict[str, JobState] = {}
    for line in result.stdout.splitlines():
        parts = line.split(TEXT_DELIMITER)
        if len(parts) != len(TEXT_FIELDS) or not parts[0].strip().isdigit():
            continue
        record = {f.upper(): ("" if v.strip() == "-" else v.strip()) for f, v in zip(TEXT_FIELDS, parts, strict=True)}
        state = state_of_record(record)
        states[state.job_id] = state
    if not states and result.exit_code != 0:
        # 255 with only "Job <N> is not found" lines: none of the ids is known. 255 with anything
        # else ("Cannot connect to LSF. Please wait ..."): bjobs could not answer at all.
        complaints = [line for line in result.stderr.splitlines() if line.strip()]
        if result.exit_code != 255 or not complaints or not all(_NOT_FOUND.search(c) for c in complaints):
            raise UnsupportedOutput(result.stderr.strip())
    if not states and result.exit_code == 0 and has_text(result.stdout):
        raise unreadable_answer("bjobs", result.stdout)
    return states


def _bhist_blocks(result: RemoteResult) -> list[str]:
    text = re.sub(r"\n {2,}", "", result.stdout)  # bhist wraps long lines with indentation
    return re.split(r"\n(?=Job <\d+(?:\[\d+\])?>)", text)


def parse_bhist_long(result: RemoteResult) -> dict[str, JobState]:
    """`bhist -l`: blocks starting `Job <id>, Job Name <name>` with the final event in them."""
    return _bhist_states(result, re.compile(r"Job <(\d+)>(?:, Job Name <([^>]*)>)?"))


def parse_array_bhist(result: RemoteResult, array_id: str | None = None) -> dict[str, JobState]:
    """`bhist -l <array id>`: one block per element (`Job <77[3]>, Job Name <name[3]>`), keyed by
    the element's index, for the elements `bjobs` forgot (past CLEAN_PERIOD); only `array_id`'s
    where given."""
    return _bhist_states(result, re.compile(rf"{_array_head(array_id)}(?:, Job Name <([^>]*)>)?"))


def parse_array_bhist_event_times(
    result: RemoteResult, array_id: str | None = None
) -> dict[str, dict[str, tuple[str, int | None]]]:
    """`parse_bhist_event_times` of `bhist -l <array id>`'s element blocks, keyed by the element's
    index as `parse_array_bhist` keys their states."""
    return _bhist_event_times(result, re.compile(rf"\s*{_array_head(array_id)}"))


def _array_head(array_id: str | None) -> str:
    """An element block's head, `Job <77[3]>`, its index the pattern's first group."""
    array = re.escape(array_id) if array_id else r"\d+"
    return rf"Job <{array}\[(\d+)\]>"


def _bhist_states(result: RemoteResult, head_pattern: re.Pattern[str]) -> dict[str, JobState]:
    """Each block's final event as a JobState, keyed by `head_pattern`'s first group."""
    states: dict[str, JobState] = {}
    for block in _bhist_blocks(result):
        head = head_pattern.match(block.strip())
        if not head:
            continue
        queue = re.search(r"to Queue <([^>]*)>", block)
        done = re.search(r"^(.*?): Done successfully", block, re.MULTILINE)
        exited = re.search(r"^(.*?): Exited with exit code (\d+)", block, re.MULTILINE)
        forced = re.search(
            r"^(.*?): Exited; job has been forced to exit(?: with exit code (\d+))?", block, re.MULTILINE
        )
        code: int | None
        if done:
            stat, code, finish = "DONE", 0, done.group(1)
        elif exited:
            stat, code, finish = "EXIT", int(exited.group(2)), exited.group(1)
        elif forced:
            # Killed by bkill: the code is the signal's (130, 143) where bhist prints one.
            stat, code, finish = "EXIT", int(forced.group(2)) if forced.group(2) else None, forced.group(1)
        elif "Starting" in block or "Dispatched" in block:
            stat, code, finish = "RUN", None, ""
        else:
            stat, code, finish = "PEND", None, ""
        reason = "TERM_OWNER" if forced or (exited and "killed" in block) else ""
        states[head.group(1)] = JobState(
            job_id=head.group(1),
            phase=lsf_phase(stat, code, reason),
            native_state=stat,
            exit_code=code,
            queue=queue.group(1) if queue else "",
            name=head.group(2) or "",
            finish_time=finish.strip(),
            reason=reason,
        )
    if not states and result.exit_code != 0 and "No matching job found" not in result.stderr:
        raise UnsupportedOutput(result.stderr.strip())
    return states


# `bhist -l` event lines, `Wed Dec  2 15:56:43: Submitted from host <vm>, ...`: the year follows the
# clock only for events of another year than the current one.
BHIST_EVENT = re.compile(r"^\w{3} (\w{3}\s+\d+ \d{2}:\d{2}:\d{2})(?: (\d{4}))?: (.*)$", re.MULTILINE)
BHIST_EVENT_TIMES = (
    ("Submitted", "submitted"),
    ("Dispatched", "dispatched"),
    ("Starting", "started"),
    ("Done successfully", "finished"),
    ("Exited", "finished"),
)


def parse_bhist_event_times(result: RemoteResult) -> dict[str, dict[str, tuple[str, int | None]]]:
    """`bhist -l`'s lifecycle times per job: {"submitted" | "dispatched" | "started" | "finished":
    (`Dec  2 15:56:43` as printed, the year where bhist printed one)}. The last event of a kind
    wins (a requeued job's last dispatch); `parse_bhist_long` reads the same blocks' states."""
    return _bhist_event_times(result, re.compile(r"\s*Job <(\d+)>"))


def _bhist_event_times(
    result: RemoteResult, head_pattern: re.Pattern[str]
) -> dict[str, dict[str, tuple[str, int | None]]]:
    """Each block's lifecycle times, keyed by `head_pattern`'s first group."""
    times: dict[str, dict[str, tuple[str, int | None]]] = {}
    for block in _bhist_blocks(result):
        head = head_pattern.match(block)
        if not head:
            continue
        events = times.setdefault(head.group(1), {})
        for when, year, what in BHIST_EVENT.findall(block):
            kind = next((kind for prefix, kind in BHIST_EVENT_TIMES if what.startswith(prefix)), None)
            if kind is not None:
                events[kind] = (when, int(year) if year else None)
    return times


# --- job arrays: one record per element -----------------------------------------------------------

# An element's JOB_NAME is the array's name and its index (`name[3]`); its JOBID the array's.
ARRAY_FIELDS = ("jobid", "job_name", "stat", "exit_code", "exit_reason")
_ELEMENT_NAME = re.compile(r"\[(\d+)\]$")


def parse_array_bjobs(result: RemoteResult) -> dict[str, JobState]:
    """`bjobs -a -o 'jobid job_name stat exit_code exit_reason' -json <array id>`: every element, by
    its index (from 1). An array LSF has forgotten (CLEAN_PERIOD) is no elements."""
    states = {}
    for state in _records(result):
        match = _ELEMENT_NAME.search(state.name)
        if match:
            states[match.group(1)] = state
    return states


def _records(result: RemoteResult) -> list[JobState]:
    return [state_of_record(record) for record in bjobs_json_records(result)]


def bjobs_json_records(result: RemoteResult) -> list[dict[str, str]]:
    """`bjobs -o ... -json`'s records as text, every one (an array's elements share its JOBID);
    an ERROR record ("Job <N> is not found") is none, as is no output at all. UnsupportedOutput
    for an answer that is not bjobs' JSON."""
    text = result.stdout.strip()
    if not text.startswith("{"):
        if result.exit_code in (0, 255) and not text:
            return []  # "Job <N> is not found", "No job found"
        raise UnsupportedOutput(result.stderr.strip() or text[:200])
    try:
        records = json.loads(text).get("RECORDS")
    except (json.JSONDecodeError, AttributeError) as error:
        raise UnsupportedOutput(f"bjobs -json printed no records: {error}") from None
    if not isinstance(records, list):
        raise unreadable_answer("bjobs -json", text)
    return [
        {k: str(v) for k, v in record.items()}
        for record in records
        if isinstance(record, dict) and record.get("JOBID") and "ERROR" not in record
    ]
