"""LSF's view of Slurm's jobs: job records and states from squeue's, and what bjobs, bhist and bkill print.

Pure: no subprocess, no files (the clock comes in as `now`); table-tested
(tests/unit/test_lsf_commands.py). queries.py feeds it squeue --json records and prints what it
returns. Stdlib only: the commands run with the login node's system python.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import Any

from .errors import LsfError

# --- times ----------------------------------------------------------------------------------------


def lsf_time(epoch: int | float | None, seconds: bool = False) -> str:
    """LSF's short time: ctime()'s `Mmm dd hh:mm` (`-hms`: with `:ss`); '' when unset."""
    if not epoch:
        return ""
    text = time.ctime(epoch)  # "Thu Sep  3 14:20:11 2020"
    return text[4:19] if seconds else text[4:16]


def lsf_long_time(epoch: int | float) -> str:
    """bhist -l / bjobs -l style: `Thu Sep  3 14:20:11`."""
    return time.ctime(epoch)[:19]


# --- job states -----------------------------------------------------------------------------------

STATE_FROM_SLURM = {
    "PENDING": "PEND",
    "REQUEUED": "PEND",
    "REQUEUE_HOLD": "PSUSP",
    "REQUEUE_FED": "PEND",
    "RESV_DEL_HOLD": "PSUSP",
    "CONFIGURING": "RUN",
    "RUNNING": "RUN",
    "COMPLETING": "RUN",
    "RESIZING": "RUN",
    "SIGNALING": "RUN",
    "STAGE_OUT": "RUN",
    "SUSPENDED": "USUSP",
    "STOPPED": "USUSP",
    "COMPLETED": "DONE",
    "FAILED": "EXIT",
    "CANCELLED": "EXIT",
    "TIMEOUT": "EXIT",
    "NODE_FAIL": "EXIT",
    "PREEMPTED": "EXIT",
    "OUT_OF_MEMORY": "EXIT",
    "BOOT_FAIL": "EXIT",
    "DEADLINE": "EXIT",
    "SPECIAL_EXIT": "EXIT",
    "REVOKED": "EXIT",
}
FINISHED_STATES = frozenset({"DONE", "EXIT"})
PEND_REASONS = {
    "Dependency": "Job dependency condition not satisfied",
    "DependencyNeverSatisfied": "Dependency condition invalid or never satisfied",
    "Resources": "Not enough job slot(s)",
    "Priority": "Not enough job slot(s)",
    "JobHeldUser": "The job was suspended by the user while pending",
    "JobHeldAdmin": "The job was suspended by LSF admin or root while pending",
    "BeginTime": "The job has a specified start time",
    "JobArrayTaskLimit": "The job array has reached its running element limit",
    "PartitionNodeLimit": "Not enough hosts to meet the job's spanning requirement",
}
# LSF reports a job stopped at its run limit (-W) with TERM_RUNLIMIT: SIGUSR2, 128+12.
RUNLIMIT_EXIT_CODE = 140


@dataclass
class LsfJob:
    jobid: str
    index: int  # 0 when not an array element
    name: str
    user: str
    stat: str
    queue: str
    from_host: str
    exec_host: str
    slots: int
    submit_time: int
    start_time: int
    finish_time: int
    exit_code: int | None  # None when not finished, or killed before it started
    pend_reason: str
    dependency: str
    command: str
    cwd: str
    output_file: str
    error_file: str
    run_limit_min: int | None
    slurm_state: str

    @property
    def display_id(self) -> str:
        return f"{self.jobid}[{self.index}]" if self.index else self.jobid

    @property
    def finished(self) -> bool:
        return self.stat in FINISHED_STATES


def _number(value: Any) -> int:
    # squeue --json writes some integers as {"set": bool, "number": int} in later releases.
    if isinstance(value, dict):
        return int(value.get("number", 0)) if value.get("set", True) else 0
    return int(value or 0)


def lsf_job_from_slurm(rec: dict[str, Any], submit_host: str) -> LsfJob:
    """One squeue --json job record as LSF sees it."""
    slurm_state = str(rec.get("job_state", "")).split()[0] if rec.get("job_state") else ""
    stat = STATE_FROM_SLURM.get(slurm_state, "UNKWN")
    reason = str(rec.get("state_reason", "") or "")
    if stat == "PEND" and reason in ("JobHeldUser", "JobHeldAdmin"):
        stat = "PSUSP"
    array_job = _number(rec.get("array_job_id"))
    task = rec.get("array_task_id")
    task_id = _number(task) if task not in (None, "") else 0
    jobid = str(array_job if array_job else _number(rec.get("job_id")))
    index = task_id if array_job else 0
    raw = _number(rec.get("exit_code"))
    exit_code: int | None = None
    start = _number(rec.get("start_time"))
    nodes = str(rec.get("nodes") or "")
    # Killed while pending: Slurm stamps a start time but never ran it; LSF shows no start.
    killed_pending = slurm_state == "CANCELLED" and not nodes
    if killed_pending:
        start = 0
    if stat in FINISHED_STATES and not killed_pending:
        if slurm_state == "TIMEOUT":
            exit_code = RUNLIMIT_EXIT_CODE
        elif raw & 0x7F:
            exit_code = 128 + (raw & 0x7F)
        else:
            exit_code = (raw >> 8) & 0xFF
    cpus = _number(rec.get("cpus")) or 1
    exec_host = "" if stat in ("PEND", "PSUSP") or not nodes else (f"{cpus}*{nodes}" if cpus > 1 else nodes)
    name = str(rec.get("name", ""))
    if array_job and index:
        name = f"{name}[{index}]"
    limit = rec.get("time_limit")
    run_limit = _number(limit) if limit not in (None, "") else None
    return LsfJob(
        jobid=jobid,
        index=index,
        name=name,
        user=str(rec.get("user_name", "")),
        stat=stat,
        queue=str(rec.get("partition", "")),
        from_host=submit_host,
        exec_host=exec_host,
        slots=cpus,
        submit_time=_number(rec.get("submit_time")),
        start_time=start,
        finish_time=_number(rec.get("end_time")) if stat in FINISHED_STATES else 0,
        exit_code=exit_code,
        pend_reason=PEND_REASONS.get(reason, reason if reason != "None" else ""),
        dependency=str(rec.get("dependency", "") or ""),
        command=str(rec.get("command", "") or ""),
        cwd=str(rec.get("current_working_directory", "") or ""),
        output_file=str(rec.get("standard_output", "") or ""),
        error_file=str(rec.get("standard_error", "") or ""),
        run_limit_min=run_limit or None,
        slurm_state=slurm_state,
    )


def expand_pending_array(job: LsfJob, rec: dict[str, Any]) -> list[LsfJob]:
    """squeue shows an array's pending elements as one record (`array_task_string` 1-3)."""
    spec = str(rec.get("array_task_string", "") or "")
    if not spec or job.index:
        return [job]
    indices: list[int] = []
    for item in spec.split("%")[0].split(","):
        m = re.fullmatch(r"(\d+)(?:-(\d+)(?::(\d+))?)?", item.strip())
        if m:
            start = int(m.group(1))
            indices.extend(range(start, int(m.group(2) or start) + 1, int(m.group(3) or 1)))
    out = []
    for i in indices:
        base = job.name
        out.append(LsfJob(**{**job.__dict__, "index": i, "name": f"{base}[{i}]"}))
    return out


# --- bjobs -o -------------------------------------------------------------------------------------

# field name -> (header, default width); aliases map to the same column.
BJOBS_FIELDS: dict[str, tuple[str, int]] = {
    "jobid": ("JOBID", 7),
    "jobindex": ("JOBINDEX", 8),
    "stat": ("STAT", 5),
    "user": ("USER", 7),
    "queue": ("QUEUE", 10),
    "job_name": ("JOB_NAME", 10),
    "name": ("JOB_NAME", 10),
    "from_host": ("FROM_HOST", 11),
    "exec_host": ("EXEC_HOST", 11),
    "first_host": ("FIRST_HOST", 11),
    "nexec_host": ("NEXEC_HOST", 10),
    "submit_time": ("SUBMIT_TIME", 15),
    "start_time": ("START_TIME", 15),
    "finish_time": ("FINISH_TIME", 16),
    "exit_code": ("EXIT_CODE", 10),
    "exit_reason": ("EXIT_REASON", 50),
    "pend_reason": ("PEND_REASON", 11),
    "dependency": ("DEPENDENCY", 15),
    "command": ("COMMAND", 15),
    "slots": ("SLOTS", 5),
    "nalloc_slot": ("NALLOC_SLOT", 10),
    "min_req_proc": ("MIN_REQ_PROC", 12),
    "max_req_proc": ("MAX_REQ_PROC", 12),
    "run_time": ("RUN_TIME", 15),
    "sub_cwd": ("SUB_CWD", 15),
    "exec_cwd": ("EXEC_CWD", 15),
    "output_file": ("OUTPUT_FILE", 15),
    "error_file": ("ERROR_FILE", 15),
    "runtimelimit": ("RUNTIMELIMIT", 12),
    "gpu_num": ("GPU_NUM", 10),
}
DEFAULT_BJOBS_O = "jobid user stat queue from_host exec_host job_name submit_time"


@dataclass(frozen=True)
class OutputSpec:
    fields: tuple[tuple[str, int | None], ...]  # (field, explicit width or None)
    delimiter: str | None


def parse_output_spec(text: str) -> OutputSpec:
    """Parse bjobs `-o "field[:[-]width] ... [delimiter='c']"`."""
    delimiter = None
    m = re.search(r"delimiter\s*=\s*'(.*?)'", text)
    if m:
        delimiter = m.group(1)
        text = text[: m.start()] + text[m.end() :]
    fields: list[tuple[str, int | None]] = []
    for item in text.split():
        name, _, width = item.partition(":")
        key = name.lower()
        if key == "all":
            fields.extend((f, None) for f in BJOBS_FIELDS if f != "name")
            continue
        if key not in BJOBS_FIELDS:
            raise LsfError(f"Invalid field name <{name}>: bjobs -o")
        w = None
        if width:
            wm = re.fullmatch(r"-?(\d+)[A-Za-z]?", width)
            if not wm:
                raise LsfError(f"Invalid output width <{width}> for field <{name}>: bjobs -o")
            w = int(wm.group(1))
        fields.append((key, w))
    if not fields:
        raise LsfError("bjobs: -o needs at least one field name")
    return OutputSpec(tuple(fields), delimiter)


def field_value(job: LsfJob, name: str, now: float, hms: bool = False) -> str:
    """The value of one bjobs field; '' where LSF prints '-' (text) or "" (JSON)."""
    if name == "jobid":
        return job.jobid
    if name == "jobindex":
        return str(job.index)
    if name == "stat":
        return job.stat
    if name == "user":
        return job.user
    if name == "queue":
        return job.queue
    if name in ("job_name", "name"):
        return job.name
    if name == "from_host":
        return job.from_host
    if name in ("exec_host", "first_host"):
        return job.exec_host.split("*")[-1] if name == "first_host" else job.exec_host
    if name == "nexec_host":
        return "1" if job.exec_host else ""
    if name == "submit_time":
        return lsf_time(job.submit_time, hms)
    if name == "start_time":
        return lsf_time(job.start_time, hms)
    if name == "finish_time":
        if job.finished and job.finish_time:
            return lsf_time(job.finish_time, hms) + " L"
        if job.stat == "RUN" and job.run_limit_min:
            return lsf_time(job.start_time + job.run_limit_min * 60, hms) + " E"
        return ""
    if name == "exit_code":
        # LSF leaves EXIT_CODE empty for DONE jobs (exit 0) and for unfinished ones.
        if job.exit_code is None or (job.exit_code == 0 and job.stat != "EXIT"):
            return ""
        return str(job.exit_code)
    if name == "exit_reason":
        if job.slurm_state == "CANCELLED":
            return "TERM_OWNER: job killed by owner"
        if job.slurm_state == "TIMEOUT":
            return "TERM_RUNLIMIT: job killed after reaching LSF run time limit"
        return ""
    if name == "pend_reason":
        return job.pend_reason if job.stat in ("PEND", "PSUSP") else ""
    if name == "dependency":
        return job.dependency
    if name == "command":
        return job.command
    if name in ("slots", "nalloc_slot", "min_req_proc", "max_req_proc"):
        return "" if name == "nalloc_slot" and not job.exec_host else str(job.slots)
    if name == "run_time":
        if not job.start_time:
            return "0 second(s)"
        end = job.finish_time if job.finished and job.finish_time else now
        return f"{max(0, int(end - job.start_time))} second(s)"
    if name in ("sub_cwd", "exec_cwd"):
        return job.cwd
    if name == "output_file":
        return job.output_file
    if name == "error_file":
        return job.error_file
    if name == "runtimelimit":
        return f"{float(job.run_limit_min):.1f}/{job.from_host}" if job.run_limit_min else ""
    if name == "gpu_num":
        return ""
    raise LsfError(f"Invalid field name <{name}>: bjobs -o")


def _json_escape(value: str) -> str:
    # LSF escapes '/' as '\/'; json.loads reads both.
    return json.dumps(value, ensure_ascii=False).replace("/", "\\/")


def format_bjobs_json(
    spec: OutputSpec, jobs: list[LsfJob], errors: list[str], now: float, hms: bool = False
) -> str:
    """bjobs -json: upper-case keys, every value a string; unknown ids as records with ERROR."""
    records = []
    for job in jobs:
        items = [
            f'      "{BJOBS_FIELDS[f][0]}":{_json_escape(field_value(job, f, now, hms))}'
            for f, _ in spec.fields
        ]
        records.append("    {\n" + ",\n".join(items) + "\n    }")
    for err in errors:
        m = re.fullmatch(r"Job <(.*)> is not found", err)
        job_id = m.group(1) if m else ""
        records.append(
            f'    {{\n      "JOBID":{_json_escape(job_id)},\n      "ERROR":{_json_escape(err)}\n    }}'
        )
    body = ",\n".join(records)
    return (
        "{\n"
        '  "COMMAND":"bjobs",\n'
        f'  "JOBS":{len(records)},\n'
        '  "RECORDS":[\n' + (body + "\n" if body else "") + "  ]\n}"
    )


def format_bjobs_text(
    spec: OutputSpec, jobs: list[LsfJob], now: float, header: bool, hms: bool = False, wide: bool = False
) -> str:
    """bjobs -o text: '-' for empty values; a delimiter, or columns padded to their widths."""
    rows: list[list[str]] = []
    if header:
        rows.append([BJOBS_FIELDS[f][0] for f, _ in spec.fields])
    for job in jobs:
        rows.append([field_value(job, f, now, hms) or "-" for f, _ in spec.fields])
    lines = []
    for row in rows:
        if spec.delimiter is not None:
            lines.append(spec.delimiter.join(row))
            continue
        cells = []
        for (f, width), value in zip(spec.fields, row, strict=True):
            w = width if width is not None else BJOBS_FIELDS[f][1]
            if width is not None and not wide and len(value) > w:
                value = "*" + value[-(w - 1) :] if w > 1 else value[:w]
            cells.append(value.ljust(w))
        lines.append(" ".join(cells).rstrip())
    return "\n".join(lines)


def format_bjobs_default(jobs: list[LsfJob], wide: bool) -> str:
    """bjobs' default table; long names are cut with a leading '*' unless -w."""

    def cut(value: str, width: int) -> str:
        if wide or len(value) <= width:
            return value
        return "*" + value[-(width - 1) :]

    lines = ["JOBID   USER    STAT  QUEUE      FROM_HOST   EXEC_HOST   JOB_NAME   SUBMIT_TIME"]
    for j in jobs:
        lines.append(
            f"{cut(j.jobid, 7):<7} {cut(j.user, 7):<7} {j.stat:<5} {cut(j.queue, 10):<10} "
            f"{cut(j.from_host, 11):<11} {cut(j.exec_host, 11):<11} {cut(j.name, 10):<10} "
            f"{lsf_time(j.submit_time)}"
        )
    return "\n".join(lines)


# --- bkill ----------------------------------------------------------------------------------------


def bkill_message(display_id: str, outcome: str) -> tuple[str, str, int]:
    """(stdout, stderr, exit code) for one job: outcome is killed | finished | unknown."""
    if outcome == "killed":
        return f"Job <{display_id}> is being terminated", "", 0
    if outcome == "finished":
        return "", f"Job <{display_id}>: Job has already finished", 255
    return "", f"Job <{display_id}>: No matching job found", 255


# --- bhist ----------------------------------------------------------------------------------------


def bhist_times(job: LsfJob, now: float) -> dict[str, int]:
    end = job.finish_time if job.finished and job.finish_time else now
    if job.start_time:
        pend = max(0, job.start_time - job.submit_time)
        run = max(0, int(end - job.start_time))
    else:
        pend = max(0, int(end - job.submit_time))
        run = 0
    psusp = pend if job.stat == "PSUSP" else 0
    if psusp:
        pend = 0
    return {
        "PEND": int(pend),
        "PSUSP": int(psusp),
        "RUN": run,
        "USUSP": 0,
        "SSUSP": 0,
        "UNKWN": 0,
        "TOTAL": int(pend) + int(psusp) + run,
    }


def format_bhist_short(jobs: list[LsfJob], now: float) -> str:
    lines = [
        "Summary of time in seconds spent in various states:",
        "JOBID   USER    JOB_NAME  PEND    PSUSP   RUN     USUSP   SSUSP   UNKWN   TOTAL",
    ]
    for j in jobs:
        t = bhist_times(j, now)
        name = j.name if len(j.name) <= 9 else "*" + j.name[-8:]
        lines.append(
            f"{j.display_id:<7} {j.user[:7]:<7} {name:<9} {t['PEND']:<7} {t['PSUSP']:<7} {t['RUN']:<7} "
            f"{t['USUSP']:<7} {t['SSUSP']:<7} {t['UNKWN']:<7} {t['TOTAL']}"
        )
    return "\n".join(lines)


def format_bhist_long(job: LsfJob, now: float) -> str:
    out = [f"Job <{job.display_id}>, Job Name <{job.name}>, User <{job.user}>, Command <{job.command}>"]
    out.append(
        f"{lsf_long_time(job.submit_time)}: Submitted from host <{job.from_host}>, to Queue "
        f"<{job.queue}>, CWD <{job.cwd}>;"
    )
    if job.start_time:
        out.append(
            f"{lsf_long_time(job.start_time)}: Dispatched {job.slots} Task(s) on Host(s) "
            f"<{job.exec_host.split('*')[-1]}>;"
        )
        out.append(f"{lsf_long_time(job.start_time)}: Starting (Pid unknown);")
    if job.finished and job.finish_time:
        if job.stat == "DONE":
            out.append(f"{lsf_long_time(job.finish_time)}: Done successfully. The CPU time used is unknown.")
        elif job.exit_code is not None:
            out.append(
                f"{lsf_long_time(job.finish_time)}: Exited with exit code {job.exit_code}. "
                "The CPU time used is unknown."
            )
        else:
            out.append(f"{lsf_long_time(job.finish_time)}: Exited; job has been forced to exit.")
    t = bhist_times(job, now)
    out.append("")
    out.append("Summary of time in seconds spent in various states by  " + lsf_long_time(now))
    out.append("  PEND     PSUSP    RUN      USUSP    SSUSP    UNKWN    TOTAL")
    out.append(
        "  "
        + " ".join(
            f"{t[k]:<8}" for k in ("PEND", "PSUSP", "RUN", "USUSP", "SSUSP", "UNKWN", "TOTAL")
        ).rstrip()
    )
    return "\n".join(out)
