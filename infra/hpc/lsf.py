"""IBM Spectrum LSF 10.1: `#BSUB` scripts, bsub/bjobs/bhist/bkill command lines and their output.

Formats are LSF's documented ones (IBM Spectrum LSF 10.1 command reference: bsub, bjobs -o/-json,
bhist, bkill), as the LSF drivers of Nextflow, Toil and dask-jobqueue parse them; tested on
recorded output in tests/unit/test_hpc_parsers.py. Pure: no I/O.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import ClassVar

from infra.hpc.remote import RemoteResult
from infra.hpc.scheduler import (
    CancelOutcome,
    Directive,
    JobSpec,
    JobState,
    Phase,
    Scheduler,
    SchedulerError,
    StatusQuery,
    UnsupportedOutput,
    has_text,
    unreadable_answer,
    validate_job_ids,
)

# LSF prints other lines before the answer ("LSF is processing your request. Please wait ..."):
# search, never take the first line.
SUBMITTED = re.compile(r"Job <(\d+)> is submitted to (?:default )?queue <([^>]*)>")
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
_NOT_FOUND = re.compile(r"is not found|No (unfinished )?job found")
TEXT_DELIMITER = "^"
# bkill's end states: a job killed by its owner or an admin was cancelled, not failed.
KILLED_REASONS = ("TERM_OWNER", "TERM_ADMIN", "TERM_FORCE_OWNER", "TERM_FORCE_ADMIN", "TERM_REQUEUE")
MEMORY_UNIT_MIB = {"KB": 1 / 1024, "MB": 1, "GB": 1024}

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


def _int_or_none(text: str) -> int | None:
    text = text.strip()
    return int(text) if text.isdigit() else None


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
    times: dict[str, dict[str, tuple[str, int | None]]] = {}
    text = re.sub(r"\n {2,}", "", result.stdout)  # bhist wraps long lines with indentation
    for block in re.split(r"\n(?=Job <\d+>)", text):
        head = re.match(r"\s*Job <(\d+)>", block)
        if not head:
            continue
        events = times.setdefault(head.group(1), {})
        for when, year, what in BHIST_EVENT.findall(block):
            kind = next((kind for prefix, kind in BHIST_EVENT_TIMES if what.startswith(prefix)), None)
            if kind is not None:
                events[kind] = (when, int(year) if year else None)
    return times


class LsfScheduler(Scheduler):
    name: ClassVar[str] = "lsf"
    label: ClassVar[str] = "LSF"
    script_suffix: ClassVar[str] = ".lsf"
    directive_prefix: ClassVar[str] = "#BSUB"
    job_id_variable: ClassVar[str] = "LSB_JOBID"
    log_placeholder: ClassVar[str] = "%J"
    option_value_separator: ClassVar[str] = " "
    state_phases: ClassVar[Mapping[str, Phase]] = STATE_PHASES
    submit_program: ClassVar[str] = "bsub"
    cancel_program: ClassVar[str] = "bkill"
    account_option: ClassVar[str] = "-P"
    rendered_options: ClassVar[frozenset[str]] = frozenset(
        {"-J", "-L", "-n", "-o", "-M", "-R", "-gpu", "-q", "-W", account_option}
    )
    reserved_options: ClassVar[Mapping[str, str]] = {
        "-J": "Atlas finds its jobs by this name",
        "-o": "Atlas reads each step's log (stdout and stderr) from this file",
        "-oo": "Atlas reads each step's log (stdout and stderr) from its -o file",
        "-e": "Atlas reads each step's errors from its -o file",
        "-eo": "Atlas reads each step's errors from its -o file",
        "-w": "Atlas chains the steps with dependencies of its own",
    }
    own_config_keys: ClassVar[tuple[str, ...]] = ("lsf_memory_unit",)
    backfill_unsupported: ClassVar[str] = (
        "preemption is a queue the site defines (PREEMPTION=PREEMPTABLE in lsb.queues)"
    )

    def __init__(self, memory_unit: str = "MB") -> None:
        # LSF_UNIT_FOR_LIMITS is the cluster's (bparams -a); never assume the local machine's.
        if memory_unit not in MEMORY_UNIT_MIB:
            raise ValueError(f"LSF memory unit must be one of {', '.join(MEMORY_UNIT_MIB)}, found {memory_unit!r}")
        self.memory_unit = memory_unit

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> LsfScheduler:
        return cls(options.get("lsf_memory_unit") or "MB")

    def _memory(self, mib: int) -> str:
        return str(max(1, -(-int(mib * 1024 * 1024) // int(MEMORY_UNIT_MIB[self.memory_unit] * 1024 * 1024))))

    def directives(self, spec: JobSpec) -> list[Directive]:
        # One slot per node and span[ptile=1], as Satori's scripts asked for nodes (-n 8 -R "span[ptile=1]").
        resources = ["span[ptile=1]"]
        result = [
            Directive("-J", spec.job_name),
            Directive("-L", "/bin/bash"),
            Directive("-n", str(spec.nodes)),
            Directive("-o", spec.log_file(self.log_placeholder)),
        ]
        if spec.memory_mib is not None:
            memory = self._memory(spec.memory_mib)
            result.append(Directive("-M", memory))
            resources.insert(0, f"rusage[mem={memory}]")
        result.append(Directive("-R", " ".join(resources)))
        if spec.gpus_per_node:
            result.append(Directive("-gpu", f"num={spec.gpus_per_node}"))
        if spec.queue:
            result.append(Directive("-q", spec.queue))
        if spec.walltime_seconds:
            minutes = -(-spec.walltime_seconds // 60)
            result.append(Directive("-W", f"{minutes // 60}:{minutes % 60:02d}"))
        return result

    def phase_of(self, native_state: str, exit_code: int | None = None, reason: str = "") -> Phase:
        phase = super().phase_of(native_state)
        if phase is Phase.FAILED and (any(r in reason for r in KILLED_REASONS) or (not reason and exit_code is None)):
            # EXIT without an exit code: killed while pending.
            return Phase.CANCELLED
        return phase

    # --- submission ---------------------------------------------------------------------------

    def dependency_expression(self, after: Sequence[str]) -> str:
        return " && ".join(f"done({job_id})" for job_id in validate_job_ids(after))

    def submit_command(self, workdir: str, script: str, after: Sequence[str]) -> str:
        # The script goes on stdin: `bsub script` ignores #BSUB lines unless LSB_BSUB_PARSE_SCRIPT=Y.
        command = "bsub"
        if after:
            command += f" -w {shlex.quote(self.dependency_expression(after))}"
        return f"cd -- {shlex.quote(workdir)} && {command} < {shlex.quote(script)}"

    def parse_submission(self, result: RemoteResult) -> str:
        # The last such line: anything before it (a wrapper's or profile's chatter) is not bsub's.
        matches = list(SUBMITTED.finditer(result.stdout))
        if result.exit_code == 0 and matches:
            return matches[-1].group(1)
        raise self.submission_refused(result)

    # --- status ---------------------------------------------------------------------------------

    def status_queries(self, job_ids: Sequence[str]) -> list[StatusQuery]:
        ids = shlex.join(validate_job_ids(job_ids))
        fields = " ".join(BJOBS_FIELDS)
        text_fields = " ".join(TEXT_FIELDS)
        return [
            # -json exists from 10.1.0.2 on; older sites get the delimited text form.
            StatusQuery(f"bjobs -o {shlex.quote(fields)} -json {ids}", self.parse_bjobs_json),
            StatusQuery(
                f"bjobs -noheader -o {shlex.quote(f'{text_fields} delimiter={TEXT_DELIMITER!r}')} {ids}",
                self.parse_bjobs_text,
            ),
        ]

    def accounting_queries(self, job_ids: Sequence[str]) -> list[StatusQuery]:
        # Past CLEAN_PERIOD only the event log knows a job.
        return [StatusQuery(f"bhist -l {shlex.join(validate_job_ids(job_ids))}", self.parse_bhist_long)]

    def lookup_by_name_query(self, job_name: str) -> StatusQuery:
        fields = " ".join(BJOBS_FIELDS)
        return StatusQuery(f"bjobs -a -J {shlex.quote(job_name)} -o {shlex.quote(fields)} -json", self.parse_bjobs_json)

    def _state(self, record: Mapping[str, str]) -> JobState:
        stat = record.get("STAT", "")
        exit_code = _int_or_none(record.get("EXIT_CODE", ""))
        if stat in ("DONE", "PDONE") and exit_code is None:
            exit_code = 0  # LSF leaves EXIT_CODE empty for a job that exited 0
        reason = record.get("EXIT_REASON", "")
        return JobState(
            job_id=record["JOBID"],
            phase=self.phase_of(stat, exit_code, reason),
            native_state=stat,
            exit_code=exit_code,
            queue=record.get("QUEUE", ""),
            name=record.get("JOB_NAME", ""),
            submit_time=record.get("SUBMIT_TIME", ""),
            start_time=record.get("START_TIME", ""),
            finish_time=record.get("FINISH_TIME", ""),
            reason=reason,
        )

    def parse_bjobs_json(self, result: RemoteResult) -> dict[str, JobState]:
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
            state = self._state({k: str(v) for k, v in record.items()})
            states[state.job_id] = state
        return states

    def parse_bjobs_text(self, result: RemoteResult) -> dict[str, JobState]:
        """`bjobs -noheader -o "... delimiter='^'"`: one `id^STAT^queue^exit^name` line per job, '-' for empty."""
        states: dict[str, JobState] = {}
        for line in result.stdout.splitlines():
            parts = line.split(TEXT_DELIMITER)
            if len(parts) != len(TEXT_FIELDS) or not parts[0].strip().isdigit():
                continue
            record = {
                f.upper(): ("" if v.strip() == "-" else v.strip()) for f, v in zip(TEXT_FIELDS, parts, strict=True)
            }
            state = self._state(record)
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

    def parse_bhist_long(self, result: RemoteResult) -> dict[str, JobState]:
        """`bhist -l`: blocks starting `Job <id>, Job Name <name>` with the final event in them."""
        states: dict[str, JobState] = {}
        text = re.sub(r"\n {2,}", "", result.stdout)  # bhist wraps long lines with indentation
        for block in re.split(r"\n(?=Job <\d+>)", text):
            head = re.match(r"Job <(\d+)>(?:, Job Name <([^>]*)>)?", block.strip())
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
                phase=self.phase_of(stat, code, reason),
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

    # --- cancel ---------------------------------------------------------------------------------

    def parse_cancel(self, job_id: str, result: RemoteResult) -> CancelOutcome:
        text = result.stdout + result.stderr
        if result.exit_code == 0 and "is being terminated" in text:
            return CancelOutcome.CANCELLED
        if "has already finished" in text:
            return CancelOutcome.ALREADY_FINISHED
        if "No matching job found" in text or "is not found" in text:
            return CancelOutcome.NOT_FOUND
        if result.exit_code == 0:
            return CancelOutcome.CANCELLED
        raise SchedulerError(f"bkill {job_id} failed (exit {result.exit_code}): {text.strip() or '(no output)'}")
